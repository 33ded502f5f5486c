// manifest.json: round trip, layout rules, read and atomic writes. Corruptions, each naming its
// field, are in test_manifest_corrupt.cpp.
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
#include "manifest_fixtures.h"
#include "test_util.h"

namespace {

using dscache::Error;
using dscache::ErrorKind;
using dscache::Manifest;
using Json = nlohmann::json;

using namespace dscache::test;

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
