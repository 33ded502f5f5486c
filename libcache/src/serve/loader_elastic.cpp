// Loader's global cursor and elastic resume: a rank's batch derived from the epoch's global
// cursor G and back, so an epoch continues under another world size, batch size or worker count
// (docs/SERVING.md "Changing the number of ranks"). The global order does not depend on the
// world size (epoch_order, mix_segment_order), so G / (batch_size x world_size) is the rank batch
// every rank of the new geometry continues from; a mixture adds its MixState (serve/mix/).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "dscache/error.h"
#include "dscache/loader.h"
#include "dscache/sampler.h"
#include "serve/loader_impl.h"

namespace dscache {
namespace {

// The rank's batches per epoch and its samples in them (after drop_last).
uint64_t rank_samples(uint64_t n, const SamplerOptions& sampler, uint64_t batch_size,
                      bool drop_last) {
  const uint64_t per_rank = samples_per_rank(n, sampler);
  return drop_last ? per_rank / batch_size * batch_size : per_rank;
}

Error invalid(const std::string& reason) { return Error(ErrorKind::kInvalidArgument, "", reason); }

}  // namespace

uint64_t epoch_sample(uint64_t n, const SamplerOptions& sampler, uint64_t batch_size,
                      bool drop_last, uint64_t rank_batches) {
  if (batch_size == 0 || sampler.world_size == 0) throw invalid("batch_size and world_size >= 1");
  const uint64_t taken = rank_batches > n ? n : rank_batches * batch_size;  // no overflow
  if (taken >= rank_samples(n, sampler, batch_size, drop_last)) return n;
  return taken * sampler.world_size;
}

uint64_t rank_batch_at(uint64_t n, const SamplerOptions& sampler, uint64_t batch_size,
                       bool drop_last, uint64_t sample) {
  if (batch_size == 0 || sampler.world_size == 0) throw invalid("batch_size and world_size >= 1");
  const uint64_t world = sampler.world_size, global = batch_size * world;
  const uint64_t samples = rank_samples(n, sampler, batch_size, drop_last);
  const uint64_t batches = (samples + batch_size - 1) / batch_size;
  if (sample > n) {
    throw invalid("position.sample " + std::to_string(sample) + " > the epoch's " +
                  std::to_string(n) + " samples");
  }
  if (sample == n) return batches;
  if (sample % global != 0) {
    const std::string g = std::to_string(sample);
    throw invalid("position.sample " + g + " is not a multiple of batch_size " +
                  std::to_string(batch_size) + " x world_size " + std::to_string(world) + " = " +
                  std::to_string(global) +
                  ": it falls inside a global batch of this geometry; resume from a state taken "
                  "at a global-batch boundary, or with batch_size x world_size dividing " +
                  g);
  }
  return std::min(sample / global, batches);
}

uint64_t Loader::epoch_sample(uint64_t rank_batches) const {
  const LoaderOptions& o = options();
  return dscache::epoch_sample(epoch_length(), o.sampler, o.batch_size, o.drop_last, rank_batches);
}

EpochPosition Loader::epoch_position() const {
  const LoaderOptions& o = options();
  const LoaderPosition p = position();
  EpochPosition e{p.seed, p.epoch, epoch_sample(o.batch_offset + p.cursor * o.batch_stride), {}};
  if (impl_->mix_ && impl_->started_) e.mix = impl_->mix_->state(e.sample);
  return e;
}

uint64_t Loader::cursor_at(uint64_t sample) const {
  const LoaderOptions& o = options();
  const uint64_t c = rank_batch_at(epoch_length(), o.sampler, o.batch_size, o.drop_last, sample);
  // The first served batch at or after rank batch c: this Loader serves rank batches
  // batch_offset + j x batch_stride.
  const uint64_t offset = o.batch_offset, stride = o.batch_stride;
  return std::min(c > offset ? (c - offset + stride - 1) / stride : 0, batches_per_epoch());
}

void Loader::resume(const EpochPosition& pos, WeightChange change) {
  detail::MixEpoch* mix = impl_->mix_.get();
  if (mix == nullptr) {
    const MixState& m = pos.mix;
    if (m.fingerprint != 0 || m.segment != 0 || m.segment_start != 0 || !m.drawn.empty() ||
        !m.segment_drawn.empty() || !m.taken.empty()) {
      throw invalid("position.mix: the position was saved by a Loader over a mixture of " +
                    std::to_string(m.drawn.size()) +
                    " sources; this Loader serves a single source");
    }
    restore(LoaderPosition{pos.seed, pos.epoch, cursor_at(pos.sample)});
    return;
  }
  // A mixture: the segment is taken first (refused shares throw before anything changes), and
  // put back when the cursor or the start is refused (what resume() changed: O(sources), never
  // a copy of the built epoch).
  detail::MixEpoch::Resumed before = mix->resumed();
  try {
    mix->resume(pos, change);
    // New shares whose epoch ends at or before G: the epoch is over.
    const bool over = pos.mix.fingerprint != mix->fingerprint() && pos.sample >= epoch_length();
    restore(
        LoaderPosition{pos.seed, pos.epoch, over ? batches_per_epoch() : cursor_at(pos.sample)});
  } catch (...) {
    mix->put_back(std::move(before));
    throw;
  }
}

}  // namespace dscache
