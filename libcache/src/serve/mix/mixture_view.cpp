// Mixture::view(): the sources back to back, labels unified, every read forwarded to the
// sample's own source (split where a run of samples crosses from one source to the next).
#include "serve/mix/mixture_view.h"

#include <algorithm>
#include <string>

#include "dscache/error.h"

namespace dscache {
namespace detail {

std::vector<uint64_t> mix_offsets(const std::vector<MixSource>& sources) {
  std::vector<uint64_t> offsets{0};
  for (const MixSource& s : sources) offsets.push_back(offsets.back() + s.source->size());
  return offsets;
}

std::pair<uint32_t, uint64_t> mix_locate(const std::vector<uint64_t>& offsets, uint64_t i) {
  if (offsets.empty() || i >= offsets.back()) {
    throw Error(ErrorKind::kInvalidArgument, "",
                "mixture: sample " + std::to_string(i) + " >= the view's " +
                    std::to_string(offsets.empty() ? 0 : offsets.back()) + " samples");
  }
  const auto it = std::upper_bound(offsets.begin(), offsets.end(), i) - 1;
  const auto k = static_cast<uint32_t>(it - offsets.begin());
  return {k, i - *it};
}

void mix_label_outside(const MixSource& source, uint64_t local, int64_t label, size_t classes) {
  throw Error(ErrorKind::kCorruption, source.name,
              "mixture source " + source.name + ", sample " + std::to_string(local) + ": label " +
                  std::to_string(label) + " is outside its " + std::to_string(classes) +
                  " classes");
}

namespace {

class MixView : public SampleSource {
 public:
  MixView(std::vector<MixSource> sources, std::vector<std::vector<int64_t>> remaps)
      : sources_(std::move(sources)), remaps_(std::move(remaps)) {
    offsets_ = mix_offsets(sources_);
    const SampleShape first = sources_[0].source->shape();
    bool fixed = true;
    for (const MixSource& s : sources_) {
      const SampleShape sh = s.source->shape();
      fixed = fixed && s.source->layout() == Layout::kFixed && sh.height == first.height &&
              sh.width == first.width;
      if (s.source->size() > 0) {
        block_ = std::min(block_, std::max<uint64_t>(1, s.source->locality_block()));
      }
      stored_ += s.source->stored_bytes();
    }
    layout_ = fixed ? Layout::kFixed : Layout::kRagged;
    shape_ = fixed ? first : SampleShape{0, 0, first.channels};
    if (block_ == UINT64_MAX) block_ = 1;
  }

  uint64_t size() const override { return offsets_.back(); }
  Layout layout() const override { return layout_; }
  SampleShape shape() const override { return shape_; }
  uint64_t locality_block() const override { return block_; }
  uint64_t stored_bytes() const override { return stored_; }
  bool encoded() const override { return sources_[0].source->encoded(); }
  const std::vector<FieldSpec>& fields() const override { return sources_[0].source->fields(); }

  int64_t label(uint64_t i) const override {
    const auto [k, local] = mix_locate(offsets_, i);
    return unify(k, local, sources_[k].source->label(local));
  }
  void copy_sample(uint64_t i, uint8_t* out) const override {
    const auto [k, local] = mix_locate(offsets_, i);
    sources_[k].source->copy_sample(local, out);
  }
  void copy_sample_unmapped(uint64_t i, uint8_t* out) const override {
    const auto [k, local] = mix_locate(offsets_, i);
    sources_[k].source->copy_sample_unmapped(local, out);
  }
  ImageView view(uint64_t i) const override {
    const auto [k, local] = mix_locate(offsets_, i);
    ImageView v = sources_[k].source->view(local);
    v.label = unify(k, local, v.label);
    return v;
  }
  SampleShape sample_shape(uint64_t i) const override {
    const auto [k, local] = mix_locate(offsets_, i);
    return sources_[k].source->sample_shape(local);
  }
  void decode_crop(uint64_t i, const CropBox& box, uint32_t out_h, uint32_t out_w,
                   uint8_t* out) const override {
    const auto [k, local] = mix_locate(offsets_, i);
    sources_[k].source->decode_crop(local, box, out_h, out_w, out);
  }
  FieldView field(uint64_t i, size_t f) const override {
    const auto [k, local] = mix_locate(offsets_, i);
    return sources_[k].source->field(local, f);
  }
  // Fixed layout only (one shape): a run is split where it crosses into the next source.
  void copy_samples(uint64_t first, uint64_t count, uint8_t* out) const override {
    const uint64_t bytes = shape_.bytes();
    while (count > 0) {
      const auto [k, local] = mix_locate(offsets_, first);
      const uint64_t n = std::min(count, offsets_[k + 1] - first);
      sources_[k].source->copy_samples(local, n, out);
      first += n;
      count -= n;
      out += n * bytes;
    }
  }
  void advise(uint64_t first, uint64_t count, Advice advice) const override {
    count = std::min(count, size() > first ? size() - first : 0);
    while (count > 0) {
      const auto [k, local] = mix_locate(offsets_, first);
      const uint64_t n = std::min(count, offsets_[k + 1] - first);
      sources_[k].source->advise(local, n, advice);
      first += n;
      count -= n;
    }
  }

 private:
  int64_t unify(uint32_t k, uint64_t local, int64_t label) const {
    return mix_unify_label(sources_[k], remaps_[k], local, label);
  }

  std::vector<MixSource> sources_;
  std::vector<std::vector<int64_t>> remaps_;
  std::vector<uint64_t> offsets_;
  Layout layout_ = Layout::kFixed;
  SampleShape shape_;
  uint64_t block_ = UINT64_MAX;
  uint64_t stored_ = 0;
};

}  // namespace

std::shared_ptr<const SampleSource> make_mix_view(std::vector<MixSource> sources,
                                                  std::vector<std::vector<int64_t>> remaps) {
  return std::make_shared<MixView>(std::move(sources), std::move(remaps));
}

}  // namespace detail
}  // namespace dscache
