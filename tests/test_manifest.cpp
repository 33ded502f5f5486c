// manifest.json: round trip, field-naming validation, atomic writes.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/manifest.h"
#include "test_util.h"

namespace {

using dscache::Error;
using dscache::ErrorKind;
using dscache::Manifest;
using Json = nlohmann::json;

using namespace dscache::test;

// Every field set to a value different from its default.
Manifest full_manifest() {
  Manifest m;
  m.format_version = 1;
  m.layout = dscache::Layout::kFixed;
  m.storage = dscache::Storage::kHdf5;
  m.dtype = "uint8";
  m.height = 32;
  m.width = 48;
  m.channels = 3;
  m.channel_order = "RGB";
  m.count = 2500;
  m.classes = {"cat", "dog", "émeu"};
  m.class_counts = {1000, 1000, 500};
  m.shards = {
      {"images-00000.h5", 0, 1000, 4608123, 0xFFFFFFFFFFFFFFFFULL},
      {"images-00001.h5", 1000, 1000, 4608123, 0x0000000000000001ULL},
      {"images-00002.h5", 2000, 500, 2304999, 0x0123456789ABCDEFULL},
  };
  m.labels = {"labels.npy", 20128, 0xDEADBEEFCAFEF00DULL};
  m.checksums = {"checksums.npy", 20128, 0x1111111111111111ULL};
  m.sources = {"sources.jsonl", 77777, 0x2222222222222222ULL};
  m.skips = {"skipped.jsonl", 42, 0x3333333333333333ULL};
  m.skipped = 3;
  m.source = {"folder", "/data/pets", "", 2503, 0xFEDCBA9876543210ULL};
  m.recipe.height = 32;
  m.recipe.width = 48;
  m.recipe.channels = 3;
  m.recipe.resize = dscache::ResizePolicy::kPad;
  m.recipe.reduced_decode = false;
  m.recipe.max_pixels = 100000000;
  m.recipe.shard_bytes = 4608000;
  m.tool_version = "0.1.0";
  m.created_utc = "2024-06-01T12:34:56Z";
  return m;
}

// A valid ragged manifest: shape [0, 0, C], an index, recipe.max_side.
Manifest ragged_manifest() {
  Manifest m = full_manifest();
  m.layout = dscache::Layout::kRagged;
  m.storage = dscache::Storage::kNpy;
  m.height = 0;
  m.width = 0;
  for (size_t i = 0; i < m.shards.size(); ++i)
    m.shards[i].file = "images-0000" + std::to_string(i) + ".npy";
  m.index = {"ragged-index.npy", 60128, 0x4444444444444444ULL};
  m.recipe.height = 0;
  m.recipe.width = 0;
  m.recipe.max_side = 160;
  return m;
}

// The error manifest_from_json refuses `j` with (as read from /x/manifest.json); a FAIL when it
// accepts it.
Error refusal(const Json& j) {
  try {
    dscache::manifest_from_json(j.dump(), "/x/manifest.json");
  } catch (const Error& e) {
    return e;
  }
  FAIL("accepted");
  return Error(ErrorKind::kInvalidArgument, "", "unreachable");
}

void check_equal(const Manifest& a, const Manifest& b) {
  CHECK(a.format_version == b.format_version);
  CHECK(a.layout == b.layout);
  CHECK(a.storage == b.storage);
  CHECK(a.dtype == b.dtype);
  CHECK(a.height == b.height);
  CHECK(a.width == b.width);
  CHECK(a.channels == b.channels);
  CHECK(a.channel_order == b.channel_order);
  CHECK(a.count == b.count);
  CHECK(a.classes == b.classes);
  CHECK(a.class_counts == b.class_counts);
  REQUIRE(a.shards.size() == b.shards.size());
  for (size_t i = 0; i < a.shards.size(); ++i) {
    CAPTURE(i);
    CHECK(a.shards[i].file == b.shards[i].file);
    CHECK(a.shards[i].first == b.shards[i].first);
    CHECK(a.shards[i].count == b.shards[i].count);
    CHECK(a.shards[i].bytes == b.shards[i].bytes);
    CHECK(a.shards[i].xxh64 == b.shards[i].xxh64);
  }
  const std::pair<const dscache::FileEntry*, const dscache::FileEntry*> files[] = {
      {&a.labels, &b.labels},
      {&a.checksums, &b.checksums},
      {&a.sources, &b.sources},
      {&a.skips, &b.skips},
      {&a.index, &b.index}};
  for (const auto& f : files) {
    CHECK(f.first->file == f.second->file);
    CHECK(f.first->bytes == f.second->bytes);
    CHECK(f.first->xxh64 == f.second->xxh64);
  }
  CHECK(a.skipped == b.skipped);
  CHECK(a.source.kind == b.source.kind);
  CHECK(a.source.root == b.source.root);
  CHECK(a.source.labels == b.source.labels);
  CHECK(a.source.entries == b.source.entries);
  CHECK(a.source.digest == b.source.digest);
  CHECK(a.recipe.height == b.recipe.height);
  CHECK(a.recipe.width == b.recipe.width);
  CHECK(a.recipe.channels == b.recipe.channels);
  CHECK(a.recipe.resize == b.recipe.resize);
  CHECK(a.recipe.reduced_decode == b.recipe.reduced_decode);
  CHECK(a.recipe.max_pixels == b.recipe.max_pixels);
  CHECK(a.recipe.shard_bytes == b.recipe.shard_bytes);
  CHECK(a.recipe.max_side == b.recipe.max_side);
  CHECK(a.recipe.shuffled == b.recipe.shuffled);
  CHECK(a.recipe.shuffle_seed == b.recipe.shuffle_seed);
  CHECK(a.tool_version == b.tool_version);
  CHECK(a.created_utc == b.created_utc);
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("a fully populated manifest round-trips through JSON") {
    const Manifest m = full_manifest();
    const std::string text = dscache::to_json(m);
    check_equal(dscache::manifest_from_json(text, "m.json"), m);
    // The documented shapes of the stored values.
    const Json j = Json::parse(text);
    CHECK(j["shape"] == Json::array({32, 48, 3}));
    CHECK(j["shards"][2]["xxh64"] == "0123456789abcdef");
    CHECK(j["shards"][0]["xxh64"] == "ffffffffffffffff");
    CHECK(j["files"]["labels"]["xxh64"] == "deadbeefcafef00d");
    CHECK(j["source"]["digest"] == "fedcba9876543210");
    CHECK(j["storage"] == "hdf5");
    CHECK(j["recipe"]["resize"] == "pad");
    CHECK(j["format_version"] == 1);
    CHECK(text.back() == '\n');
    // A grey, npy, ragged variant too.
    Manifest g = m;
    g.storage = dscache::Storage::kNpy;
    g.layout = dscache::Layout::kRagged;
    g.height = 0;
    g.width = 0;
    g.index = {"ragged-index.npy", 60128, 0x4444444444444444ULL};
    g.recipe.max_side = 256;
    g.channels = 1;
    g.channel_order = "L";
    g.recipe.resize = dscache::ResizePolicy::kStretch;
    g.recipe.reduced_decode = true;
    g.source = {"idx", "/usr/share/x/train-images-idx3-ubyte.gz",
                "/usr/share/x/train-labels-idx1-ubyte.gz", 2500, 0};
    check_equal(dscache::manifest_from_json(dscache::to_json(g), "g.json"), g);
    // An empty cache is a valid cache.
    Manifest e = full_manifest();
    e.count = 0;
    e.shards.clear();
    e.class_counts = {0, 0, 0};
    check_equal(dscache::manifest_from_json(dscache::to_json(e), "e.json"), e);
  }

  TEST_CASE("ragged: shape [0, 0, C], files.index and recipe.max_side round-trip") {
    const Manifest r = ragged_manifest();
    const std::string text = dscache::to_json(r);
    const Json j = Json::parse(text);
    CHECK(j["layout"] == "ragged");
    CHECK(j["shape"] == Json::array({0, 0, 3}));
    CHECK(j["files"]["index"]["file"] == "ragged-index.npy");
    CHECK(j["files"]["index"]["xxh64"] == "4444444444444444");
    CHECK(j["recipe"]["max_side"] == 160);
    const Manifest back = dscache::manifest_from_json(text, "r.json");
    check_equal(back, r);
    CHECK(back.sample_bytes() == 0);
    // The fixed layout writes max_side (0) but no index.
    const Json f = Json::parse(dscache::to_json(full_manifest()));
    CHECK(f["recipe"]["max_side"] == 0);
    CHECK_FALSE(f["files"].contains("index"));
    // A manifest from before max_side existed reads as 0, and its index as empty.
    Json old = f;
    old["recipe"].erase("max_side");
    const Manifest m = dscache::manifest_from_json(old.dump(), "old.json");
    CHECK(m.recipe.max_side == 0);
    CHECK(m.index.file.empty());
    check_equal(m, full_manifest());
  }

  TEST_CASE("recipe.shuffle_seed: only when shuffled, any 64-bit seed, absent = source order") {
    const Json plain = Json::parse(dscache::to_json(full_manifest()));
    CHECK_FALSE(plain["recipe"].contains("shuffle_seed"));
    CHECK_FALSE(dscache::manifest_from_json(plain.dump(), "p.json").recipe.shuffled);
    for (uint64_t seed : {uint64_t{0}, uint64_t{7}, ~uint64_t{0}}) {
      Manifest m = full_manifest();
      m.recipe.shuffled = true;
      m.recipe.shuffle_seed = seed;
      const std::string text = dscache::to_json(m);
      CHECK(Json::parse(text)["recipe"]["shuffle_seed"].get<uint64_t>() == seed);
      const Manifest back = dscache::manifest_from_json(text, "s.json");
      CHECK(back.recipe.shuffled);
      check_equal(back, m);
    }
    for (const Json bad : {Json(-1), Json("7"), Json(1.5)}) {
      Json j = plain;
      j["recipe"]["shuffle_seed"] = bad;
      CHECK_THROWS_WITH_AS(dscache::manifest_from_json(j.dump(), "bad.json"),
                           doctest::Contains("recipe.shuffle_seed"), dscache::Error);
    }
  }

  TEST_CASE("recipe.alpha, recipe.background and transparent: optional, round-trip, checked") {
    const Json plain = Json::parse(dscache::to_json(full_manifest()));
    CHECK_FALSE(plain["recipe"].contains("alpha"));  // drop: absent, as before --alpha
    CHECK_FALSE(plain.contains("transparent"));      // not counted: absent
    const Manifest old = dscache::manifest_from_json(plain.dump(), "p.json");
    CHECK(old.recipe.alpha == dscache::AlphaMode::kDrop);
    CHECK_FALSE(old.transparent_known);

    Manifest m = full_manifest();
    m.recipe.alpha = dscache::AlphaMode::kComposite;
    m.recipe.background[0] = 0, m.recipe.background[1] = 128, m.recipe.background[2] = 255;
    m.transparent_known = true;
    m.transparent = 17;
    Json j = Json::parse(dscache::to_json(m));
    CHECK(j["recipe"]["alpha"] == "composite");
    CHECK(j["recipe"]["background"] == Json::array({0, 128, 255}));
    CHECK(j["transparent"] == 17);
    Manifest back = dscache::manifest_from_json(j.dump(), "c.json");
    CHECK(back.recipe.alpha == dscache::AlphaMode::kComposite);
    CHECK(back.recipe.background[1] == 128);
    CHECK(back.transparent == 17);
    check_equal(back, m);

    m.recipe.alpha = dscache::AlphaMode::kKeep;  // RGBA: 4 channels
    m.channels = m.recipe.channels = 4;
    m.channel_order = "RGBA";
    j = Json::parse(dscache::to_json(m));
    CHECK_FALSE(j["recipe"].contains("background"));
    back = dscache::manifest_from_json(j.dump(), "k.json");
    CHECK(back.channels == 4);
    CHECK(back.recipe.alpha == dscache::AlphaMode::kKeep);

    struct Bad {
      const char* key;  // JSON pointer
      Json value;
      const char* message;
    };
    const Json composite = Json::parse(dscache::to_json([] {
      Manifest c = full_manifest();
      c.recipe.alpha = dscache::AlphaMode::kComposite;
      return c;
    }()));
    const Bad bad[] = {
        {"/recipe/alpha", "blend", "recipe.alpha"},
        {"/recipe/alpha", "keep", "4 channels (RGBA) go with alpha 'keep' only"},
        {"/recipe/background", Json::array({1, 2}), "recipe.background has 2 elements"},
        {"/recipe/background", Json::array({1, 2, 256}), "recipe.background[2] is 256"},
        {"/recipe/background", "white", "recipe.background"},
        {"/transparent", -1, "transparent"},
        {"/transparent", 2501, "transparent is 2501, more than count (2500)"},
        {"/shape/2", 2, "shape[2] is 2, expected 1, 3 or 4 channels"},
    };
    for (const Bad& b : bad) {
      CAPTURE(b.key);
      Json k = composite;
      k[Json::json_pointer(b.key)] = b.value;
      CHECK(std::string(refusal(k).what()).find(b.message) != std::string::npos);
    }
    Json k = composite;  // composite without its background
    k["recipe"].erase("background");
    CHECK(std::string(refusal(k).what()).find("background") != std::string::npos);
    k = Json::parse(dscache::to_json(m));  // 4 channels whose order is not RGBA
    k["channel_order"] = "RGB";
    CHECK(std::string(refusal(k).what()).find("channel_order is 'RGB'") != std::string::npos);
  }

  TEST_CASE("ragged and fixed layout rules are enforced, naming the field") {
    struct Case {
      const char* name;
      bool ragged;  // mutate the ragged manifest (else the fixed one)
      std::function<void(Json&)> mutate;
      const char* message;
    };
    const Case cases[] = {
        {"ragged with a height", true, [](Json& j) { j["shape"][0] = 32; },
         "shape[0] is 32, expected 0 for the ragged layout"},
        {"ragged with a width", true, [](Json& j) { j["shape"][1] = 1; },
         "shape[1] is 1, expected 0 for the ragged layout"},
        {"ragged with zero channels", true, [](Json& j) { j["shape"][2] = 0; }, "shape[2] is 0"},
        {"ragged without files.index", true, [](Json& j) { j["files"].erase("index"); },
         "files.index is missing"},
        {"ragged index with a slash", true,
         [](Json& j) { j["files"]["index"]["file"] = "../ragged-index.npy"; },
         "files.index.file is '../ragged-index.npy'"},
        {"ragged index without bytes", true, [](Json& j) { j["files"]["index"].erase("bytes"); },
         "files.index.bytes is missing"},
        {"ragged without max_side", true, [](Json& j) { j["recipe"].erase("max_side"); },
         "recipe.max_side is 0"},
        {"ragged with max_side 0", true, [](Json& j) { j["recipe"]["max_side"] = 0; },
         "recipe.max_side is 0"},
        {"max_side negative", true, [](Json& j) { j["recipe"]["max_side"] = -5; },
         "recipe.max_side is -5"},
        {"fixed with an index", false,
         [](Json& j) {
           j["files"]["index"] = {
               {"file", "ragged-index.npy"}, {"bytes", 1}, {"xxh64", "0000000000000000"}};
         },
         "files.index is present"},
        {"fixed with zero height", false, [](Json& j) { j["shape"][0] = 0; },
         "shape[0] is 0, expected a positive"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.name);
      Json j = Json::parse(dscache::to_json(c.ragged ? ragged_manifest() : full_manifest()));
      c.mutate(j);
      const Error e = refusal(j);
      CAPTURE(e.what());
      CHECK(e.kind() == ErrorKind::kCorruption);
      CHECK(std::string(e.what()).find(c.message) != std::string::npos);
    }
    // write_manifest refuses what the reader would refuse.
    TempDir dir;
    Manifest bad = ragged_manifest();
    bad.index = {};
    CHECK_THROWS_WITH_AS(dscache::write_manifest(dir.path(), bad), doctest::Contains("files.index"),
                         Error);
    bad = ragged_manifest();
    bad.height = 8;
    CHECK_THROWS_WITH_AS(dscache::write_manifest(dir.path(), bad), doctest::Contains("shape[0]"),
                         Error);
  }

  TEST_CASE("unknown extra keys are ignored; uppercase hex is read") {
    Json j = Json::parse(dscache::to_json(full_manifest()));
    j["future_field"] = {{"x", 1}};
    j["shards"][0]["future"] = "y";
    j["recipe"]["new_knob"] = true;
    j["shards"][2]["xxh64"] = "0123456789ABCDEF";
    const Manifest m = dscache::manifest_from_json(j.dump(), "m.json");
    check_equal(m, full_manifest());
  }

  TEST_CASE("each single-field corruption is rejected, naming the field") {
    struct Case {
      const char* name;
      std::function<void(Json&)> mutate;
      ErrorKind kind;
      const char* message;  // must appear in what()
    };
    const Case cases[] = {
        {"non-contiguous shards", [](Json& j) { j["shards"][1]["first"] = 900; },
         ErrorKind::kCorruption, "shards[1].first is 900, expected 1000"},
        {"gap before last shard", [](Json& j) { j["shards"][2]["first"] = 2001; },
         ErrorKind::kCorruption, "shards[2].first is 2001, expected 2000"},
        {"count mismatch", [](Json& j) { j["count"] = 2600; }, ErrorKind::kCorruption,
         "count is 2600"},
        {"shard count mismatch", [](Json& j) { j["shards"][2]["count"] = 499; },
         ErrorKind::kCorruption, "shards cover 2499 samples, count is 2500"},
        {"class_counts sum", [](Json& j) { j["class_counts"][1] = 999; }, ErrorKind::kCorruption,
         "class_counts sum to 2499"},
        {"class_counts length", [](Json& j) { j["class_counts"].erase(2); }, ErrorKind::kCorruption,
         "class_counts has 2 entries"},
        {"slash in shard name", [](Json& j) { j["shards"][0]["file"] = "../images-00000.h5"; },
         ErrorKind::kCorruption, "shards[0].file"},
        {"dot-dot file name", [](Json& j) { j["files"]["labels"]["file"] = ".."; },
         ErrorKind::kCorruption, "files.labels.file is '..'"},
        {"dot file name", [](Json& j) { j["files"]["skips"]["file"] = "."; },
         ErrorKind::kCorruption, "files.skips.file"},
        {"absolute file name", [](Json& j) { j["files"]["sources"]["file"] = "/etc/passwd"; },
         ErrorKind::kCorruption, "files.sources.file"},
        {"empty file name", [](Json& j) { j["files"]["checksums"]["file"] = ""; },
         ErrorKind::kCorruption, "files.checksums.file is empty"},
        {"NUL in file name", [](Json& j) { j["shards"][1]["file"] = std::string("a\0b", 3); },
         ErrorKind::kCorruption, "shards[1].file contains a NUL"},
        {"unknown storage", [](Json& j) { j["storage"] = "zarr"; }, ErrorKind::kCorruption,
         "storage is 'zarr', expected one of npy, hdf5"},
        {"unknown layout", [](Json& j) { j["layout"] = "jagged"; }, ErrorKind::kCorruption,
         "layout is 'jagged', expected one of fixed, ragged"},
        {"unknown resize", [](Json& j) { j["recipe"]["resize"] = "squash"; },
         ErrorKind::kCorruption, "recipe.resize is 'squash', expected one of stretch, crop, pad"},
        {"negative shape", [](Json& j) { j["shape"][0] = -32; }, ErrorKind::kCorruption,
         "shape[0] is -32"},
        {"zero shape", [](Json& j) { j["shape"][1] = 0; }, ErrorKind::kCorruption, "shape[1] is 0"},
        {"float shape", [](Json& j) { j["shape"][1] = 4.5; }, ErrorKind::kCorruption,
         "shape[1] is a float"},
        {"two-element shape", [](Json& j) { j["shape"].erase(2); }, ErrorKind::kCorruption,
         "shape has 2 elements"},
        {"five channels", [](Json& j) { j["shape"][2] = 5; }, ErrorKind::kCorruption,
         "shape[2] is 5"},
        {"channel order", [](Json& j) { j["channel_order"] = "BGR"; }, ErrorKind::kCorruption,
         "channel_order is 'BGR'"},
        {"dtype", [](Json& j) { j["dtype"] = "float32"; }, ErrorKind::kCorruption,
         "dtype is 'float32'"},
        {"format_version 99", [](Json& j) { j["format_version"] = 99; }, ErrorKind::kUnsupported,
         "format_version is 99"},
        {"format_version 0", [](Json& j) { j["format_version"] = 0; }, ErrorKind::kCorruption,
         "format_version is 0"},
        {"format_version string", [](Json& j) { j["format_version"] = "1"; },
         ErrorKind::kCorruption, "format_version"},
        {"missing count", [](Json& j) { j.erase("count"); }, ErrorKind::kCorruption,
         "count is missing"},
        {"missing shards", [](Json& j) { j.erase("shards"); }, ErrorKind::kCorruption,
         "shards is missing"},
        {"missing files.labels", [](Json& j) { j["files"].erase("labels"); },
         ErrorKind::kCorruption, "files.labels is missing"},
        {"missing shard xxh64", [](Json& j) { j["shards"][2].erase("xxh64"); },
         ErrorKind::kCorruption, "shards[2].xxh64 is missing"},
        {"missing recipe field", [](Json& j) { j["recipe"].erase("shard_bytes"); },
         ErrorKind::kCorruption, "recipe.shard_bytes is missing"},
        {"missing source digest", [](Json& j) { j["source"].erase("digest"); },
         ErrorKind::kCorruption, "source.digest is missing"},
        {"short checksum", [](Json& j) { j["shards"][0]["xxh64"] = "abc"; }, ErrorKind::kCorruption,
         "shards[0].xxh64 is 'abc', expected 16 hex digits"},
        {"non-hex checksum", [](Json& j) { j["files"]["labels"]["xxh64"] = "zzzzzzzzzzzzzzzz"; },
         ErrorKind::kCorruption, "files.labels.xxh64"},
        {"checksum as number", [](Json& j) { j["shards"][0]["xxh64"] = 12; },
         ErrorKind::kCorruption, "shards[0].xxh64 is a number"},
        {"negative bytes", [](Json& j) { j["shards"][1]["bytes"] = -1; }, ErrorKind::kCorruption,
         "shards[1].bytes is -1"},
        {"count as string", [](Json& j) { j["count"] = "2500"; }, ErrorKind::kCorruption,
         "count is a string"},
        {"class name not a string", [](Json& j) { j["classes"][1] = 7; }, ErrorKind::kCorruption,
         "classes[1] is a number"},
        {"shards not an array", [](Json& j) { j["shards"] = Json::object(); },
         ErrorKind::kCorruption, "shards is an object"},
        {"shard not an object", [](Json& j) { j["shards"][1] = 5; }, ErrorKind::kCorruption,
         "shards[1] is not an object"},
        {"reduced_decode not bool", [](Json& j) { j["recipe"]["reduced_decode"] = 1; },
         ErrorKind::kCorruption, "recipe.reduced_decode"},
        {"recipe height too big", [](Json& j) { j["recipe"]["height"] = 1ULL << 33; },
         ErrorKind::kCorruption, "recipe.height"},
        {"top level is an array",
         [](Json& j) {
           j = Json::array({1, 2});
         },
         ErrorKind::kCorruption, "not a JSON object"},
    };
    const std::string good = dscache::to_json(full_manifest());
    for (const Case& c : cases) {
      CAPTURE(c.name);
      Json j = Json::parse(good);
      c.mutate(j);
      const Error e = refusal(j);
      CAPTURE(e.what());
      CHECK(e.kind() == c.kind);
      CHECK(e.path() == "/x/manifest.json");
      const std::string prefix = std::string(dscache::to_string(c.kind)) + ": /x/manifest.json: ";
      CHECK(std::string(e.what()).rfind(prefix, 0) == 0);
      CHECK(std::string(e.what()).find(c.message) != std::string::npos);
    }
  }

  TEST_CASE("text that is not JSON is Corruption") {
    for (const char* text : {"", "not json at all", "{\"count\": ", "{'single': 1}", "\x89PNG"}) {
      CAPTURE(text);
      CHECK_THROWS_WITH_AS(dscache::manifest_from_json(text, "/x/manifest.json"),
                           doctest::Contains("Corruption: /x/manifest.json: not valid JSON"),
                           Error);
    }
  }

  TEST_CASE("read_manifest: NotFound for a missing dir or missing manifest, naming the path") {
    TempDir dir;
    const std::string missing = dir.path() + "/no-such-cache";
    try {
      dscache::read_manifest(missing);
      FAIL("accepted a missing directory");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kNotFound);
      CHECK(std::string(e.what()).find(missing) != std::string::npos);
    }
    try {
      dscache::read_manifest(dir.path());  // exists, but holds no manifest.json
      FAIL("accepted a directory without manifest.json");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kNotFound);
      CHECK(e.path() == dir.path() + "/manifest.json");
    }
    {
      std::ofstream out(dir.path() + "/manifest.json");
      out << "{ broken";
    }
    const std::string want = "Corruption: " + dir.path() + "/manifest.json";
    CHECK_THROWS_WITH_AS(dscache::read_manifest(dir.path()), doctest::Contains(want.c_str()),
                         Error);
  }

  TEST_CASE("write_manifest then read_manifest; no temp files left; invalid refused") {
    TempDir dir;
    const Manifest m = full_manifest();
    dscache::write_manifest(dir.path(), m);
    check_equal(dscache::read_manifest(dir.path()), m);
    // Overwrite in place (a second write replaces the first atomically).
    Manifest m2 = m;
    m2.tool_version = "0.2.0";
    dscache::write_manifest(dir.path(), m2);
    CHECK(dscache::read_manifest(dir.path()).tool_version == "0.2.0");
    CHECK(list_dir(dir.path()) == std::vector<std::string>{"manifest.json"});

    Manifest bad = m;
    bad.shards[1].first = 5;
    CHECK_THROWS_WITH_AS(dscache::write_manifest(dir.path(), bad),
                         doctest::Contains("shards[1].first is 5"), Error);
    CHECK(dscache::read_manifest(dir.path()).tool_version == "0.2.0");
    CHECK(list_dir(dir.path()) == std::vector<std::string>{"manifest.json"});
    CHECK_THROWS_WITH_AS(dscache::write_manifest(dir.path() + "/missing", m),
                         doctest::Contains("IOError"), Error);
  }
}
