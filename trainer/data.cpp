// The run's data: sources, Loaders and the normalization measured on the training data.
#include "data.h"

#include <algorithm>
#include <cmath>

#include <cstdio>

#include <fcntl.h>
#include <sys/stat.h>

#include "dscache/cache.h"
#include "dscache/checksum.h"
#include "dscache/manifest.h"
#include "dscache/remote.h"
#include "lazy_source.h"
#include "safety.h"

namespace dscache {
namespace train {

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A built cache's samples: every byte (the shards, labels and per-sample checksums as the
// manifest records their XXH64s) and the recipe that made them.
DataIdentity cache_identity(const Manifest& m) {
  std::vector<uint64_t> words = {m.count, m.labels.xxh64, m.checksums.xxh64, m.index.xxh64};
  for (const ShardEntry& s : m.shards) words.insert(words.end(), {s.first, s.count, s.xxh64});
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(xxh64(words.data(), words.size() * 8)));
  const BuildRecipe& r = m.recipe;
  std::string recipe = std::string(to_string(m.codec)) + " " + to_string(m.storage) + " " +
                       to_string(m.layout) + ", " + std::to_string(m.count) + " samples";
  if (r.quality) recipe += ", quality " + std::to_string(r.quality);
  recipe += r.shuffled ? ", shuffle seed " + std::to_string(r.shuffle_seed) : ", source order";
  recipe += ", from " + m.source.kind + " " + m.source.root;
  return {recipe, hex};
}

// A built cache, or (with a lazy-cache file) an image folder or list decoded on first use.
// `option` ("--train", "--val") names the path in messages. Paths are checked for their type
// first: a FIFO or device where a file is read would block the open, a file where a directory is
// expected would give a puzzling error from deeper down.
LazySource open_source(const std::string& option, const std::string& path,
                       const std::string& lazy_file, const std::string& lazy_option,
                       const TrainOptions& o) {
  if (!lazy_file.empty()) {
    check_directory(path, option, /*or_file=*/true);
    if (!is_directory(path)) {
      trainer_open_regular_file(path, O_RDONLY, option);  // a list file: FIFO/device refused
    }
    check_regular_if_exists(lazy_file, lazy_option);
    return open_lazy_source({path, lazy_file, o.image_size, o.channels});
  }
  if (is_remote_location(path)) {  // its verified local copy (dscache/remote.h)
    auto cache = Cache::open(path);
    return {cache, cache->manifest().classes, cache_identity(cache->manifest())};
  }
  check_directory(path, option);
  // TRAINER-LOCAL pre-check until libcache opens its own files this way (another branch).
  trainer_open_regular_file(path + "/manifest.json", O_RDONLY, option + " manifest");
  auto cache = Cache::open(path);
  return {cache, cache->manifest().classes, cache_identity(cache->manifest())};
}

}  // namespace

Normalization measure_normalization(const SampleSource& cache, NormalizeKind kind,
                                    uint64_t max_samples) {
  const uint32_t c = cache.shape().channels;
  Normalization n;
  if (kind == NormalizeKind::kHalf) {
    n.mean.assign(c, 0.5);
    n.std.assign(c, 0.5);
    return n;
  }
  const uint64_t count = cache.size();
  const uint64_t m = std::min<uint64_t>(count, max_samples);
  std::vector<double> sum(c, 0), sq(c, 0);
  uint64_t pixels = 0;
  std::vector<uint8_t> buf;
  for (uint64_t j = 0; j < m; ++j) {
    const uint64_t i = j * count / m;  // evenly spread, deterministic
    // Any layout and codec: ragged samples have their own size; JPEG ones are decoded.
    const SampleShape s = cache.sample_shape(i);
    buf.resize(s.bytes());
    // Read, not touched through a mapping: the pages around every sample read would count in
    // the trainer's RSS, i.e. most of the cache (8192 samples spread over it).
    cache.copy_sample_unmapped(i, buf.data());
    const uint64_t px = uint64_t{s.height} * s.width;
    for (uint64_t p = 0; p < px; ++p) {
      for (uint32_t ch = 0; ch < c; ++ch) {
        const double v = buf[p * c + ch];
        sum[ch] += v;
        sq[ch] += v * v;
      }
    }
    pixels += px;
  }
  for (uint32_t ch = 0; ch < c; ++ch) {
    const double mean = pixels ? sum[ch] / pixels : 0;
    const double var = pixels ? std::max(0.0, sq[ch] / pixels - mean * mean) : 0;
    n.mean.push_back(mean / 255.0);
    n.std.push_back(std::max(1e-3, std::sqrt(var) / 255.0));
  }
  return n;
}

namespace {

// --val's target fields must be what --train's are: the same outputs (multilabel, regress), or a
// mask field of the same name whose class names, when it has them, are --train's.
void check_val_targets(const TrainOptions& o, const SampleSource& val, const TargetSpec& train) {
  const TargetSpec v = resolve_targets(o.task, val, "--val " + o.val);
  const bool same = o.task.kind == TaskKind::kSegment
                        ? v.fields == train.fields && (v.names.empty() || v.names == train.names)
                        : v.names == train.names;
  if (!same) {
    throw UsageError("--targets: --val " + o.val + " has other target outputs than --train " +
                     o.train + " (a multi-hot array of another length or class names)");
  }
}

}  // namespace

namespace {

// Every --val (rank 0): opened, checked against the training data and labelled with its class
// list, each with its own in-order Loader.
void open_vals(const TrainOptions& o, const DataInfo& m, const LoaderOptions& vo,
               std::vector<ValSet>* out) {
  const bool fields_task = o.task.kind != TaskKind::kClassify;
  for (size_t i = 0; i < o.vals.size(); ++i) {
    const std::string& path = o.vals[i];
    const LazySource val =
        open_source("--val", path, i == 0 ? o.val_lazy_cache : "", "--val-lazy-cache", o);
    const SampleSource& v = *val.source;
    const SampleShape vs = v.shape();
    if (vs.channels != m.channels) {
      throw UsageError("--val: " + path + " has " + std::to_string(vs.channels) +
                       " channels, the training data " + std::to_string(m.channels));
    }
    if (fields_task) check_val_targets(o, v, m.targets);
    // One --train and one --val: the same classes, in the same order, as always.
    const bool same_list = !o.mixing() && o.vals.size() == 1;
    if (!fields_task && same_list && val.classes != m.classes) {
      throw UsageError("--val: " + path + " has other classes than the training data (" +
                       std::to_string(val.classes.size()) + " vs " +
                       std::to_string(m.classes.size()) + ")");
    }
    if (o.image_size == 0 &&
        (v.layout() != Layout::kFixed || vs.height != m.height || vs.width != m.width)) {
      throw UsageError("--val: " + path + " has another sample shape than the training " +
                       "cache; give --image-size to crop both");
    }
    ValSet set = fields_task || same_list ? ValSet{path, "", val.source, nullptr, nullptr}
                                          : relabel_val(path, val, m.classes);
    set.name = path;
    set.loader = std::make_unique<Loader>(set.source, vo);
    out->push_back(std::move(set));
  }
}

}  // namespace

TrainData open_data(const TrainOptions& o, int rank, int world_size,
                    const BufferAllocator& allocator) {
  RemoteOptions remote = remote_options();  // --train/--val on object storage
  if (!o.s3_endpoint.empty()) remote.endpoint = o.s3_endpoint;
  if (!o.local_cache.empty()) remote.local_cache = o.local_cache;
  if (o.local_cache_size != 0) remote.local_cache_size = o.local_cache_size;
  set_remote_options(remote);
  TrainData d;
  if (!o.mixing()) {
    LazySource train = open_source("--train", o.train, o.lazy_cache, "--lazy-cache", o);
    d.train = train.source;
    d.info.classes = train.classes;
    d.info.identity = train.identity;
  } else {
    std::vector<LazySource> caches;
    for (const std::string& path : o.trains) {
      caches.push_back(open_source("--train", path, "", "--lazy-cache", o));
    }
    d.info.mixture =
        make_train_mixture(o, caches, uint64_t{o.batch} * o.accum_steps * uint64_t(world_size));
    d.train = d.info.mixture->view();
    d.info.classes = d.info.mixture->classes();
    d.info.identity = mixture_identity(*d.info.mixture, caches);
  }
  d.info.count = d.train->size();
  d.info.layout = d.train->layout();
  d.info.height = d.train->shape().height;
  d.info.width = d.train->shape().width;
  d.info.channels = d.train->shape().channels;
  const DataInfo& m = d.info;
  if (m.layout == Layout::kRagged && o.image_size == 0) {
    throw UsageError("--image-size: required for a ragged cache (" + o.train + ")");
  }
  const bool fields_task = o.task.kind != TaskKind::kClassify;
  if (fields_task) d.info.targets = resolve_targets(o.task, *d.train, "--train " + o.train);
  if (o.task.kind == TaskKind::kSegment) {
    scan_mask_classes(*d.train, "--train " + o.train, &d.info.targets);
  }
  if (!fields_task && m.classes.size() < 2) {
    throw UsageError("--train: " + o.train + " has " + std::to_string(m.classes.size()) +
                     " class(es); classification needs at least 2");
  }
  LoaderOptions lo;
  lo.batch_size = o.batch;
  lo.workers = o.workers;
  lo.prefetch = o.prefetch;
  lo.sampler.shuffle = o.windowed ? Shuffle::kWindowed : Shuffle::kGlobal;
  lo.sampler.window_bytes = o.window_bytes;  // kWindowed: 0 = from available memory
  LoaderOptions vo = lo;
  vo.sampler.shuffle = Shuffle::kNone;  // validation: rank 0 alone, every sample once
  // kPad: every rank gets as many samples (a few repeated), so all ranks take the same number of
  // optimizer steps and a window holds world_size times this rank's samples.
  lo.sampler.rank = static_cast<uint32_t>(rank);
  lo.sampler.world_size = static_cast<uint32_t>(world_size);
  lo.sampler.tail = RankTail::kPad;
  if (o.image_size > 0) {
    // Evaluation: centre crop. Training (built caches): random-resized crop + flip, torchvision's
    // recipe; a lazy source is already decoded to image_size x image_size.
    vo.transform.crop = CropMode::kCenter;
    vo.transform.height = vo.transform.width = o.image_size;
    if (o.lazy_cache.empty()) {
      lo.transform.crop = CropMode::kRandomResized;
      lo.transform.flip = true;
      lo.transform.height = lo.transform.width = o.image_size;
    }
  }
  if (fields_task) lo.fields = vo.fields = m.targets.fields;  // only what the loss reads
  lo.allocator = allocator;
  vo.allocator = allocator;
  d.train_options = lo;
  d.train_loader =
      m.mixture ? std::make_unique<Loader>(m.mixture, lo) : std::make_unique<Loader>(d.train, lo);
  if (rank == 0) open_vals(o, m, vo, &d.vals);
  return d;
}

void set_global_batch(TrainData* d, uint64_t global_batch) {
  const std::shared_ptr<const Mixture> old = d->info.mixture;
  if (!old || old->options().stratum == global_batch) return;
  std::vector<MixSource> sources;
  for (size_t k = 0; k < old->sources(); ++k) sources.push_back(old->source(k));
  MixtureOptions mo = old->options();
  mo.stratum = global_batch;
  d->train_loader.reset();  // its workers hold the old mixture's sources
  d->info.mixture = Mixture::make(std::move(sources), mo);
  d->train = d->info.mixture->view();
  d->train_loader = std::make_unique<Loader>(d->info.mixture, d->train_options);
}

}  // namespace train
}  // namespace dscache
