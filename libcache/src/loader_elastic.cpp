// Loader's global cursor and elastic resume: a rank's batch derived from the epoch's global
// cursor G and back, so an epoch continues under another world size, batch size or worker count
// (docs/USAGE.md "Changing the number of ranks"). Only the public Loader is needed: the global
// order does not depend on the world size (epoch_order), so G / (batch_size x world_size) is the
// rank batch every rank of the new geometry continues from.
#include <algorithm>
#include <cstdint>
#include <string>

#include "dscache/error.h"
#include "dscache/loader.h"

namespace dscache {

uint64_t Loader::epoch_sample(uint64_t rank_batches) const {
  const LoaderOptions& o = options();
  if (rank_batches * o.batch_size >= samples_per_epoch()) return epoch_length();
  return rank_batches * o.batch_size * o.sampler.world_size;
}

EpochPosition Loader::epoch_position() const {
  const LoaderOptions& o = options();
  const LoaderPosition p = position();
  return EpochPosition{p.seed, p.epoch, epoch_sample(o.batch_offset + p.cursor * o.batch_stride)};
}

void Loader::resume(const EpochPosition& pos) {
  const LoaderOptions& o = options();
  const uint64_t n = epoch_length(), bs = o.batch_size;
  const uint64_t world = o.sampler.world_size, global = bs * world;
  if (pos.sample > n) {
    throw Error(ErrorKind::kInvalidArgument, "",
                "position.sample " + std::to_string(pos.sample) + " > the epoch's " +
                    std::to_string(n) + " samples");
  }
  uint64_t cursor = batches_per_epoch();  // G == E: the epoch is finished
  if (pos.sample < n) {
    if (pos.sample % global != 0) {
      const std::string g = std::to_string(pos.sample);
      throw Error(ErrorKind::kInvalidArgument, "",
                  "position.sample " + g + " is not a multiple of batch_size " +
                      std::to_string(bs) + " x world_size " + std::to_string(world) + " = " +
                      std::to_string(global) +
                      ": it falls inside a global batch of this geometry; resume from a state "
                      "taken at a global-batch boundary, or with batch_size x world_size "
                      "dividing " +
                      g);
    }
    // The first served batch at or after rank batch c: this Loader serves rank batches
    // batch_offset + j x batch_stride.
    const uint64_t c = pos.sample / global, offset = o.batch_offset, stride = o.batch_stride;
    cursor = std::min(c > offset ? (c - offset + stride - 1) / stride : 0, cursor);
  }
  restore(LoaderPosition{pos.seed, pos.epoch, cursor});
}

}  // namespace dscache
