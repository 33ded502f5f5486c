// Fixtures of the manifest tests (test_manifest*.cpp): manifests with every field set, fixed and
// ragged; the error a manifest is refused with; a field-by-field comparison.
#pragma once

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "dscache/error.h"
#include "dscache/manifest.h"
#include "test_util.h"

namespace dscache::test {

// Every field set to a value different from its default.
inline Manifest full_manifest() {
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
inline Manifest ragged_manifest() {
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
inline Error refusal(const nlohmann::json& j) {
  try {
    dscache::manifest_from_json(j.dump(), "/x/manifest.json");
  } catch (const Error& e) {
    return e;
  }
  FAIL("accepted");
  return Error(ErrorKind::kInvalidArgument, "", "unreachable");
}

inline void check_equal(const Manifest& a, const Manifest& b) {
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

}  // namespace dscache::test
