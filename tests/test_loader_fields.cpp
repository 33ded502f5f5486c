// Loader: batches' fields (docs/FORMAT.md "Fields") — the right values for the right samples,
// the selection, one geometric draw per sample for image, mask and boxes, determinism and
// resume — from field_fixtures.h's in-memory FieldSource.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dscache/error.h"
#include "dscache/loader.h"
#include "dscache/transform.h"
#include "field_fixtures.h"
#include "loader_fixtures.h"
#include "spatial_fixtures.h"
#include "test_util.h"

using namespace dscache::test;
using dscache::CropBox;
using dscache::FieldBatch;
using dscache::FieldKind;
using dscache::SpatialTransform;
using dscache::TransformOptions;

namespace {

std::shared_ptr<FieldSource> field_source(bool ragged = false, uint32_t channels = 3,
                                          bool encoded = false) {
  FieldSource::Options o;
  o.ragged = ragged;
  o.channels = channels;
  o.encoded = encoded;
  return std::make_shared<FieldSource>(o);
}

TransformOptions random_resized(uint32_t h, uint32_t w, bool flip) {
  TransformOptions t;
  t.crop = CropMode::kRandomResized;
  t.height = h;
  t.width = w;
  t.flip = flip;
  return t;
}

// A batch with its fields.
struct TakenAll {
  Taken batch;
  std::vector<TakenField> fields;
  bool operator==(const TakenAll& o) const { return batch == o.batch && fields == o.fields; }
};

std::vector<TakenAll> drain_all(Loader& loader) {
  std::vector<TakenAll> out;
  while (const Batch* b = loader.next()) out.push_back(TakenAll{copy_of(*b), fields_of(*b)});
  return out;
}

std::vector<std::string> names_of(const Batch& b) {
  std::vector<std::string> v;
  for (const FieldBatch& f : b.fields) v.push_back(f.spec->name);
  return v;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(p, p + v.size() * sizeof(T));
}

// What a batch's fields must hold for sample `i` under transform `t` (seed, epoch): computed
// with the sample's own SpatialTransform from choose_crop, field by field.
struct Expected {
  std::vector<uint8_t> image, mask, mask16, boxes, box_id;
};

Expected expected(const FieldSource& src, const TransformOptions& t, uint32_t out_h, uint32_t out_w,
                  double min_visibility, uint64_t seed, uint64_t epoch, uint64_t i) {
  const Scene& s = src.scene(i);
  const CropBox box = dscache::choose_crop(t, s.h, s.w, seed, epoch, i);
  const SpatialTransform x(box, s.h, s.w, out_h, out_w);
  Expected e;
  e.image.resize(size_t{out_h} * out_w * s.c);
  x.image(ImageView{s.image.data(), s.h, s.w, s.c, 0}, e.image.data());
  e.mask.resize(size_t{out_h} * out_w);
  x.mask(src.value(kFsMask, i).data(), 1, e.mask.data());
  e.mask16.resize(size_t{out_h} * out_w * 2);
  x.mask(src.value(kFsMask16, i).data(), 2, e.mask16.data());
  const size_t n = src.rows(kFsBoxes, i);
  std::vector<float> in(4 * n), out(4 * n);
  std::vector<uint32_t> kept(n);
  std::memcpy(in.data(), src.value(kFsBoxes, i).data(), in.size() * sizeof(float));
  const size_t m = x.boxes(in.data(), n, min_visibility, out.data(), kept.data());
  out.resize(4 * m);
  e.boxes = bytes_of(out);
  std::vector<int64_t> ids;
  for (size_t j = 0; j < m; ++j) ids.push_back(int64_t(i * 100 + kept[j]));
  e.box_id = bytes_of(ids);
  return e;
}

}  // namespace

TEST_SUITE("loader_fields") {
  TEST_CASE("batches carry each sample's field values, in shuffled order") {
    auto src = field_source();
    LoaderOptions o = small_options(5);
    Loader loader(src, o);
    loader.start_epoch(3, 1);
    const auto batches = drain_all(loader);
    REQUIRE(batches.size() == 5);
    CHECK(all_indices({batches[0].batch}) != std::vector<uint64_t>{0, 1, 2, 3, 4});  // shuffled
    for (const TakenAll& b : batches) {
      const uint32_t size = b.batch.size;
      REQUIRE(b.fields.size() == kFsCount);  // unset: every field, in field order
      const std::vector<const char*> names = {"mask", "boxes",   "box_id", "score",
                                              "hot",  "caption", "mask16"};
      for (size_t f = 0; f < kFsCount; ++f) CHECK(b.fields[f].name == names[f]);
      CHECK(b.fields[kFsMask].shape == std::vector<uint64_t>{size, 40, 48});
      CHECK(b.fields[kFsMask16].shape == std::vector<uint64_t>{size, 40, 48});
      CHECK(b.fields[kFsScore].shape == std::vector<uint64_t>{size});
      CHECK(b.fields[kFsHot].shape == std::vector<uint64_t>{size, 3});
      CHECK(b.fields[kFsBoxes].shape == std::vector<uint64_t>{b.fields[kFsBoxes].rows, 4});
      CHECK(b.fields[kFsBoxId].shape == std::vector<uint64_t>{b.fields[kFsBoxId].rows});
      CHECK(b.fields[kFsCaption].shape == std::vector<uint64_t>{b.fields[kFsCaption].rows});
      CHECK(b.fields[kFsMask].offsets.empty());
      CHECK(b.fields[kFsBoxes].offsets.front() == 0);
      CHECK(uint64_t(b.fields[kFsBoxes].offsets.back()) == b.fields[kFsBoxes].rows);
      const uint64_t row_bytes[kFsCount] = {0, 16, 8, 0, 0, 1, 0};
      for (uint32_t k = 0; k < size; ++k) {
        const uint64_t i = b.batch.indices[k];
        CAPTURE(i);
        for (size_t f = 0; f < kFsCount; ++f) {
          CAPTURE(names[f]);
          CHECK(b.fields[f].sample(k, size, row_bytes[f]) == src->value(f, i));
        }
      }
    }
  }

  TEST_CASE("crop none with flip: masks mirrored, boxes mirrored, the rest as stored") {
    auto src = field_source();
    LoaderOptions o = small_options(6);
    o.transform.flip = true;
    Loader loader(src, o);
    loader.start_epoch(9, 0);
    int flipped = 0;
    for (const TakenAll& b : drain_all(loader)) {
      for (uint32_t k = 0; k < b.batch.size; ++k) {
        const uint64_t i = b.batch.indices[k];
        const bool flip = dscache::choose_crop(o.transform, 40, 48, 9, 0, i).flip;
        flipped += flip;
        const std::vector<uint8_t> mask = b.fields[kFsMask].sample(k, b.batch.size, 0);
        const std::vector<uint8_t>& stored = src->value(kFsMask, i);
        int wrong = 0;
        for (uint32_t y = 0; y < 40; ++y) {
          for (uint32_t x = 0; x < 48; ++x) {
            wrong += mask[y * 48 + x] != stored[y * 48 + (flip ? 47 - x : x)];
          }
        }
        CHECK(wrong == 0);
        const std::vector<uint8_t> raw = b.fields[kFsBoxes].sample(k, b.batch.size, 16);
        std::vector<float> got(raw.size() / 4), want(src->rows(kFsBoxes, i) * 4);
        std::memcpy(got.data(), raw.data(), raw.size());
        std::memcpy(want.data(), src->value(kFsBoxes, i).data(), want.size() * 4);
        if (flip) {
          for (size_t j = 0; j < want.size(); j += 4) {
            const float x1 = want[j];
            want[j] = 48 - want[j + 2];
            want[j + 2] = 48 - x1;
          }
        }
        CHECK(got == want);
        CHECK(b.fields[kFsBoxId].sample(k, b.batch.size, 8) == src->value(kFsBoxId, i));
        CHECK(b.fields[kFsScore].sample(k, b.batch.size, 0) == src->value(kFsScore, i));
      }
    }
    CHECK(flipped > 4);
    CHECK(flipped < 20);
  }

  TEST_CASE("fields selection: unset = all, empty = none, an order, unknown names refused") {
    auto src = field_source();
    struct Case {
      std::optional<std::vector<std::string>> fields;
      std::vector<std::string> served;
    };
    const Case cases[] = {
        {std::nullopt, {"mask", "boxes", "box_id", "score", "hot", "caption", "mask16"}},
        {std::vector<std::string>{}, {}},
        {std::vector<std::string>{"caption", "mask"}, {"caption", "mask"}},
        {std::vector<std::string>{"box_id"}, {"box_id"}},
    };
    for (const Case& c : cases) {
      LoaderOptions o = small_options(4);
      o.fields = c.fields;
      Loader loader(src, o);
      loader.start_epoch(1, 0);
      const Batch* b = loader.next();
      REQUIRE(b != nullptr);
      CHECK(names_of(*b) == c.served);
      for (const std::string& name : c.served) CHECK(b->field(name) != nullptr);
      CHECK(b->field("nope") == nullptr);
    }
    struct Bad {
      std::vector<std::string> fields;
      double min_box_visibility;
      std::vector<std::string> parts;
    };
    const Bad bad[] = {
        {{"mask", "nope"},
         0.0,
         {"loader.fields", "unknown field 'nope'",
          "mask, boxes, box_id, score, hot, caption, mask16"}},
        {{"mask", "mask"}, 0.0, {"loader.fields", "'mask' is named twice"}},
        {{}, -0.1, {"loader.min_box_visibility", "[0, 1]"}},
        {{}, 1.5, {"loader.min_box_visibility"}},
        {{}, NAN, {"loader.min_box_visibility"}},
    };
    for (const Bad& c : bad) {
      LoaderOptions o = small_options(4);
      o.fields = c.fields;
      o.min_box_visibility = c.min_box_visibility;
      expect_error([&] { Loader loader(src, o); }, ErrorKind::kInvalidArgument, c.parts);
    }
    // A source without fields: any name is unknown, and it says so.
    Spec spec;
    TempDir dir;
    const Built built = build_cache(dir.path(), spec);
    LoaderOptions o = small_options(4);
    o.fields = std::vector<std::string>{"mask"};
    expect_error([&] { Loader loader(built.cache, o); }, ErrorKind::kInvalidArgument,
                 "(the source's fields: none)");
  }

  TEST_CASE("random_resized + flip: every field follows the image's draw") {
    // Fixed and ragged layouts, grey and RGB: each sample's image, masks, boxes and box ids
    // equal its own SpatialTransform's (from choose_crop, so the image is what it always was),
    // and the image's rectangle, the mask's labels and the rectangle's box agree.
    struct Case {
      bool ragged;
      uint32_t channels, out_h, out_w;
      double min_visibility;
      bool encoded;  // decode_crop path (a JPEG cache's)
    };
    const Case cases[] = {{false, 3, 16, 16, 0.0, false}, {false, 1, 24, 12, 0.3, false},
                          {true, 3, 16, 20, 0.0, false},  {true, 1, 31, 9, 0.6, false},
                          {true, 3, 16, 16, 0.0, true},   {false, 3, 20, 14, 0.2, true}};
    for (const Case& c : cases) {
      CAPTURE(c.ragged);
      CAPTURE(c.out_h);
      CAPTURE(c.encoded);
      auto src = field_source(c.ragged, c.channels, c.encoded);
      LoaderOptions o = small_options(7);
      o.transform = random_resized(c.out_h, c.out_w, true);
      o.min_box_visibility = c.min_visibility;
      JointSeen seen;
      int flipped = 0, dropped_corner = 0;
      for (uint64_t epoch = 0; epoch < 6; ++epoch) {
        Loader loader(src, o);
        loader.start_epoch(21, epoch);
        for (const TakenAll& b : drain_all(loader)) {
          const uint32_t size = b.batch.size;
          for (uint32_t k = 0; k < size; ++k) {
            const uint64_t i = b.batch.indices[k];
            CAPTURE(i);
            const Expected e =
                expected(*src, o.transform, c.out_h, c.out_w, c.min_visibility, 21, epoch, i);
            const size_t px = size_t{c.out_h} * c.out_w;
            CHECK(std::memcmp(b.batch.images.data() + k * px * c.channels, e.image.data(),
                              e.image.size()) == 0);
            const std::vector<uint8_t> mask = b.fields[kFsMask].sample(k, size, 0);
            CHECK(mask == e.mask);
            CHECK(b.fields[kFsMask16].sample(k, size, 0) == e.mask16);
            const std::vector<uint8_t> boxes = b.fields[kFsBoxes].sample(k, size, 16);
            CHECK(boxes == e.boxes);
            const std::vector<uint8_t> ids = b.fields[kFsBoxId].sample(k, size, 8);
            CHECK(ids == e.box_id);
            // The rectangle's box is the one with id i * 100 (row 0), if it was kept.
            std::vector<float> rect;
            for (size_t j = 0; j < ids.size() / 8; ++j) {
              int64_t id;
              std::memcpy(&id, ids.data() + 8 * j, 8);
              if (id == int64_t(i * 100)) {
                rect.resize(4);
                std::memcpy(rect.data(), boxes.data() + 16 * j, 16);
              }
            }
            if (i % 2 == 1 && ids.size() / 8 < 2) ++dropped_corner;
            flipped += dscache::choose_crop(o.transform, 1, 1, 21, epoch, i).flip;
            if (c.min_visibility == 0.0) {  // the joint check wants every box with area kept
              const Scene& s = src->scene(i);
              check_joint(s, c.out_h, c.out_w, b.batch.images.data() + k * px * c.channels,
                          mask.data(), rect.data(), rect.size() / 4, &seen);
            }
          }
        }
      }
      CHECK(flipped > 40);
      CHECK(flipped < 104);
      CHECK(dropped_corner > 0);  // some crops lose the corner box (and its id)
      if (c.min_visibility == 0.0) CHECK(seen.labelled > 100);
    }
  }

  TEST_CASE("fields do not change the images, and a selection reads only what it names") {
    auto src = field_source(true);
    LoaderOptions o = small_options(6);
    o.transform = random_resized(16, 16, true);
    std::vector<std::vector<TakenAll>> runs;
    for (auto sel : {std::optional<std::vector<std::string>>{},
                     std::optional<std::vector<std::string>>{std::vector<std::string>{}},
                     std::optional<std::vector<std::string>>{{"box_id", "boxes"}}}) {
      o.fields = sel;
      Loader loader(src, o);
      loader.start_epoch(4, 2);
      runs.push_back(drain_all(loader));
    }
    REQUIRE(runs[0].size() == runs[1].size());
    for (size_t j = 0; j < runs[0].size(); ++j) {
      CHECK(runs[0][j].batch == runs[1][j].batch);
      CHECK(runs[1][j].fields.empty());
      // box_id alone or with boxes: the same rows (those of the boxes kept).
      REQUIRE(runs[2][j].fields.size() == 2);
      CHECK(runs[2][j].fields[0] == runs[0][j].fields[kFsBoxId]);
      CHECK(runs[2][j].fields[1] == runs[0][j].fields[kFsBoxes]);
    }
  }

  TEST_CASE("same seed and epoch: identical field bytes whatever workers and prefetch") {
    for (bool ragged : {false, true}) {
      auto src = field_source(ragged);
      std::vector<std::vector<TakenAll>> runs;
      for (auto [workers, prefetch] : {std::pair<uint32_t, uint32_t>{1, 1}, {4, 3}, {3, 8}}) {
        LoaderOptions o = small_options(5);
        o.workers = workers;
        o.prefetch = prefetch;
        o.transform = random_resized(20, 18, true);
        o.min_box_visibility = 0.25;
        Loader loader(src, o);
        loader.start_epoch(77, 3);
        runs.push_back(drain_all(loader));
        // A second epoch reuses the buffers; the first's bytes come back for the same epoch.
        loader.start_epoch(77, 4);
        drain_all(loader);
        loader.start_epoch(77, 3);
        CHECK(drain_all(loader) == runs.back());
      }
      CHECK(runs[0] == runs[1]);
      CHECK(runs[0] == runs[2]);
    }
  }

  TEST_CASE("restore() mid-epoch gives the same field bytes as the uninterrupted run") {
    auto src = field_source(true);
    LoaderOptions o = small_options(4);
    o.transform = random_resized(16, 16, true);
    Loader whole(src, o);
    whole.start_epoch(5, 7);
    const auto all = drain_all(whole);
    REQUIRE(all.size() == 6);
    for (uint64_t cursor : {1u, 3u, 5u}) {
      o.workers = 3;
      o.prefetch = 1 + uint32_t(cursor);
      Loader resumed(src, o);
      resumed.restore(LoaderPosition{5, 7, cursor});
      const auto rest = drain_all(resumed);
      REQUIRE(rest.size() == all.size() - cursor);
      for (size_t j = 0; j < rest.size(); ++j) CHECK(rest[j] == all[cursor + j]);
    }
  }

  TEST_CASE("a bad field value is Corruption naming the field and the sample") {
    struct Case {
      size_t field;
      std::vector<uint8_t> bytes;
      uint64_t rows;
      const char* part;
    };
    const Case cases[] = {
        {kFsMask, std::vector<uint8_t>(40 * 48 - 1), 40 * 48 - 1,
         "mask elements, the image is 40x48"},
        {kFsBoxId, std::vector<uint8_t>(8 * 5), 5, "5 rows for 2 boxes of 'boxes'"},
        {kFsScore, std::vector<uint8_t>(3), 1, "holds 3 bytes for 1 rows of 4 bytes"},
    };
    for (const Case& c : cases) {
      auto src = field_source();
      src->set_value(c.field, 5, c.bytes, c.rows);
      LoaderOptions o = small_options(4);
      Loader loader(src, o);
      loader.start_epoch(0, 0);
      const Error e = expect_error(
          [&] {
            while (loader.next() != nullptr) {
            }
          },
          ErrorKind::kCorruption, {"field '", "of sample 5", c.part});
      CHECK(e.reason().find(src->fields()[c.field].name) != std::string::npos);
    }
  }
}
