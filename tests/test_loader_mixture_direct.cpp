// A Loader over a Mixture against batches built from its member sources directly: every fill
// path (plain copy, copy + flip, crop of a view, crop of a copied sample, decode_crop, ragged,
// fields) serves, for each position of the mixture's order, the member's own sample at its local
// index, its label through the member's remap, its transform drawn with the mixture's key.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dscache/loader.h"
#include "dscache/transform.h"
#include "field_fixtures.h"
#include "mix_fixtures.h"
#include "test_util.h"

using namespace dscache::test;

namespace {

// What a member source gives position `e` of the order: its image under `t` (reference code:
// the whole sample copied out of the member, then cropped, resized or mirrored here).
std::vector<uint8_t> member_image(const dscache::SampleSource& src, uint64_t i,
                                  const dscache::TransformOptions& t, uint32_t oh, uint32_t ow,
                                  uint64_t seed, uint64_t epoch, uint64_t key) {
  const dscache::SampleShape s = src.sample_shape(i);
  const size_t c = s.channels;
  std::vector<uint8_t> whole(size_t{s.height} * s.width * c);
  src.copy_sample(i, whole.data());
  if (t.crop == CropMode::kNone) {
    REQUIRE((s.height == oh && s.width == ow));
    if (t.flip && dscache::choose_crop(t, oh, ow, seed, epoch, key).flip) {
      std::vector<uint8_t> m(whole.size());
      for (uint32_t y = 0; y < oh; ++y) {
        for (uint32_t x = 0; x < ow; ++x) {
          std::memcpy(&m[(size_t{y} * ow + x) * c], &whole[(size_t{y} * ow + (ow - 1 - x)) * c], c);
        }
      }
      return m;
    }
    return whole;
  }
  const dscache::CropBox box = dscache::choose_crop(t, s.height, s.width, seed, epoch, key);
  std::vector<uint8_t> out(size_t{oh} * ow * c);
  if (src.encoded()) {
    src.decode_crop(i, box, oh, ow, out.data());
  } else {
    dscache::crop_resize(ImageView{whole.data(), s.height, s.width, s.channels}, box, oh, ow,
                         out.data());
  }
  return out;
}

struct Case {
  const char* name;
  bool fields;      // FieldSource members (a fixed, b ragged or encoded) with fields, else caches
  bool encoded;     // FieldSource members that decode_crop
  Layout b_layout;  // caches: b's layout
  CropMode crop;
  bool flip;
};

// Runs one epoch of `m` under `o` and checks every position against its member.
uint64_t check_against_members(const std::shared_ptr<const Mixture>& mixture,
                               const LoaderOptions& o, uint64_t seed, uint64_t epoch) {
  const Mixture& m = *mixture;
  Loader loader(mixture, o);
  loader.start_epoch(seed, epoch);
  const std::vector<MixEntry> ref = reference_order(m, true, o.batch_size, seed, epoch);
  uint64_t pos = 0, checked = 0;
  while (const Batch* b = loader.next()) {
    REQUIRE(b->sources != nullptr);
    const size_t px = size_t{b->height} * b->width * b->channels;
    const std::vector<TakenField> f = o.fields ? fields_of(*b) : std::vector<TakenField>{};
    for (uint32_t k = 0; k < b->size; ++k, ++pos) {
      CAPTURE(pos);
      REQUIRE(pos < ref.size());
      const MixEntry& e = ref[pos];
      REQUIRE(b->sources[k] == e.source);
      REQUIRE(b->indices[k] == e.local);
      const dscache::SampleSource& src = *m.source(e.source).source;
      const int64_t label = src.label(e.local);
      CHECK(b->labels[k] == (m.remap(e.source).empty() ? label : unified(m, e.source, label)));
      const std::vector<uint8_t> want =
          member_image(src, e.local, o.transform, b->height, b->width, seed, epoch, mix_key(m, e));
      REQUIRE(want.size() == px);
      CHECK(std::equal(want.begin(), want.end(), b->images + k * px));
      if (o.fields) {
        // score (field 3) and hot (field 4) are not spatial: the member's bytes as stored.
        for (const auto& [index, bytes] : {std::pair{size_t{0}, size_t{4}}, {size_t{1}, 3}}) {
          const dscache::FieldView v = src.field(e.local, index + 3);
          REQUIRE(v.bytes == bytes);
          CHECK(f[index].sample(k, b->size, bytes) ==
                std::vector<uint8_t>(v.data, v.data + v.bytes));
        }
      }
      ++checked;
    }
  }
  CHECK(pos == loader.samples_per_epoch());
  return checked;
}

}  // namespace

TEST_SUITE("loader") {
  TEST_CASE("mixture: every fill path serves the member's own sample, label, crop and fields") {
    const Case cases[] = {
        {"plain copy", false, false, Layout::kFixed, CropMode::kNone, false},
        {"plain copy + flip", false, false, Layout::kFixed, CropMode::kNone, true},
        {"crop of a view + flip", false, false, Layout::kFixed, CropMode::kRandomResized, true},
        {"ragged, center crop", false, false, Layout::kRagged, CropMode::kCenter, false},
        {"ragged, random crop + flip", false, false, Layout::kRagged, CropMode::kRandomResized,
         true},
        {"fields, crop of a view", true, false, Layout::kFixed, CropMode::kRandomResized, true},
        {"fields, decode_crop", true, true, Layout::kFixed, CropMode::kRandomResized, true},
    };
    for (const Case& c : cases) {
      const std::string name = c.name;
      CAPTURE(name);
      TempDir dir;
      std::shared_ptr<const Mixture> m;
      LoaderOptions o = small_options(7);
      o.transform.crop = c.crop;
      o.transform.flip = c.flip;
      if (c.crop != CropMode::kNone) o.transform.height = o.transform.width = 4;
      if (c.fields) {
        FieldSource::Options oa, ob;
        ob.count = 10;
        ob.ragged = !c.encoded;
        oa.encoded = ob.encoded = c.encoded;
        MixSource sa, sb;
        sa.source = std::make_shared<FieldSource>(oa);
        sb.source = std::make_shared<FieldSource>(ob);
        sa.name = "a";
        sb.name = "b";
        sa.repeat = 1;
        sb.repeat = 2;
        m = Mixture::make({sa, sb});
        o.transform.height = o.transform.width = 16;
        // box_id follows the boxes kept, mask is resampled: both read from the member too (a
        // ragged b's mask read at another sample's index is refused by its size).
        o.fields = std::vector<std::string>{"score", "hot", "box_id", "mask"};
      } else {
        m = mix_of(build_pair(dir.path(), c.b_layout), 0.6, 0.4);
      }
      const uint64_t n = check_against_members(m, o, 5, 1);
      CHECK(n == m->epoch_samples());
    }
  }
}
