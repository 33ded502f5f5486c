// Fields (format_version 3): what CacheWriter writes with every field kind reads back through
// Cache::open and CacheDir, in every layout, codec and storage; a resume keeps finished shards'
// field files; add_shard takes them along; bad values and damaged field files are named errors.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/cache.h"
#include "dscache/cache_dir.h"
#include "dscache/cache_writer.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/fields.h"
#include "dscache/jpeg.h"
#include "dscache/loader.h"
#include "dscache/manifest.h"
#include "dscache/npy.h"
#include "dscache/shard.h"
#include "spatial_fixtures.h"
#include "test_util.h"

// Every name of the fields contract is used here; the test takes the library's namespace whole.
using namespace dscache;  // NOLINT(build/namespaces)
using namespace dscache::test;

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kH = 6, kW = 5;

// mask (uint8), score (float32 scalar), tags (uint8 array [3]), boxes, box_labels (rows_of
// boxes, int64), caption (text).
std::vector<FieldSpec> all_kinds() {
  std::vector<FieldSpec> f(6);
  f[0].name = "mask", f[0].kind = FieldKind::kMask, f[0].dtype = FieldType::kUint8;
  f[0].classes = {"background", "thing"};
  f[1].name = "score", f[1].kind = FieldKind::kScalar, f[1].dtype = FieldType::kFloat32;
  f[2].name = "tags", f[2].kind = FieldKind::kArray, f[2].dtype = FieldType::kUint8;
  f[2].shape = {3};
  f[3].name = "boxes", f[3].kind = FieldKind::kBoxes, f[3].dtype = FieldType::kFloat32;
  f[3].shape = {4};
  f[4].name = "box_labels", f[4].kind = FieldKind::kRows, f[4].dtype = FieldType::kInt64;
  f[4].rows_of = "boxes";
  f[5].name = "caption", f[5].kind = FieldKind::kText, f[5].dtype = FieldType::kUint8;
  return f;
}

// Sample i's image size: fixed kH x kW; ragged varies with i.
uint32_t height_of(uint64_t i, Layout l) { return l == Layout::kFixed ? kH : 3 + uint32_t(i % 4); }
uint32_t width_of(uint64_t i, Layout l) { return l == Layout::kFixed ? kW : 2 + uint32_t(i % 3); }

// Every value of sample i, made from i, so a value served for the wrong sample is seen.
struct Values {
  std::vector<uint8_t> pixels, mask, tags;
  float score = 0;
  std::vector<float> boxes;
  std::vector<int64_t> box_labels;
  std::string caption;
  std::vector<FieldData> data;

  Values(uint64_t i, Layout l) {
    const uint32_t h = height_of(i, l), w = width_of(i, l);
    pixels.assign(size_t{h} * w * 3, uint8_t(i * 7));
    for (uint32_t p = 0; p < h * w; ++p) mask.push_back(uint8_t((p + i) % 2));
    score = 0.5f + float(i);
    tags = {uint8_t(i % 2), uint8_t(i % 3 == 0), 1};
    for (uint64_t b = 0; b < i % 3; ++b) {  // 0, 1 or 2 boxes
      boxes.insert(boxes.end(), {0.0f, float(b), float(w), float(b + 1)});
      box_labels.push_back(int64_t(i * 10 + b));
    }
    caption = "sample " + std::to_string(i) + (i % 2 ? " caf\xc3\xa9" : "");
    data = {{mask.data(), mask.size()},
            {&score, sizeof score},
            {tags.data(), tags.size()},
            {boxes.data(), boxes.size() * sizeof(float)},
            {box_labels.data(), box_labels.size() * sizeof(int64_t)},
            {caption.data(), caption.size()}};
  }
};

CacheWriterOptions options(Layout layout, dscache::Codec codec = dscache::Codec::kRaw) {
  CacheWriterOptions o;
  o.layout = layout;
  o.codec = codec;
  o.recipe.height = layout == Layout::kFixed ? kH : 0;
  o.recipe.width = layout == Layout::kFixed ? kW : 0;
  o.recipe.channels = 3;
  o.recipe.quality = codec == dscache::Codec::kJpeg ? 90 : 0;
  o.recipe.shard_bytes = layout == Layout::kFixed ? 4 * kH * kW * 3 : 100;  // 4 fixed samples
                                                                            // a shard; ragged ~3
  o.classes = {"a", "b"};
  o.fields = all_kinds();
  o.tool_version = "test";
  o.created_utc = "2024-01-01T00:00:00Z";
  return o;
}

void append_range(CacheWriter& w, Layout l, uint64_t from, uint64_t to) {
  for (uint64_t i = from; i < to; ++i) {
    Values v(i, l);
    w.append(v.pixels.data(), height_of(i, l), width_of(i, l), int64_t(i % 2),
             "s" + std::to_string(i), nullptr, v.data.data());
  }
}

std::vector<uint8_t> bytes_of(const FieldView& v) {
  return std::vector<uint8_t>(v.data, v.data + v.bytes);
}

std::vector<uint8_t> bytes_of(const FieldData& d) {
  const auto* p = static_cast<const uint8_t*>(d.data);
  return std::vector<uint8_t>(p, p + d.bytes);
}

// The cache serves every value of every sample, and checksums.npy column 1 + f is its XXH64.
void check_serves(const std::string& dir, Layout l, uint64_t n) {
  auto c = Cache::open(dir);
  const Manifest& m = c->manifest();
  REQUIRE(m.format_version == 3);
  REQUIRE(m.fields == all_kinds());
  REQUIRE(c->size() == n);
  const std::vector<uint64_t> sums = CacheDir::open(dir)->checksums();
  REQUIRE(sums.size() == n * 7);
  for (uint64_t i = 0; i < n; ++i) {
    Values v(i, l);
    for (size_t f = 0; f < v.data.size(); ++f) {
      const FieldView got = c->field(i, f);
      INFO("sample " << i << " field " << m.fields[f].name);
      CHECK(bytes_of(got) == bytes_of(v.data[f]));
      CHECK(sums[i * 7 + 1 + f] == dscache::xxh64(v.data[f].data, v.data[f].bytes));
    }
    CHECK(c->field(i, 0).rows == uint64_t{height_of(i, l)} * width_of(i, l));
    CHECK(c->field(i, 3).rows == i % 3);
    CHECK(c->label(i) == int64_t(i % 2));
  }
  CHECK(c->field_index("boxes") == 3);
  CHECK_THROWS_AS(c->field_index("nope"), Error);
}

}  // namespace

TEST_SUITE("fields") {
  TEST_CASE("every kind written in every layout, codec and storage reads back per sample") {
    struct Case {
      const char* name;
      Layout layout;
      dscache::Codec codec;
      dscache::Storage storage;
    };
    std::vector<Case> cases = {
        {"fixed npy", Layout::kFixed, dscache::Codec::kRaw, dscache::Storage::kNpy},
        {"ragged npy", Layout::kRagged, dscache::Codec::kRaw, dscache::Storage::kNpy}};
    if (dscache::hdf5_supported()) {
      cases.push_back(
          {"fixed hdf5", Layout::kFixed, dscache::Codec::kRaw, dscache::Storage::kHdf5});
    }
    if (dscache::jpeg_supported()) {
      cases.push_back(
          {"jpeg fixed", Layout::kFixed, dscache::Codec::kJpeg, dscache::Storage::kNpy});
      cases.push_back(
          {"jpeg ragged", Layout::kRagged, dscache::Codec::kJpeg, dscache::Storage::kNpy});
    }
    for (const Case& k : cases) {
      SUBCASE(k.name) {
        TempDir tmp;
        const std::string out = tmp.path() + "/c";
        CacheWriterOptions o = options(k.layout, k.codec);
        o.storage = k.storage;
        auto w = CacheWriter::open(out, o);
        append_range(*w, k.layout, 0, 11);
        w->cut_shard();  // an empty shard: its field files hold no value
        append_range(*w, k.layout, 11, 13);
        const Manifest m = w->publish();
        REQUIRE(m.shards.size() >= 4);
        check_serves(out, k.layout, 13);
        // Each shard has one values file per field and offsets exactly for the kinds that vary.
        for (const auto& s : m.shards) {
          REQUIRE(s.fields.size() == 6);
          CHECK(s.fields[0].offsets.file.empty() == (k.layout == Layout::kFixed));
          CHECK(s.fields[1].offsets.file.empty());
          CHECK(s.fields[2].offsets.file.empty());
          CHECK(!s.fields[3].offsets.file.empty());
          CHECK(fs::exists(out + "/" + s.fields[5].values.file));
        }
        // The values files are plain npy arrays of the spec's shape.
        const auto h = dscache::read_npy_header(out + "/" + m.shards[0].fields[2].values.file);
        CHECK(h.descr == "|u1");
        CHECK(h.shape == std::vector<uint64_t>{m.shards[0].count, 3});
      }
    }
  }

  TEST_CASE("a cache without fields is written exactly as before: version 1, (count,) checksums") {
    TempDir tmp;
    CacheWriterOptions o = options(Layout::kFixed);
    o.fields.clear();
    auto w = CacheWriter::open(tmp.path() + "/c", o);
    std::vector<uint8_t> px(kH * kW * 3, 1);
    w->append(px.data(), kH, kW, 0, "x");
    const Manifest m = w->publish();
    CHECK(m.format_version == 1);
    CHECK(read_all(tmp.path() + "/c/manifest.json").find("\"fields\"") == std::string::npos);
    CHECK(dscache::read_npy_header(tmp.path() + "/c/checksums.npy").shape ==
          std::vector<uint64_t>{1});
  }

  TEST_CASE("bad values are refused by name before anything of the sample is written") {
    struct Case {
      const char* what;
      size_t field;
      std::vector<uint8_t> bytes;
      const char* says;
    };
    const float outside[4] = {0, 0, float(kW) + 1, 1};
    const float empty_box[4] = {2, 1, 2, 3};
    std::vector<uint8_t> outside_b(16), empty_b(16);
    std::memcpy(outside_b.data(), outside, 16);
    std::memcpy(empty_b.data(), empty_box, 16);
    const std::vector<Case> cases = {
        {"a mask of another size", 0, std::vector<uint8_t>(kH * kW - 1), "its image is 6x5"},
        {"a scalar of 8 bytes", 1, std::vector<uint8_t>(8), "one value is 4 bytes"},
        {"a box outside the image", 3, outside_b, "box 0 (0, 0, 6, 1) is not"},
        {"a box with no area", 3, empty_b, "is not 0 <= x1 < x2"},
        {"boxes not whole rows", 3, std::vector<uint8_t>(10), "not a whole number of 16-byte"},
        {"invalid UTF-8 text", 5, {0x66, 0xC3, 0x28}, "not valid UTF-8"},
    };
    for (const Case& k : cases) {
      SUBCASE(k.what) {
        TempDir tmp;
        auto w = CacheWriter::open(tmp.path() + "/c", options(Layout::kFixed));
        Values v(2, Layout::kFixed);  // two boxes
        v.data[k.field] = FieldData{k.bytes.data(), k.bytes.size()};
        if (k.field == 3) v.data[4] = FieldData{v.box_labels.data(), (k.bytes.size() / 16) * 8};
        try {
          w->append(v.pixels.data(), kH, kW, 0, "img7.png", nullptr, v.data.data());
          FAIL("accepted " << k.what);
        } catch (const Error& e) {
          CHECK(e.kind() == ErrorKind::kInvalidArgument);
          CHECK(e.path() == "img7.png");
          CHECK(std::string(e.what()).find("field '" + all_kinds()[k.field].name + "'") !=
                std::string::npos);
          CHECK(std::string(e.what()).find(k.says) != std::string::npos);
        }
        CHECK(w->count() == 0);
      }
    }
    SUBCASE("a rows_of field with another row count than its boxes") {
      TempDir tmp;
      auto w = CacheWriter::open(tmp.path() + "/c", options(Layout::kFixed));
      Values v(2, Layout::kFixed);
      v.data[4].bytes = 8;  // one label for two boxes
      CHECK_THROWS_WITH(w->append(v.pixels.data(), kH, kW, 0, "x", nullptr, v.data.data()),
                        doctest::Contains("has 1 rows, its boxes 'boxes' 2"));
    }
    SUBCASE("no values at all") {
      TempDir tmp;
      auto w = CacheWriter::open(tmp.path() + "/c", options(Layout::kFixed));
      std::vector<uint8_t> px(kH * kW * 3);
      CHECK_THROWS_WITH(w->append(px.data(), kH, kW, 0, "x"),
                        doctest::Contains("needs one value for each"));
    }
    SUBCASE("an invalid field spec") {
      TempDir tmp;
      CacheWriterOptions o = options(Layout::kFixed);
      o.fields[4].rows_of = "caption";
      CHECK_THROWS_WITH(CacheWriter::open(tmp.path() + "/c", o),
                        doctest::Contains("is not a boxes field"));
    }
  }

  TEST_CASE("an interrupted write resumes with its finished shards' field files") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c", whole = tmp.path() + "/whole";
    {
      auto w = CacheWriter::open(whole, options(Layout::kFixed));
      append_range(*w, Layout::kFixed, 0, 10);
      w->publish();
    }
    {
      auto w = CacheWriter::open(out, options(Layout::kFixed));
      append_range(*w, Layout::kFixed, 0, 6);  // one shard of 4 committed, 2 samples open
    }                                          // destroyed unpublished: as a killed write
    CacheWriterOptions o = options(Layout::kFixed);
    o.resume = true;
    auto w = CacheWriter::open(out, o);
    REQUIRE(w->count() == 4);
    append_range(*w, Layout::kFixed, w->count(), 10);
    const Manifest m = w->publish();
    check_serves(out, Layout::kFixed, 10);
    const Manifest ref = CacheDir::open(whole)->manifest();
    REQUIRE(m.shards.size() == ref.shards.size());
    for (size_t k = 0; k < m.shards.size(); ++k) {
      for (size_t f = 0; f < m.fields.size(); ++f) {
        CHECK(m.shards[k].fields[f].values.xxh64 == ref.shards[k].fields[f].values.xxh64);
        CHECK(m.shards[k].fields[f].offsets.xxh64 == ref.shards[k].fields[f].offsets.xxh64);
      }
    }
    CHECK(read_all(out + "/checksums.npy") == read_all(whole + "/checksums.npy"));
  }

  TEST_CASE("a damaged field file of the partial directory is redone on resume") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c";
    {
      auto w = CacheWriter::open(out, options(Layout::kFixed));
      append_range(*w, Layout::kFixed, 0, 9);  // shards 0 and 1 committed
    }
    const std::string partial = CacheWriter::partial_dir_for(out);
    {
      std::fstream f(partial + "/caption-00001.npy",
                     std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-1, std::ios::end);
      f.put('#');
    }
    CacheWriterOptions o = options(Layout::kFixed);
    o.resume = true;
    auto w = CacheWriter::open(out, o);
    CHECK(w->count() == 4);  // shard 1's caption no longer agrees with its sidecar
    append_range(*w, Layout::kFixed, w->count(), 9);
    w->publish();
    check_serves(out, Layout::kFixed, 9);
  }

  TEST_CASE("add_shard takes a shard's field files along; other fields are refused") {
    TempDir tmp;
    const std::string a = tmp.path() + "/a", b = tmp.path() + "/b", out = tmp.path() + "/m";
    for (const std::string& d : {a, b}) {
      auto w = CacheWriter::open(d, options(Layout::kFixed));
      append_range(*w, Layout::kFixed, d == a ? 0 : 6, d == a ? 6 : 13);
      w->publish();
    }
    auto w = CacheWriter::open(out, options(Layout::kFixed));
    for (const std::string& d : {a, b}) {
      const auto dir = CacheDir::open(d);
      const Manifest& m = dir->manifest();
      const auto labels = dir->labels();
      const auto sums = dir->checksums();
      const auto sources = dir->sources();
      for (size_t k = 0; k < m.shards.size(); ++k) {
        const auto& s = m.shards[k];
        dscache::ShardRecords r;
        r.labels.assign(labels.begin() + s.first, labels.begin() + s.first + s.count);
        r.checksums.assign(sums.begin() + 7 * s.first, sums.begin() + 7 * (s.first + s.count));
        r.sources.assign(sources.begin() + s.first, sources.begin() + s.first + s.count);
        w->add_shard(*dir, k, r);
      }
    }
    w->publish();
    check_serves(out, Layout::kFixed, 13);

    CacheWriterOptions other = options(Layout::kFixed);
    other.fields.pop_back();  // no caption
    auto w2 = CacheWriter::open(tmp.path() + "/m2", other);
    const auto dir = CacheDir::open(a);
    dscache::ShardRecords r;
    const auto& s = dir->manifest().shards[0];
    r.labels.assign(s.count, 0);
    r.checksums.assign(s.count * 6, 0);
    r.sources.assign(s.count, "x");
    CHECK_THROWS_WITH(w2->add_shard(*dir, 0, r), doctest::Contains("fields differ"));
  }

  TEST_CASE("damaged field files are Corruption at open, naming the file") {
    TempDir tmp;
    const std::string out = tmp.path() + "/c";
    {
      auto w = CacheWriter::open(out, options(Layout::kFixed));
      append_range(*w, Layout::kFixed, 0, 8);
      w->publish();
    }
    SUBCASE("a values file cut short") {
      fs::resize_file(out + "/mask-00001.npy", fs::file_size(out + "/mask-00001.npy") - 1);
      CHECK_THROWS_WITH(Cache::open(out), doctest::Contains("mask-00001.npy: file holds"));
    }
    SUBCASE("offsets that go backwards (rewritten with a manifest to match)") {
      const std::string off = out + "/boxes-offsets-00000.npy";
      const std::vector<int64_t> bad = {0, 2, 1, 3, 3};
      dscache::write_npy_file(off, "<i8", {5}, bad.data(), bad.size() * 8);
      Manifest m = dscache::read_manifest(out);
      dscache::FileEntry now = dscache::hash_file(off);
      now.file = "boxes-offsets-00000.npy";
      m.shards[0].fields[3].offsets = now;
      dscache::write_manifest(out, m);
      CHECK_THROWS_WITH(Cache::open(out), doctest::Contains("below the one before it"));
    }
  }

  TEST_CASE(
      "a cache on disk through the Loader: fields as stored, and jointly cropped and flipped") {
    TempDir tmp;
    for (Layout layout : {Layout::kFixed, Layout::kRagged}) {
      const std::string out = tmp.path() + (layout == Layout::kFixed ? "/f" : "/r");
      CacheWriterOptions o;
      o.layout = layout;
      o.recipe.height = layout == Layout::kFixed ? 48 : 0;
      o.recipe.width = layout == Layout::kFixed ? 64 : 0;
      o.recipe.channels = 3;
      o.recipe.shard_bytes = 20 * 48 * 64 * 3;
      o.fields = {all_kinds()[0], all_kinds()[3], all_kinds()[4]};  // mask, boxes, box_labels
      std::vector<Scene> scenes;
      {
        auto w = CacheWriter::open(out, o);
        for (uint32_t i = 0; i < 40; ++i) {
          const uint32_t h = layout == Layout::kFixed ? 48 : 40 + i % 9;
          const uint32_t wd = layout == Layout::kFixed ? 64 : 50 + i % 13;
          scenes.emplace_back(h, wd, 3, 1, 5 + i % 11, 4 + i % 7, 30 + i % 13, 24 + i % 9, 1);
          const Scene& sc = scenes.back();
          const int64_t lab = i;
          const FieldData v[3] = {{sc.mask.data(), sc.mask.size()}, {sc.box.data(), 16}, {&lab, 8}};
          w->append(sc.image.data(), h, wd, 0, "s" + std::to_string(i), nullptr, v);
        }
        w->publish();
      }
      auto cache = Cache::open(out);
      dscache::LoaderOptions lo;
      lo.batch_size = 8;
      lo.transform.crop = dscache::CropMode::kRandomResized;
      lo.transform.height = 32;
      lo.transform.width = 40;
      lo.transform.flip = true;
      dscache::Loader loader(cache, lo);
      JointSeen seen;
      int flipped = 0;
      for (uint64_t epoch = 0; epoch < 4; ++epoch) {
        loader.start_epoch(9, epoch);
        while (const dscache::Batch* b = loader.next()) {
          const dscache::FieldBatch* mask = b->field("mask");
          const dscache::FieldBatch* boxes = b->field("boxes");
          const dscache::FieldBatch* labels = b->field("box_labels");
          REQUIRE(mask != nullptr);
          REQUIRE(boxes != nullptr);
          REQUIRE(labels != nullptr);
          CHECK(mask->shape == std::vector<uint64_t>{b->size, 32, 40});
          for (uint32_t k = 0; k < b->size; ++k) {
            const uint64_t i = b->indices[k];
            const int64_t n = boxes->offsets[k + 1] - boxes->offsets[k];
            REQUIRE(labels->offsets[k + 1] - labels->offsets[k] == n);
            if (n == 1) {
              int64_t lab;
              std::memcpy(&lab, labels->data + 8 * labels->offsets[k], 8);
              CHECK(lab == int64_t(i));  // the box's label follows it
            }
            check_joint(scenes[i], 32, 40, b->images + k * 32 * 40 * 3, mask->data + k * 32 * 40,
                        reinterpret_cast<const float*>(boxes->data) + 4 * boxes->offsets[k],
                        static_cast<size_t>(n), &seen);
            flipped += dscache::choose_crop(lo.transform, 1, 1, 9, epoch, i).flip;
          }
        }
      }
      CHECK(seen.labelled > 60);
      CHECK(flipped > 40);
      // crop none (fixed layout) serves every field exactly as stored; a selection serves only it.
      if (layout == Layout::kFixed) {
        dscache::LoaderOptions plain;
        plain.batch_size = 16;
        plain.fields = std::vector<std::string>{"box_labels", "mask"};
        dscache::Loader l2(cache, plain);
        l2.start_epoch(3, 0);
        while (const dscache::Batch* b = l2.next()) {
          REQUIRE(b->fields.size() == 2);
          CHECK(b->field("boxes") == nullptr);
          for (uint32_t k = 0; k < b->size; ++k) {
            const uint64_t i = b->indices[k];
            CHECK(std::memcmp(b->field("mask")->data + k * 48 * 64, scenes[i].mask.data(),
                              48 * 64) == 0);
          }
        }
        plain.fields = std::vector<std::string>{"nope"};
        CHECK_THROWS_WITH(dscache::Loader(cache, plain), doctest::Contains("nope"));
      }
    }
  }
}

TEST_SUITE("unit") {
  TEST_CASE("fields: element_at reads each dtype's little-endian element k") {
    const uint8_t u8[] = {7, 200};
    const uint16_t u16[] = {1, 65535};
    const int64_t i64[] = {3, -5};
    const float f32[] = {0.5f, -2.25f};
    auto bytes = [](const void* p) { return static_cast<const uint8_t*>(p); };
    CHECK(dscache::element_at(dscache::FieldType::kUint8, u8, 1) == 200);
    CHECK(dscache::element_at(dscache::FieldType::kUint16, bytes(u16), 1) == 65535);
    CHECK(dscache::element_at(dscache::FieldType::kInt64, bytes(i64), 1) == -5);
    CHECK(dscache::element_at(dscache::FieldType::kFloat32, bytes(f32), 1) == -2.25);
  }
}
