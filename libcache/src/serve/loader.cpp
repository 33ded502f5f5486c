// Loader: the epoch order (sampler.cpp) cut into batches, filled by a Prefetcher into reusable
// aligned buffers, handed out in order.
#include "dscache/loader.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "dscache/error.h"
#include "read/mapped_file.h"
#include "serve/direct_windows.h"
#include "serve/field_fill.h"
#include "serve/loader_impl.h"
#include "serve/physical_memory.h"
#include "serve/prefetcher.h"
#include "serve/read_ahead.h"

namespace dscache {

namespace {

constexpr size_t kAlign = 64;

Error invalid(const std::string& reason) { return Error(ErrorKind::kInvalidArgument, "", reason); }

// a * b, or false when it does not fit in 64 bits.
bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// Mirrors an HWC image left to right, in place.
void mirror_rows(uint8_t* img, uint32_t h, uint32_t w, uint32_t c) {
  for (uint32_t y = 0; y < h; ++y) {
    uint8_t* row = img + size_t{y} * w * c;
    for (uint32_t a = 0, b = w - 1; a < b; ++a, --b) {
      for (uint32_t k = 0; k < c; ++k) std::swap(row[size_t{a} * c + k], row[size_t{b} * c + k]);
    }
  }
}

// The options that need no source: sizes, counts, the stride and the allocator's pair.
void validate_counts(const LoaderOptions& o) {
  if (o.batch_size < 1) throw invalid("loader.batch_size must be >= 1");
  if (o.batch_stride < 1) throw invalid("loader.batch_stride must be >= 1");
  if (o.batch_offset >= o.batch_stride) {
    throw invalid("loader.batch_offset " + std::to_string(o.batch_offset) +
                  " must be < batch_stride " + std::to_string(o.batch_stride));
  }
  if (o.workers > kMaxWorkers) {
    throw invalid("loader.workers " + std::to_string(o.workers) + " > " +
                  std::to_string(kMaxWorkers) + " (threads filling batches)");
  }
  if (o.prefetch < 1) throw invalid("loader.prefetch must be >= 1");
  if (o.prefetch > kMaxPrefetch) {  // + 1 buffers would wrap to 0 at UINT32_MAX
    throw invalid("loader.prefetch " + std::to_string(o.prefetch) + " > " +
                  std::to_string(kMaxPrefetch) + " (batches buffered ahead)");
  }
  for (const auto& [a, name] :
       {std::pair{&o.allocator, "allocator"}, std::pair{&o.field_allocator, "field_allocator"}}) {
    if (static_cast<bool>(a->allocate) != static_cast<bool>(a->release)) {
      throw invalid(std::string("loader.") + name + " needs both allocate and release, or neither");
    }
  }
  detail::validate_direct(o);
  if (o.hand_off_images && !o.allocator.allocate) {
    throw invalid("loader.hand_off_images needs an allocator (who else would free the buffers)");
  }
}

}  // namespace

Loader::Impl::Impl(std::shared_ptr<const SampleSource> source, const LoaderOptions& options,
                   std::shared_ptr<const Mixture> mixture)
    : source_(std::move(source)),
      options_(options),
      mix_(mixture ? std::make_unique<detail::MixEpoch>(std::move(mixture), options) : nullptr) {
  if (!source_) throw invalid("loader: source is null");
  validate_counts(options_);
  const uint64_t n = mix_ ? mix_->length() : source_->size();  // the epoch's samples
  validate(options_.sampler, n);
  // Windowed shuffle without an explicit block: block and window sized in stored bytes.
  options_.sampler = detail::resolve_window_for(
      *source_, options_.sampler,
      (uint64_t{options_.prefetch} + 1) * options_.batch_size * options_.sampler.world_size);
  layout_ = source_->layout();
  encoded_ = source_->encoded();
  validate(options_.transform, layout_);

  const TransformOptions& t = options_.transform;
  const SampleShape stored = source_->shape();
  channels_ = stored.channels;
  if (channels_ == 0) throw invalid("loader: the source reports 0 channels");
  if (layout_ == Layout::kFixed) {
    out_h_ = t.height != 0 ? t.height : stored.height;
    out_w_ = t.width != 0 ? t.width : stored.width;
    if (t.crop == CropMode::kNone) {
      if (out_h_ != stored.height) {
        throw invalid("transform.height " + std::to_string(t.height) + " != stored height " +
                      std::to_string(stored.height) +
                      " (crop none serves samples as stored; use 0, or crop center)");
      }
      if (out_w_ != stored.width) {
        throw invalid("transform.width " + std::to_string(t.width) + " != stored width " +
                      std::to_string(stored.width) +
                      " (crop none serves samples as stored; use 0, or crop center)");
      }
      plain_copy_ = true;
    }
  } else {
    out_h_ = t.height;  // validate() made both > 0
    out_w_ = t.width;
  }
  // Every product that sizes an allocation is checked: a wrapped size would allocate a few bytes
  // that the workers then write far past.
  uint64_t hw = 0;
  if (!checked_mul(out_h_, out_w_, &hw) || !checked_mul(hw, channels_, &sample_bytes_)) {
    throw invalid("transform: output sample " + std::to_string(out_h_) + "x" +
                  std::to_string(out_w_) + "x" + std::to_string(channels_) +
                  " bytes does not fit in 64 bits");
  }

  fields_ = std::make_unique<detail::FieldFill>(*source_, options_.fields,
                                                options_.min_box_visibility, out_h_, out_w_);
  with_fields_ = !fields_->empty();
  direct_choice_ =
      mix_ ? mix_->direct_choice() : detail::choose_direct_read(*source_, options_, plain_copy_);
  // What a batch holds per sample besides labels and indices: the image and the fixed-size
  // fields (variable ones grow with the data and are not known here).
  uint64_t field_bytes = 0, held_bytes = 0;
  if (!fields_->fixed_bytes_per_sample(&field_bytes) ||
      __builtin_add_overflow(sample_bytes_, field_bytes, &held_bytes)) {
    throw invalid("loader.fields: the fixed-size fields of one sample do not fit in 64 bits");
  }

  const uint64_t per_rank = samples_per_rank(n, options_.sampler);
  const uint64_t bs = options_.batch_size;
  const uint64_t rank_batches = options_.drop_last ? per_rank / bs : (per_rank + bs - 1) / bs;
  samples_per_epoch_ = options_.drop_last ? rank_batches * bs : per_rank;
  const uint64_t stride = options_.batch_stride, offset = options_.batch_offset;
  batches_per_epoch_ = rank_batches > offset ? (rank_batches - offset + stride - 1) / stride : 0;

  const uint32_t slot_count = options_.prefetch + 1;  // <= kMaxPrefetch + 1: no wrap
  // Per slot: the images plus a label and an index per sample; slot_count slots.
  const std::string sizes =
      "loader.batch_size " + std::to_string(bs) + " x " + std::to_string(held_bytes) +
      " bytes per sample (" + std::to_string(out_h_) + "x" + std::to_string(out_w_) + "x" +
      std::to_string(channels_) +
      (field_bytes > 0 ? " + " + std::to_string(field_bytes) + " of fields" : std::string()) +
      ") x " + std::to_string(slot_count) + " buffers (prefetch " +
      std::to_string(options_.prefetch) + " + 1)";
  uint64_t batch_bytes = 0, slot_bytes = 0, ring_bytes = 0;
  if (!checked_mul(bs, held_bytes, &batch_bytes) || batch_bytes > UINT64_MAX - 2 * kAlign ||
      !checked_mul(bs, sizeof(int64_t) + sizeof(uint64_t), &slot_bytes) ||
      slot_bytes > UINT64_MAX - batch_bytes - kAlign ||
      !checked_mul(slot_bytes + batch_bytes + kAlign, slot_count, &ring_bytes)) {
    throw invalid(sizes + " does not fit in 64 bits");
  }
  const uint64_t memory = detail::physical_memory_bytes();  // no larger ring can be allocated
  if (ring_bytes > memory || batch_bytes > SIZE_MAX) {
    throw invalid(sizes + " = " + std::to_string(ring_bytes) +
                  " bytes, more than this machine's memory (" + std::to_string(memory) +
                  " bytes); lower batch_size, prefetch or the transform size");
  }
  slots_.resize(slot_count);
  for (Slot& s : slots_) {
    s.images = detail::AlignedBuffer(&options_.allocator, "allocator");
    s.images.reserve(bs * sample_bytes_, 0);
    s.labels.resize(bs);
    s.indices.resize(bs);
    if (mix_) s.sources.resize(bs);
    if (with_fields_) {
      s.fields = fields_->make_buffers(options_.batch_size, &options_.field_allocator);
      s.batch.fields = fields_->make_batch_fields();
    }
  }
  try {
    prefetcher_ = std::make_unique<Prefetcher>(
        options_.workers, slot_count,
        [this](uint64_t job, uint32_t slot, const Prefetcher::Cancel& cancel) {
          fill(job, slot, cancel);
        });
  } catch (const std::system_error& e) {  // the system refused a thread (limits, memory)
    throw Error(ErrorKind::kIOError, "",
                "loader: cannot start " + std::to_string(options_.workers) +
                    " worker threads: " + e.code().message());
  }
}

void Loader::Impl::start(uint64_t seed, uint64_t epoch, uint64_t cursor) {
  if (cursor > batches_per_epoch_) {
    throw invalid("position.cursor " + std::to_string(cursor) + " > batches per epoch " +
                  std::to_string(batches_per_epoch_));
  }
  hand_off_held();
  prefetcher_->stop();  // no fill runs past this point: order_ and friends may change
  direct_.reset();      // its reader thread stops; nothing waits on it any more
  pos_window_.clear();
  started_ = false;
  if (mix_) {
    order_.clear();
    mix_->start(seed, epoch, rank_batch(cursor) * options_.batch_size, samples_per_epoch_);
  } else {
    order_ = epoch_order(source_->size(), options_.sampler, seed, epoch);
    order_.resize(samples_per_epoch_);  // drop_last
  }
  seed_ = seed;
  epoch_ = epoch;
  cursor_ = cursor;
  started_ = true;
  // ReadAhead counts the rank's batches (unstrided).
  read_ahead_ = detail::ReadAhead(options_.sampler, source_->size(), seed, epoch,
                                  options_.batch_size, samples_per_epoch_, rank_batch(cursor));
  if (direct_choice_.direct) {  // the epoch's windows and pos_window_, or null
    direct_ = detail::DirectWindows::plan(source_, options_, read_ahead_.windows(),
                                          samples_per_epoch_, rank_batch(cursor), &pos_window_);
  }
  if (direct_) {
    read_ahead_ = detail::ReadAhead();  // no page-cache hints: the windows bypass it
  } else {
    read_ahead_.begin(*source_, rank_batch(cursor + options_.prefetch));
  }
  prefetcher_->start(cursor, batches_per_epoch_);
}

const Batch* Loader::Impl::next() {
  if (!started_) {
    throw invalid("Loader::next() called before start_epoch() or restore()");
  }
  hand_off_held();
  if (cursor_ >= batches_per_epoch_) {
    prefetcher_->release();
    return nullptr;
  }
  const uint32_t slot = prefetcher_->acquire(cursor_, &wait_seconds_, options_.wait_poll);
  held_slot_ = slot;
  read_ahead_.advance(*source_, rank_batch(cursor_), rank_batch(cursor_ + options_.prefetch + 1));
  ++cursor_;
  return &slots_[slot].batch;
}

void Loader::Impl::hand_off_held() {
  if (held_slot_ < 0) return;
  if (options_.hand_off_images) {
    // The slot is still held: no worker writes it until the prefetcher releases it. The new
    // buffer first, then the old one released (renew), so a failed allocation leaves the slot
    // as it was.
    slots_[held_slot_].images.renew();
    if (with_fields_ && options_.field_allocator.allocate) {
      detail::FieldFill::hand_off(&slots_[held_slot_].fields);
    }
  }
  held_slot_ = -1;
}

void Loader::Impl::fill(uint64_t job, uint32_t slot_index, const Prefetcher::Cancel& cancel) {
  Slot& slot = slots_[slot_index];
  const uint64_t bs = options_.batch_size;
  const uint64_t begin = rank_batch(job) * bs;
  const uint64_t count = std::min<uint64_t>(bs, samples_per_epoch_ - begin);
  const TransformOptions& t = options_.transform;
  std::vector<uint8_t>& scratch = slot.scratch;
  uint64_t run_left = 0;  // samples copy_run already copied for the coming positions
  if (with_fields_) fields_->begin(&slot.fields);
  for (uint64_t k = 0; k < count; ++k) {
    if (cancel.requested()) return;
    const uint64_t pos = begin + k;
    const MixEntry* entry = mix_ ? &mix_->entry(pos) : nullptr;
    const At at_pos = at(pos);
    const SampleSource& src = *at_pos.source;
    const uint64_t idx = at_pos.index;
    // The sample's draw, computed only where a crop, flip or decode uses it.
    const auto key = [&] { return entry ? mix_->xform_key(*entry) : idx; };
    uint8_t* out = slot.images.data() + k * sample_bytes_;
    // The sample's one geometric draw: its image and every spatial field use it.
    SampleShape s;
    CropBox box;
    if (encoded_) {
      // Decoded in this worker, only as much as the crop needs (kNone: the whole sample).
      s = src.sample_shape(idx);
      box = choose_crop(t, s.height, s.width, seed_, epoch_, key());
      src.decode_crop(idx, box, out_h_, out_w_, out);
    } else if (plain_copy_) {
      s = SampleShape{out_h_, out_w_, channels_};
      const uint32_t w = direct_ ? pos_window_[pos] : kNoWindow;
      if (w != kNoWindow) {
        if (!direct_->copy(w, idx, out, cancel)) return;
      } else {
        if (run_left == 0) run_left = copy_run(pos, count - k, out);
        --run_left;
      }
      // Crop none: the whole sample, mirrored by the sample's draw when flip is on.
      if (t.flip) {
        box = choose_crop(t, out_h_, out_w_, seed_, epoch_, key());
      } else {
        box = CropBox{0, 0, out_h_, out_w_, false};
      }
      if (box.flip) mirror_rows(out, out_h_, out_w_, channels_);
    } else {
      s = src.sample_shape(idx);
      if (s.channels != channels_) {
        throw Error(ErrorKind::kCorruption,
                    entry ? mix_->mixture()->source(entry->source).name : "",
                    "sample " + std::to_string(idx) + " has " + std::to_string(s.channels) +
                        " channels, the source says " + std::to_string(channels_));
      }
      box = choose_crop(t, s.height, s.width, seed_, epoch_, key());
      crop_sample(src, idx, s, box, &scratch, out);
    }
    if (with_fields_) {
      fields_->add(&slot.fields, static_cast<uint32_t>(k), src, idx, s.height, s.width,
                   SpatialTransform(box, s.height, s.width, out_h_, out_w_));
    }
    slot.labels[k] = entry ? mix_->label(*entry) : src.label(idx);
    slot.indices[k] = idx;
    if (entry) slot.sources[k] = entry->source;
  }
  Batch& b = slot.batch;
  b.index = rank_batch(job);
  b.size = static_cast<uint32_t>(count);
  b.height = out_h_;
  b.width = out_w_;
  b.channels = channels_;
  b.images = slot.images.data();
  b.labels = slot.labels.data();
  b.indices = slot.indices.data();
  b.sources = mix_ ? slot.sources.data() : nullptr;
  if (with_fields_) fields_->finish(&slot.fields, b.size, &b.fields);
}

// Copies the samples of positions pos, pos + 1, ... while they stay consecutive in one source
// (at most `limit`) with one copy_samples call — one pread for a run in pread mode; returns
// how many it copied.
uint64_t Loader::Impl::copy_run(uint64_t pos, uint64_t limit, uint8_t* out) const {
  const At first = at(pos);
  uint64_t len = 1;
  for (; len < limit; ++len) {
    const At next = at(pos + len);
    if (next.source != first.source || next.index != first.index + len) break;
  }
  if (len == 1) {
    first.source->copy_sample(first.index, out);
  } else {
    first.source->copy_samples(first.index, len, out);
  }
  return len;
}

// Crops sample `idx` of `src` (shape s) by `box` into out_h_ x out_w_ at `out`. Only the crop
// box is copied out of view() memory, row by row through guarded_copy, and crop_resize reads
// the copy: reading a mapping directly would die of SIGBUS on a shard truncated under the
// reader. Sources without stable pointers copy the whole sample.
void Loader::Impl::crop_sample(const SampleSource& src, uint64_t idx, const SampleShape& s,
                               const CropBox& box, std::vector<uint8_t>* scratch,
                               uint8_t* out) const {
  ImageView view;
  bool have_view = false;
  try {
    view = src.view(idx);
    have_view = view.height == s.height && view.width == s.width && view.channels == s.channels;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupported) throw;
  }
  if (have_view) {
    const size_t c = s.channels, stride = size_t{s.width} * c, row = size_t{box.width} * c;
    scratch->resize(size_t{box.height} * row);
    try {
      for (uint32_t y = 0; y < box.height; ++y) {
        detail::guarded_copy(scratch->data() + y * row,
                             view.data + (size_t{box.y} + y) * stride + size_t{box.x} * c, row, "");
      }
    } catch (const Error&) {
      // The source's own guarded read meets the same fault and names the file.
      std::vector<uint8_t> whole(static_cast<size_t>(s.bytes()));
      src.copy_sample(idx, whole.data());
      throw;
    }
    // The sample's transform, read relative to the copied window.
    crop_resize(ImageView{scratch->data(), box.height, box.width, s.channels},
                CropBox{0, 0, box.height, box.width, box.flip}, out_h_, out_w_, out);
  } else {
    scratch->resize(static_cast<size_t>(s.bytes()));
    src.copy_sample(idx, scratch->data());
    SpatialTransform(box, s.height, s.width, out_h_, out_w_)
        .image(ImageView{scratch->data(), s.height, s.width, s.channels}, out);
  }
}

const FieldBatch* Batch::field(const std::string& name) const {
  for (const FieldBatch& f : fields) {
    if (f.spec != nullptr && f.spec->name == name) return &f;
  }
  return nullptr;
}

Loader::Loader(std::shared_ptr<const SampleSource> source, const LoaderOptions& options)
    : impl_(std::make_unique<Impl>(std::move(source), options)) {}

Loader::Loader(std::shared_ptr<const Mixture> mixture, const LoaderOptions& options)
    : impl_(mixture ? std::make_unique<Impl>(mixture->view(), options, mixture)
                    : throw invalid("loader: mixture is null")) {}

Loader::~Loader() = default;

const std::shared_ptr<const Mixture>& Loader::mixture() const {
  static const std::shared_ptr<const Mixture> kNone;
  return impl_->mix_ ? impl_->mix_->mixture() : kNone;
}

void Loader::start_epoch(uint64_t seed, uint64_t epoch) { impl_->start(seed, epoch, 0); }

void Loader::restore(const LoaderPosition& pos) { impl_->start(pos.seed, pos.epoch, pos.cursor); }

const Batch* Loader::next() { return impl_->next(); }

LoaderPosition Loader::position() const {
  return LoaderPosition{impl_->seed_, impl_->epoch_, impl_->cursor_};
}

const LoaderOptions& Loader::options() const { return impl_->options_; }

uint64_t Loader::epoch_length() const {
  return impl_->mix_ ? impl_->mix_->length() : impl_->source_->size();
}

const SamplerOptions& Loader::sampler_options() const { return impl_->options_.sampler; }

uint64_t Loader::batches_per_epoch() const { return impl_->batches_per_epoch_; }

uint64_t Loader::samples_per_epoch() const { return impl_->samples_per_epoch_; }

bool Loader::reads_direct() const { return impl_->direct_ != nullptr; }

std::string Loader::direct_read_reason() const {
  const Impl& i = *impl_;  // chose O_DIRECT, started, yet reads through the page cache: refused
  return detail::describe(i.direct_choice_, i.direct_choice_.direct && i.started_ && !i.direct_);
}

double Loader::take_wait_seconds() {
  const double w = impl_->wait_seconds_;
  impl_->wait_seconds_ = 0;
  return w;
}

}  // namespace dscache
