// manifest.json: each single-field corruption and text that is not JSON are refused, naming the
// field.
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
}
