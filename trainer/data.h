// The run's data: training and validation sources opened and checked, their Loaders, and the
// input normalization measured on the training data (no torch types).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dscache/loader.h"
#include "dscache/mixture.h"
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
  // Several --train (or --mix): the mixture trained on (its view is TrainData::train, classes
  // unified by name); null for one cache.
  std::shared_ptr<const Mixture> mixture;
};

// One --val: validated on its own, labelled with the training class list.
struct ValSet {
  std::string path;                            // as given to --val
  std::string name;                            // its key in the epoch line's "val" object
  std::shared_ptr<const SampleSource> source;  // the cache, or its relabelling view
  std::shared_ptr<const Mixture> relabel;      // non-null: the view relabelling `source`
  std::unique_ptr<Loader> loader;              // every sample once, in order
};

// Owns the sources and their Loaders (which share the sources); members are destroyed Loaders
// first. Not thread-safe: one training thread.
struct TrainData {
  std::shared_ptr<const SampleSource> train;
  DataInfo info;                         // of `train`
  std::unique_ptr<Loader> train_loader;  // this rank's share of each shuffled epoch
  LoaderOptions train_options;           // what train_loader was made with
  std::vector<ValSet> vals;              // every --val in order; empty on ranks other than 0
};

// Opens --train (a built cache, with --lazy-cache an image folder or list, or several caches as
// a Mixture) and, on rank 0 only, every --val, and sets up their Loaders for `rank` of
// `world_size`. All Loaders take their image buffers from `allocator` (both members empty:
// ordinary host memory). Throws UsageError when the data does not fit the options (ragged
// without --image-size, fewer than 2 classes, caches that cannot mix, a validation set of other
// channels, classes or shape), dscache::Error for a bad cache.
TrainData open_data(const TrainOptions& options, int rank, int world_size,
                    const BufferAllocator& allocator);

// The Mixture of several opened --train caches (data_mix.cpp): each named by its directory's
// basename (made unique), identified by its content digest, with the options' shares and
// batching; `global_batch` is the stratum (the run's batch x accum-steps x world size). Throws
// UsageError for caches that cannot mix (the library's reasons).
std::shared_ptr<const Mixture> make_train_mixture(const TrainOptions& options,
                                                  const std::vector<LazySource>& caches,
                                                  uint64_t global_batch);
// The identity of a mixture's data: every cache's recipe and digest, in order.
DataIdentity mixture_identity(const Mixture& mixture, const std::vector<LazySource>& caches);
// A --val's samples labelled with the training class list: the source itself when its classes
// are that list, else a view remapping its labels. Throws UsageError naming a class of the
// --val that the training data lacks.
ValSet relabel_val(const std::string& path, const LazySource& val,
                   const std::vector<std::string>& train_classes);
// An elastic resume chose --accum-steps: a mixture's stratum follows the global batch, so its
// training Loader is made again when the stratum differs (nothing read yet). No-op otherwise.
void set_global_batch(TrainData* data, uint64_t global_batch);

}  // namespace train
}  // namespace dscache
