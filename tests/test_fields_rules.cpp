// The rules a field's values follow on both sides (docs/FORMAT.md "Fields"): what the writer
// refuses (non-finite floats unless the field allows them) and what every reader checks at open
// (CacheDir::check_open, which Cache::open runs: checksums.npy's shape, a v1 manifest with
// fields, a rows_of field's row counts) or on reading a value (text is UTF-8).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/cache.h"
#include "dscache/cache_dir.h"
#include "dscache/cache_writer.h"
#include "dscache/error.h"
#include "dscache/fields.h"
#include "dscache/manifest.h"
#include "dscache/npy.h"
#include "field_fixtures.h"
#include "test_util.h"

using namespace dscache;  // NOLINT(build/namespaces)
using namespace dscache::test;

namespace {

// score (float32 scalar, NaN allowed), boxes, box_labels (rows_of boxes), caption (text).
std::vector<FieldSpec> fields() {
  std::vector<FieldSpec> f = {
      field_spec("score", FieldKind::kScalar, FieldType::kFloat32),
      field_spec("boxes", FieldKind::kBoxes, FieldType::kFloat32, {4}),
      field_spec("box_labels", FieldKind::kRows, FieldType::kInt64, {}, "boxes"),
      field_spec("caption", FieldKind::kText, FieldType::kUint8)};
  f[0].allow_nonfinite = true;
  return f;
}

// 6 samples of 4x4 in 2 shards; sample i has 1 + i % 2 boxes, score NaN for i == 2.
void write_cache(const std::string& out) {
  CacheWriterOptions o;
  o.recipe.height = 4;
  o.recipe.width = 4;
  o.recipe.channels = 3;
  o.recipe.shard_bytes = 3 * 4 * 4 * 3;
  o.classes = {"a"};
  o.fields = fields();
  o.tool_version = "test";
  o.created_utc = "2024-01-01T00:00:00Z";
  auto w = CacheWriter::open(out, o);
  for (uint64_t i = 0; i < 6; ++i) {
    std::vector<uint8_t> px(4 * 4 * 3, uint8_t(i));
    const float score = i == 2 ? std::numeric_limits<float>::quiet_NaN() : float(i);
    const std::vector<float> boxes = {0, 0, 2, 2, 1, 1, 4, 4};
    const std::vector<int64_t> labels = {0, 0};
    const uint64_t n = 1 + i % 2;
    const std::string caption = "caf\xc3\xa9 " + std::to_string(i);
    const FieldData v[4] = {{&score, 4},
                            {boxes.data(), 16 * n},
                            {labels.data(), 8 * n},
                            {caption.data(), caption.size()}};
    w->append(px.data(), 4, 4, 0, "s" + std::to_string(i), nullptr, v);
  }
  w->publish();
}

// The manifest's entry of NAME made to agree with the file again (size and XXH64).
void refresh(const std::string& out, const std::string& name) {
  Manifest m = read_manifest(out);
  FileEntry now = hash_file(out + "/" + name);
  now.file = name;
  if (m.checksums.file == name) m.checksums = now;
  for (ShardEntry& s : m.shards) {
    for (FieldFiles& f : s.fields) {
      if (f.values.file == name) f.values = now;
      if (f.offsets.file == name) f.offsets = now;
    }
  }
  write_manifest(out, m);
}

// Cache::open and CacheDir::check_open refuse `out` alike: Corruption naming `file`.
void both_refuse(const std::string& out, const std::string& file, const std::string& says) {
  INFO(file << ": " << says);
  const Error a = expect_error([&] { Cache::open(out); }, ErrorKind::kCorruption, {file, says});
  const Error b = expect_error([&] { CacheDir::open(out)->check_open(); }, ErrorKind::kCorruption,
                               {file, says});
  CHECK(std::string(a.what()) == b.what());
}

}  // namespace

TEST_SUITE("fields") {
  TEST_CASE("float32 values must be finite unless the field allows NaN and inf") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    const float row[2] = {1, -inf};
    for (FieldSpec f : {field_spec("s", FieldKind::kScalar, FieldType::kFloat32),
                        field_spec("a", FieldKind::kArray, FieldType::kFloat32, {2}),
                        field_spec("r", FieldKind::kRows, FieldType::kFloat32, {2})}) {
      INFO(f.name);
      const FieldData v{f.kind == FieldKind::kScalar ? &nan : static_cast<const void*>(row),
                        f.kind == FieldKind::kScalar ? 4u : 8u};
      CHECK(invalid_argument_message([&] {
              check_field_value(f, v, 4, 4, "x.png");
            }).find("allow_nonfinite") != std::string::npos);
      f.allow_nonfinite = true;
      CHECK(check_field_value(f, v, 4, 4, "x.png") == 1);
    }
    // allow_nonfinite applies to float32 kinds other than boxes only.
    for (FieldSpec f : {field_spec("i", FieldKind::kScalar, FieldType::kInt64),
                        field_spec("b", FieldKind::kBoxes, FieldType::kFloat32, {4}),
                        field_spec("m", FieldKind::kMask, FieldType::kUint8)}) {
      f.allow_nonfinite = true;
      CHECK(invalid_argument_message([&] {
              validate_field(f, "fields");
            }).find("allow_nonfinite") != std::string::npos);
    }
    // The writer refuses NaN in a field without it, naming the field and the source.
    TempDir tmp;
    CacheWriterOptions o;
    o.recipe.height = o.recipe.width = 2;
    o.recipe.channels = 1;
    o.recipe.shard_bytes = 1024;
    o.fields = {field_spec("target", FieldKind::kScalar, FieldType::kFloat32)};
    auto w = CacheWriter::open(tmp.path() + "/c", o);
    std::vector<uint8_t> px(4);
    const FieldData v{&nan, 4};
    expect_error([&] { w->append(px.data(), 2, 2, 0, "a.png", nullptr, &v); },
                 ErrorKind::kInvalidArgument, {"a.png", "field 'target'", "value 0 is nan"});
    CHECK(w->count() == 0);
  }

  TEST_CASE("allow_nonfinite is kept in the manifest, and a NaN it allows is served") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c";
    write_cache(out);
    const Manifest m = read_manifest(out);
    REQUIRE(m.fields == fields());
    CHECK(m.fields[0].allow_nonfinite);
    CHECK_FALSE(m.fields[1].allow_nonfinite);
    CHECK(read_all(out + "/manifest.json").find("\"allow_nonfinite\": true") != std::string::npos);
    auto c = Cache::open(out);
    float v = 0;
    c->copy_field(2, 0, reinterpret_cast<uint8_t*>(&v));
    CHECK(std::isnan(v));
  }
}

TEST_SUITE("fields") {
  TEST_CASE("Cache::open runs every open-time check, through CacheDir::check_open") {
    TempDir tmp;
    const std::string good = tmp.path() + "/good", out = tmp.path() + "/c";
    write_cache(good);
    CHECK_NOTHROW(CacheDir::open(good)->check_open());
    auto fresh = [&] {
      std::filesystem::remove_all(out);
      std::filesystem::copy(good, out);
    };
    const std::vector<uint64_t> sums = CacheDir::open(good)->checksums();  // (6, 5)
    REQUIRE(sums.size() == 30);
    SUBCASE("checksums.npy of (count,)") {
      fresh();
      write_npy_file(out + "/checksums.npy", "<u8", {6}, sums.data(), 6 * 8);
      refresh(out, "checksums.npy");
      both_refuse(out, "checksums.npy", "shape is (6,), expected (6, 5)");
    }
    SUBCASE("checksums.npy of (count, F + 2)") {
      fresh();
      std::vector<uint64_t> wide(36, 0);
      write_npy_file(out + "/checksums.npy", "<u8", {6, 6}, wide.data(), wide.size() * 8);
      refresh(out, "checksums.npy");
      both_refuse(out, "checksums.npy", "shape is (6, 6), expected (6, 5)");
    }
    SUBCASE("checksums.npy transposed") {
      fresh();
      write_npy_file(out + "/checksums.npy", "<u8", {5, 6}, sums.data(), sums.size() * 8);
      refresh(out, "checksums.npy");
      both_refuse(out, "checksums.npy", "shape is (5, 6), expected (6, 5)");
    }
    SUBCASE("a v1 manifest that carries fields") {
      fresh();
      std::string text = read_all(out + "/manifest.json");
      const std::string v3 = "\"format_version\": 3", codec = "\"codec\": \"raw\",";
      REQUIRE(text.find(v3) != std::string::npos);
      REQUIRE(text.find(codec) != std::string::npos);
      text.replace(text.find(v3), v3.size(), "\"format_version\": 1");
      text.erase(text.find(codec), codec.size());
      write_all(out + "/manifest.json", text);
      both_refuse(out, "manifest.json", "fields needs format_version 3");
    }
    SUBCASE("a rows_of field whose row counts differ from its boxes'") {
      fresh();
      const std::vector<int64_t> off = {0, 2, 3, 4};  // boxes: 1, 2, 1 in shard 0
      write_npy_file(out + "/box_labels-offsets-00000.npy", "<i8", {4}, off.data(), 32);
      refresh(out, "box_labels-offsets-00000.npy");
      both_refuse(out, "box_labels-offsets-00000.npy",
                  "sample 0: field 'box_labels' has 2 rows, its boxes 'boxes' 1");
    }
  }

  TEST_CASE("text that is not UTF-8 on disk is Corruption naming the file and the sample") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c";
    write_cache(out);
    // Sample 4 (shard 1's second): its "\xc3\xa9" loses its lead byte.
    const std::string values = out + "/caption-00001.npy";
    std::string bytes = read_all(values);
    const size_t at = bytes.find("caf\xc3\xa9 4");
    REQUIRE(at != std::string::npos);
    bytes[at + 3] = '\xff';
    write_all(values, bytes);
    refresh(out, "caption-00001.npy");
    auto c = Cache::open(out);  // values are not read at open
    std::vector<uint8_t> buf(c->field(4, 3).bytes);
    expect_error([&] { c->copy_field(4, 3, buf.data()); }, ErrorKind::kCorruption,
                 {"caption-00001.npy", "sample 4", "field 'caption'", "not valid UTF-8"});
    buf.resize(c->field(3, 3).bytes);
    CHECK_NOTHROW(c->copy_field(3, 3, buf.data()));
  }
}
