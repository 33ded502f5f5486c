// The run's data: training and validation sources opened and checked, their Loaders, and the
// input normalization measured on the training data (no torch types).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/loader.h"
#include "dscache/sample_source.h"
#include "lazy_source.h"
#include "options.h"
#include "targets.h"

namespace dscache {
namespace train {

// Per-channel mean and std of pixel values scaled to [0, 1].
struct Normalization {
  std::vector<double> mean;  // one per channel
  std::vector<double> std;   // one per channel, > 0
};

// kHalf: 0.5/0.5. kDataset: measured over up to `max_samples` samples spread evenly over the
// cache (every pixel of each), in double; a std below 1e-3 becomes 1e-3.
Normalization measure_normalization(const SampleSource& cache, NormalizeKind kind,
                                    uint64_t max_samples = 8192);

// What the trainer needs to know about its training data, from a manifest or a lazy source.
struct DataInfo {
  uint64_t count = 0;
  Layout layout = Layout::kFixed;
  uint32_t height = 0, width = 0, channels = 0;  // height/width 0 for ragged
  std::vector<std::string> classes;
  // --task multilabel/regress: the target fields resolved on the training data (mean 0, std 1
  // until --target-norm measures them); unused for classify
  TargetSpec targets;
  // What identifies the samples, so --resume can refuse another cache with the same count and
  // shape (lazy_source.h: DataIdentity).
  DataIdentity identity;
};

// Owns the sources and their Loaders (which share the sources); members are destroyed Loaders
// first. Not thread-safe: one training thread.
struct TrainData {
  std::shared_ptr<const SampleSource> train;
  DataInfo info;                            // of `train`
  std::shared_ptr<const SampleSource> val;  // null without --val, and on ranks other than 0
  std::unique_ptr<Loader> train_loader;     // this rank's share of each shuffled epoch
  std::unique_ptr<Loader> val_loader;       // set with `val`: every sample once, in order
};

// Opens --train (a built cache, or with --lazy-cache an image folder or list) and, on rank 0
// only, --val, and sets up their Loaders for `rank` of `world_size`. Both Loaders take their
// image buffers from `allocator` (both members empty: ordinary host memory). Throws UsageError
// when the data does not fit the options (ragged without --image-size, fewer than 2 classes, a
// validation set of other channels, classes or shape), dscache::Error for a bad cache.
TrainData open_data(const TrainOptions& options, int rank, int world_size,
                    const BufferAllocator& allocator);

}  // namespace train
}  // namespace dscache
