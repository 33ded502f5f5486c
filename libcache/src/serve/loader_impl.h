// Private: the Loader's state, shared by loader.cpp (epochs, batches) and loader_elastic.cpp
// (global cursor, resume).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dscache/loader.h"
#include "serve/direct_windows.h"
#include "serve/field_fill.h"
#include "serve/mix/mix_epoch.h"
#include "serve/prefetcher.h"
#include "serve/read_ahead.h"

namespace dscache {

class Loader::Impl {
 public:
  // `mixture`: a Loader over a Mixture (`source` is its view()); null for a single source.
  Impl(std::shared_ptr<const SampleSource> source, const LoaderOptions& options,
       std::shared_ptr<const Mixture> mixture = nullptr);

  void start(uint64_t seed, uint64_t epoch, uint64_t cursor);
  const Batch* next();

  // One ring slot: memory allocated once, reused by every batch and epoch.
  struct Slot {
    detail::AlignedBuffer images;  // from options_.allocator
    std::vector<int64_t> labels;
    std::vector<uint64_t> indices;
    std::vector<uint32_t> sources;  // a mixture: each sample's source
    detail::FieldBuffers fields;    // the selected fields' values (none: empty)
    std::vector<uint8_t> scratch;   // a crop box (or sample) copied out of the source
    Batch batch;
  };

  void fill(uint64_t job, uint32_t slot, const Prefetcher::Cancel& cancel);
  // hand_off_images: the held batch's slot gets a new image buffer (the old one released to
  // the allocator), and new field buffers with a field_allocator, before it may be refilled.
  void hand_off_held();
  uint64_t copy_run(uint64_t pos, uint64_t limit, uint8_t* out) const;
  void crop_sample(const SampleSource& src, uint64_t idx, const SampleShape& s, const CropBox& box,
                   std::vector<uint8_t>* scratch, uint8_t* out) const;
  // Rank position `pos`'s sample: its source and index there. A mixture's entry names them, so
  // a fill calls the member source directly (never a locate through the view); a single
  // source's order holds the index.
  struct At {
    const SampleSource* source;
    uint64_t index;
  };
  At at(uint64_t pos) const {
    if (!mix_) return At{source_.get(), order_[pos]};
    const MixEntry& e = mix_->entry(pos);
    return At{&mix_->source(e.source), e.local};
  }

  std::shared_ptr<const SampleSource> source_;
  LoaderOptions options_;
  std::unique_ptr<detail::MixEpoch> mix_;  // a mixture's epochs; null for a single source
  Layout layout_;
  uint32_t out_h_ = 0, out_w_ = 0, channels_ = 0;
  uint64_t sample_bytes_ = 0;
  bool plain_copy_ = false;  // fixed layout, crop none: copy_sample (+ mirror when flipped)
  bool encoded_ = false;     // a JPEG cache: decode_crop straight into the batch
  std::unique_ptr<detail::FieldFill> fields_;  // the fields batches carry
  bool with_fields_ = false;                   // any at all (else no per-sample field work)
  uint64_t samples_per_epoch_ = 0;
  uint64_t batches_per_epoch_ = 0;  // served: the stride's share of the rank's batches
  // The rank's batch number of the `job`-th batch this Loader serves.
  uint64_t rank_batch(uint64_t job) const {
    return options_.batch_offset + job * options_.batch_stride;
  }
  std::vector<Slot> slots_;

  // Read by fills; changed only while the prefetcher is stopped. A mixture's order is its
  // MixEpoch's entries (order_ stays empty).
  std::vector<uint64_t> order_;
  uint64_t seed_ = 0;
  uint64_t epoch_ = 0;

  // Consumer state.
  detail::ReadAhead read_ahead_;  // kWindowed: IO hints as the cursor moves
  bool started_ = false;
  uint64_t cursor_ = 0;
  int64_t held_slot_ = -1;  // the slot of the batch next() returned last, until released
  double wait_seconds_ = 0;

  // direct_read: the window each served position is copied from (kNoWindow: copy_run, e.g.
  // the rank tail's padding); rebuilt by start() while the prefetcher is stopped.
  static constexpr uint32_t kNoWindow = detail::kNoWindow;
  std::vector<uint32_t> pos_window_;
  std::unique_ptr<detail::DirectWindows> direct_;
  DirectReadDecision direct_choice_;  // made once, at construction (direct_read_reason())

  std::unique_ptr<Prefetcher> prefetcher_;  // last: its threads stop before the rest dies
};

}  // namespace dscache
