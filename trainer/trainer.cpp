// The training loop: micro-batches, accumulation windows, mixed precision, checkpoints, logs.
#include <ATen/Parallel.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "dscache/atomic_file.h"
#include "distributed.h"
#include "lazy_source.h"
#include "dscache/error.h"
#include "train.h"
#include "train_internal.h"

namespace dscache {
namespace train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ---- pieces (train_internal.h) ----

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
    SampleShape s = cache.shape();
    if (cache.layout() == Layout::kFixed) {
      buf.resize(s.bytes());
      cache.copy_sample(i, buf.data());
    } else {
      const ImageView v = cache.view(i);
      s = {v.height, v.width, v.channels};
      buf.assign(v.data, v.data + s.bytes());
    }
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

BatchConverter::BatchConverter(const Normalization& norm, torch::Device device, bool channels_last)
    : device_(device), channels_last_(channels_last) {
  const int64_t c = static_cast<int64_t>(norm.mean.size());
  std::vector<float> shift, scale;
  for (int64_t i = 0; i < c; ++i) {
    shift.push_back(static_cast<float>(norm.mean[i] * 255.0));
    scale.push_back(static_cast<float>(1.0 / (255.0 * norm.std[i])));
  }
  shift_ = torch::tensor(shift).view({1, c, 1, 1}).to(device);
  scale_ = torch::tensor(scale).view({1, c, 1, 1}).to(device);
}

torch::Tensor BatchConverter::images(const Batch& b) const {
  // from_blob: a view of the Loader's buffer (const_cast: torch has no const tensors; it is only
  // read). uint8 crosses to the device (4x fewer bytes than float); the float copy is made there.
  torch::Tensor raw = torch::from_blob(const_cast<uint8_t*>(b.images),
                                       {b.size, b.height, b.width, b.channels}, torch::kUInt8);
  const bool cuda = device_.is_cuda();
  torch::Tensor x = raw.to(device_, /*non_blocking=*/cuda).permute({0, 3, 1, 2});
  if (cuda) mark_copied();
  x = x.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/false,
           channels_last_ ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
  x.sub_(shift_).mul_(scale_);
  return x;
}

torch::Tensor BatchConverter::labels(const Batch& b) const {
  torch::Tensor raw = torch::from_blob(const_cast<int64_t*>(b.labels), {b.size}, torch::kInt64);
  if (!device_.is_cuda()) return raw.clone();
  // A blocking copy from pageable memory would wait for all queued compute; stage the few
  // bytes in page-locked memory and copy asynchronously instead.
  wait_copied();  // the previous labels' copy may still read the staging tensor
  if (!label_staging_.defined() || label_staging_.numel() < b.size) {
    label_staging_ = torch::empty({std::max<int64_t>(b.size, 1024)},
                                  torch::TensorOptions().dtype(torch::kInt64).pinned_memory(true));
  }
  torch::Tensor staged = label_staging_.narrow(0, 0, b.size);
  staged.copy_(raw);
  torch::Tensor y = staged.to(device_, /*non_blocking=*/true);
  mark_copied();
  return y;
}

void BatchConverter::mark_copied() const {
  // An event on the current stream after the copies: waiting on it does not wait for the
  // kernels queued later (as a stream or device synchronize would).
  c10::impl::VirtualGuardImpl impl(device_.type());
  if (!copied_) copied_.emplace(device_.type());  // one event, recorded again each time
  copied_->record(impl.getStream(device_));
}

void BatchConverter::wait_copied() const {
  if (!copied_) return;
  while (!copied_->query()) std::this_thread::yield();  // c10::Event has no blocking wait in 1.13
}

BufferAllocator tensor_allocator(bool pinned) {
  struct Held {
    std::mutex mu;
    std::map<void*, torch::Tensor> tensors;
  };
  auto held = std::make_shared<Held>();
  BufferAllocator a;
  a.allocate = [held, pinned](size_t bytes) -> void* {
    // 64 spare bytes: CPU tensors are 64-byte aligned already, pinned ones page-aligned; the
    // slack keeps the promise if an allocator ever returns less.
    torch::Tensor t = torch::empty({static_cast<int64_t>(bytes + 64)},
                                   torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned));
    const auto addr = reinterpret_cast<uintptr_t>(t.data_ptr());
    void* p = reinterpret_cast<void*>((addr + 63) / 64 * 64);
    std::lock_guard<std::mutex> lock(held->mu);
    held->tensors.emplace(p, std::move(t));
    return p;
  };
  a.release = [held](void* p) {
    std::lock_guard<std::mutex> lock(held->mu);
    held->tensors.erase(p);
  };
  return a;
}

AmpConfig amp_config(Precision precision, DeviceKind device) {
  AmpConfig a;
  a.device = device == DeviceKind::kCuda ? torch::kCUDA : torch::kCPU;
  a.autocast = precision != Precision::kFp32;
  a.dtype = precision == Precision::kFp16 ? torch::kHalf : torch::kBFloat16;
  return a;
}

MicroResult forward_backward(Classifier& model, const torch::Tensor& x, const torch::Tensor& y,
                             int64_t window_samples, const AmpConfig& amp,
                             const GradScaler* scaler) {
  torch::Tensor logits, loss_sum;
  {
    std::optional<AutocastGuard> guard;
    if (amp.autocast) guard.emplace(amp.device, amp.dtype);
    logits = model.forward(x);
    loss_sum = torch::nn::functional::cross_entropy(
        logits.to(torch::kFloat), y,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  }
  torch::Tensor loss = loss_sum / static_cast<double>(window_samples);
  if (scaler) loss = scaler->scale(loss);
  loss.backward();
  MicroResult r;
  r.loss_sum = loss_sum.detach().to(torch::kDouble);
  r.correct = (logits.detach().argmax(1) == y).sum();
  return r;
}

std::vector<int64_t> window_sample_counts(uint64_t batches, uint64_t samples, uint32_t batch,
                                          uint32_t k) {
  std::vector<int64_t> out;
  for (uint64_t first = 0; first < batches; first += k) {
    const uint64_t end = std::min<uint64_t>(first + k, batches);
    int64_t n = 0;
    for (uint64_t b = first; b < end; ++b) {
      n += static_cast<int64_t>(b + 1 < batches ? batch : samples - (batches - 1) * batch);
    }
    out.push_back(n);
  }
  return out;
}

double lr_at(const TrainOptions& o, uint64_t step, uint64_t total_steps) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / o.warmup_steps;
  const uint64_t s = step - o.warmup_steps;
  const uint64_t span = total_steps > o.warmup_steps ? total_steps - o.warmup_steps : 1;
  switch (o.schedule) {
    case ScheduleKind::kConstant:
      return o.lr;
    case ScheduleKind::kCosine: {
      const double t = std::min(1.0, static_cast<double>(s) / span);
      return o.lr * 0.5 * (1.0 + std::cos(M_PI * t));
    }
    case ScheduleKind::kStep: {
      const uint64_t size = o.step_size ? o.step_size : std::max<uint64_t>(1, span / 3);
      return o.lr * std::pow(o.gamma, static_cast<double>(s / size));
    }
  }
  return o.lr;
}

// ---- the run ----

namespace {

constexpr int64_t kCheckpointFormat = 1;
constexpr int kMaxNonFiniteRun = 5;  // consecutive non-finite steps without a scaler → error

struct EvalResult {
  double loss = 0, acc = 0;
};

EvalResult evaluate(Classifier& model, Loader& loader, const BatchConverter& conv,
                    const AmpConfig& amp) {
  model.eval();
  torch::NoGradGuard no_grad;
  conv.wait_copied();
  loader.start_epoch(0, 0);
  double loss = 0;
  int64_t correct = 0, n = 0;
  while (true) {
    conv.wait_copied();
    const Batch* b = loader.next();
    if (!b) break;
    torch::Tensor x = conv.images(*b), y = conv.labels(*b);
    torch::Tensor logits;
    {
      std::optional<AutocastGuard> guard;
      if (amp.autocast) guard.emplace(amp.device, amp.dtype);
      logits = model.forward(x);
    }
    logits = logits.to(torch::kFloat);
    loss += torch::nn::functional::cross_entropy(
                logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
    correct += (logits.argmax(1) == y).sum().item<int64_t>();
    n += b->size;
  }
  model.train();
  EvalResult r;
  if (n > 0) {
    r.loss = loss / n;
    r.acc = static_cast<double>(correct) / n;
  }
  return r;
}

// Everything a checkpoint holds besides model and optimizer.
struct RunState {
  uint64_t global_step = 0;  // optimizer steps attempted (windows done), skipped ones included
  uint64_t sched_step = 0;   // optimizer steps taken: what the LR schedule counts
  int64_t nonfinite_run = 0;
  LoaderPosition position;  // after the last finished window
  // The current epoch's running totals, so a resumed epoch reports the whole epoch.
  double epoch_loss = 0;
  int64_t epoch_correct = 0, epoch_samples = 0, epoch_skipped = 0;
  double epoch_seconds = 0, epoch_wait = 0;
  uint64_t metrics_bytes = 0;  // metrics.jsonl length when the checkpoint was taken
};

// The settings a checkpoint must agree with to be resumed, as (option, value).
// What the trainer needs to know about its training data, from a manifest or a lazy source.
struct DataInfo {
  uint64_t count = 0;
  Layout layout = Layout::kFixed;
  uint32_t height = 0, width = 0, channels = 0;  // height/width 0 for ragged
  std::vector<std::string> classes;
};

std::vector<std::pair<std::string, std::string>> fingerprint(const TrainOptions& o,
                                                             const DataInfo& m, int world) {
  return {
      {"world-size (WORLD_SIZE)", std::to_string(world)},
      {"model", to_string(o.model)},
      {"batch", std::to_string(o.batch)},
      {"accum-steps", std::to_string(o.accum_steps)},
      {"optimizer", to_string(o.optimizer)},
      {"seed", std::to_string(o.seed)},
      {"train", std::to_string(m.count) + " samples " + std::to_string(m.height) + "x" +
                    std::to_string(m.width) + "x" + std::to_string(m.channels) + ", " +
                    std::to_string(m.classes.size()) + " classes"},
      {"image-size", std::to_string(o.image_size)},
  };
}

void write_i(torch::serialize::OutputArchive& a, const std::string& k, int64_t v) {
  a.write(k, c10::IValue(v));
}
void write_d(torch::serialize::OutputArchive& a, const std::string& k, double v) {
  a.write(k, c10::IValue(v));
}
int64_t read_i(torch::serialize::InputArchive& a, const std::string& k) {
  c10::IValue v;
  a.read(k, v);
  return v.toInt();
}
double read_d(torch::serialize::InputArchive& a, const std::string& k) {
  c10::IValue v;
  a.read(k, v);
  return v.toDouble();
}

void save_archive_atomic(torch::serialize::OutputArchive& archive, const std::string& path) {
  std::ostringstream out;
  archive.save_to(out);
  const std::string bytes = out.str();
  write_file_atomic(path, bytes.data(), bytes.size());  // temp + fsync + rename
}

class Run {
 public:
  explicit Run(const TrainOptions& o) : o_(o) {}
  void go();

 private:
  void open_data();
  void build_model();
  void save_checkpoint();
  bool load_checkpoint();
  void log_line(const nlohmann::json& j);
  void progress(uint64_t epoch, uint64_t batch_in_epoch, uint64_t batches, double loss, double lr,
                double rate, bool final_line);

  TrainOptions o_;
  DistEnv dist_;
  std::unique_ptr<Communicator> comm_;  // null for a single process
  bool main_rank_ = true;               // rank 0: the only one that logs and writes files
  torch::Device device_{torch::kCPU};
  std::shared_ptr<const SampleSource> train_;
  DataInfo info_;
  std::shared_ptr<const SampleSource> val_;
  std::unique_ptr<Loader> train_loader_, val_loader_;
  std::shared_ptr<Classifier> model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::optional<GradScaler> scaler_;
  Normalization norm_;
  AmpConfig amp_;
  RunState st_;
  std::ofstream metrics_;
  uint64_t metrics_size_ = 0;  // bytes in metrics.jsonl (what a checkpoint records)
  bool tty_ = false;
  Clock::time_point last_progress_{};
};

// A built cache, or (with a lazy-cache file) an image folder or list decoded on first use.
LazySource open_source(const std::string& path, const std::string& lazy_file,
                       const TrainOptions& o) {
  if (!lazy_file.empty()) return open_lazy_source({path, lazy_file, o.image_size, o.channels});
  auto cache = Cache::open(path);
  return {cache, cache->manifest().classes};
}

void Run::open_data() {
  LazySource train = open_source(o_.train, o_.lazy_cache, o_);
  train_ = train.source;
  info_.classes = train.classes;
  info_.count = train_->size();
  info_.layout = train_->layout();
  info_.height = train_->shape().height;
  info_.width = train_->shape().width;
  info_.channels = train_->shape().channels;
  const DataInfo& m = info_;
  if (m.layout == Layout::kRagged && o_.image_size == 0) {
    throw UsageError("--image-size: required for a ragged cache (" + o_.train + ")");
  }
  if (m.classes.size() < 2) {
    throw UsageError("--train: " + o_.train + " has " + std::to_string(m.classes.size()) +
                     " class(es); classification needs at least 2");
  }
  LoaderOptions lo;
  lo.batch_size = o_.batch;
  lo.workers = o_.workers;
  lo.prefetch = o_.prefetch;
  lo.sampler.shuffle = Shuffle::kGlobal;
  LoaderOptions vo = lo;
  vo.sampler.shuffle = Shuffle::kNone;  // validation: rank 0 alone, every sample once
  // kPad: every rank gets as many samples (a few repeated), so all ranks take the same number of
  // optimizer steps and a window holds world_size times this rank's samples.
  lo.sampler.rank = static_cast<uint32_t>(dist_.rank);
  lo.sampler.world_size = static_cast<uint32_t>(dist_.world_size);
  lo.sampler.tail = RankTail::kPad;
  if (o_.image_size > 0) {
    // Evaluation: centre crop. Training (built caches): random-resized crop + flip, torchvision's
    // recipe; a lazy source is already decoded to image_size x image_size.
    vo.transform.crop = CropMode::kCenter;
    vo.transform.height = vo.transform.width = o_.image_size;
    if (o_.lazy_cache.empty()) {
      lo.transform.crop = CropMode::kRandomResized;
      lo.transform.flip = true;
      lo.transform.height = lo.transform.width = o_.image_size;
    }
  }
  if (o_.device == DeviceKind::kCuda) {  // page-locked batches: asynchronous copies, in place
    lo.allocator = tensor_allocator(/*pinned=*/true);
    vo.allocator = lo.allocator;
  }
  train_loader_ = std::make_unique<Loader>(train_, lo);
  if (!o_.val.empty() && main_rank_) {
    const LazySource val = open_source(o_.val, o_.val_lazy_cache, o_);
    val_ = val.source;
    const SampleShape vs = val_->shape();
    if (vs.channels != m.channels) {
      throw UsageError("--val: " + o_.val + " has " + std::to_string(vs.channels) +
                       " channels, the training data " + std::to_string(m.channels));
    }
    if (val.classes != m.classes) {
      throw UsageError("--val: " + o_.val + " has other classes than the training data (" +
                       std::to_string(val.classes.size()) + " vs " +
                       std::to_string(m.classes.size()) + ")");
    }
    if (o_.image_size == 0 && (val_->layout() != Layout::kFixed || vs.height != m.height ||
                               vs.width != m.width)) {
      throw UsageError("--val: " + o_.val + " has another sample shape than the training " +
                       "cache; give --image-size to crop both");
    }
    val_loader_ = std::make_unique<Loader>(val_, vo);
  }
}

void Run::build_model() {
  const DataInfo& m = info_;
  const int64_t h = o_.image_size ? o_.image_size : m.height;
  const int64_t w = o_.image_size ? o_.image_size : m.width;
  torch::manual_seed(o_.seed);
  model_ = make_model(o_.model, m.channels, static_cast<int64_t>(m.classes.size()), h, w);
  model_->to(device_);
  if (o_.channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) {
      if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
    }
  }
  params_ = model_->parameters();
  if (comm_) {  // same seed gives the same init, but make it so whatever the RNG did
    std::vector<torch::Tensor> state = params_;
    for (const auto& b : model_->buffers()) state.push_back(b);
    torch::NoGradGuard no_grad;
    comm_->broadcast(state, 0);
  }
  if (o_.optimizer == OptimizerKind::kSgd) {
    optimizer_ = std::make_unique<torch::optim::SGD>(
        params_, torch::optim::SGDOptions(o_.lr).momentum(o_.momentum).weight_decay(o_.weight_decay));
  } else {
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        params_, torch::optim::AdamWOptions(o_.lr).weight_decay(o_.weight_decay));
  }
  const bool scaling = o_.loss_scaling == LossScaling::kOn ||
                       (o_.loss_scaling == LossScaling::kAuto && o_.precision == Precision::kFp16);
  if (scaling) scaler_.emplace();
  amp_ = amp_config(o_.precision, o_.device);
}

void Run::save_checkpoint() {
  torch::serialize::OutputArchive a;
  write_i(a, "format", kCheckpointFormat);
  for (const auto& [k, v] : fingerprint(o_, info_, dist_.world_size)) a.write("cfg/" + k, c10::IValue(v));
  torch::serialize::OutputArchive model_a, opt_a;
  model_->save(model_a);
  optimizer_->save(opt_a);
  a.write("model", model_a);
  a.write("optimizer", opt_a);
  write_i(a, "scaler_on", scaler_ ? 1 : 0);
  if (scaler_) {
    torch::serialize::OutputArchive scaler_a;
    scaler_->save(scaler_a);
    a.write("scaler", scaler_a);
  }
  write_i(a, "global_step", static_cast<int64_t>(st_.global_step));
  write_i(a, "sched_step", static_cast<int64_t>(st_.sched_step));
  write_i(a, "nonfinite_run", st_.nonfinite_run);
  write_i(a, "loader_seed", static_cast<int64_t>(st_.position.seed));
  write_i(a, "loader_epoch", static_cast<int64_t>(st_.position.epoch));
  write_i(a, "loader_cursor", static_cast<int64_t>(st_.position.cursor));
  write_d(a, "epoch_loss", st_.epoch_loss);
  write_i(a, "epoch_correct", st_.epoch_correct);
  write_i(a, "epoch_samples", st_.epoch_samples);
  write_i(a, "epoch_skipped", st_.epoch_skipped);
  write_d(a, "epoch_seconds", st_.epoch_seconds);
  write_d(a, "epoch_wait", st_.epoch_wait);
  write_i(a, "metrics_bytes", static_cast<int64_t>(st_.metrics_bytes));
  a.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  a.write("norm_mean", torch::tensor(norm_.mean, torch::kDouble));
  a.write("norm_std", torch::tensor(norm_.std, torch::kDouble));
  save_archive_atomic(a, o_.output + "/checkpoint.pt");
}

bool Run::load_checkpoint() {
  const std::string path = o_.output + "/checkpoint.pt";
  if (!fs::exists(path)) return false;
  torch::serialize::InputArchive a;
  a.load_from(path, device_);
  if (read_i(a, "format") != kCheckpointFormat) {
    throw std::runtime_error(path + ": checkpoint format " + std::to_string(read_i(a, "format")) +
                             " is not " + std::to_string(kCheckpointFormat));
  }
  for (const auto& [k, v] : fingerprint(o_, info_, dist_.world_size)) {
    c10::IValue saved;
    a.read("cfg/" + k, saved);
    if (saved.toStringRef() != v) {
      throw UsageError("--resume: " + path + " was made with --" + k + " " +
                       saved.toStringRef() + ", this run has " + v);
    }
  }
  torch::serialize::InputArchive model_a, opt_a;
  a.read("model", model_a);
  a.read("optimizer", opt_a);
  model_->load(model_a);
  optimizer_->load(opt_a);
  if (read_i(a, "scaler_on") != (scaler_ ? 1 : 0)) {
    throw UsageError("--resume: " + path + " was made with loss scaling " +
                     (scaler_ ? "off" : "on") + " (--precision/--loss-scaling differ)");
  }
  if (scaler_) {
    torch::serialize::InputArchive scaler_a;
    a.read("scaler", scaler_a);
    scaler_->load(scaler_a);
  }
  st_.global_step = static_cast<uint64_t>(read_i(a, "global_step"));
  st_.sched_step = static_cast<uint64_t>(read_i(a, "sched_step"));
  st_.nonfinite_run = read_i(a, "nonfinite_run");
  st_.position.seed = static_cast<uint64_t>(read_i(a, "loader_seed"));
  st_.position.epoch = static_cast<uint64_t>(read_i(a, "loader_epoch"));
  st_.position.cursor = static_cast<uint64_t>(read_i(a, "loader_cursor"));
  st_.epoch_loss = read_d(a, "epoch_loss");
  st_.epoch_correct = read_i(a, "epoch_correct");
  st_.epoch_samples = read_i(a, "epoch_samples");
  st_.epoch_skipped = read_i(a, "epoch_skipped");
  st_.epoch_seconds = read_d(a, "epoch_seconds");
  st_.epoch_wait = read_d(a, "epoch_wait");
  st_.metrics_bytes = static_cast<uint64_t>(read_i(a, "metrics_bytes"));
  torch::Tensor rng, mean, stdv;
  a.read("rng", rng);
  {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng.cpu());
  }
  a.read("norm_mean", mean);
  a.read("norm_std", stdv);
  mean = mean.cpu().contiguous();
  stdv = stdv.cpu().contiguous();
  norm_.mean.assign(mean.data_ptr<double>(), mean.data_ptr<double>() + mean.numel());
  norm_.std.assign(stdv.data_ptr<double>(), stdv.data_ptr<double>() + stdv.numel());
  return true;
}

void Run::log_line(const nlohmann::json& j) {
  if (!metrics_.is_open()) return;
  const std::string text = j.dump() + "\n";
  metrics_ << text;
  metrics_.flush();
  if (!metrics_) throw Error(ErrorKind::kIOError, o_.output + "/metrics.jsonl", "write failed");
  metrics_size_ += text.size();
}

void Run::progress(uint64_t epoch, uint64_t b, uint64_t batches, double loss, double lr,
                   double rate, bool final_line) {
  if (!tty_ || !main_rank_) return;
  const auto now = Clock::now();
  if (!final_line && now - last_progress_ < std::chrono::milliseconds(250)) return;
  last_progress_ = now;
  std::fprintf(stderr, "\repoch %llu/%u  batch %llu/%llu  loss %.4f  lr %.3g  %.0f samples/s   ",
               static_cast<unsigned long long>(epoch + 1), o_.epochs,
               static_cast<unsigned long long>(b), static_cast<unsigned long long>(batches), loss,
               lr, rate);
  if (final_line) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void Run::go() {
  const unsigned threads = o_.threads ? o_.threads : std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(static_cast<int>(threads));  // LibTorch starts at 1 here
  // Denormal floats make the CPU kernels (Debian's generic-BLAS GEMM above all) several times
  // slower once activations get small: 157 vs 889 samples/s for cnn on Fashion-MNIST here.
  // The flag lives in each thread's MXCSR, so set it on every intra-op worker too.
  if (o_.device == DeviceKind::kCpu && o_.flush_denormal) {
    at::globalContext().setFlushDenormal(true);
    at::parallel_for(0, at::get_num_threads(), 1, [](int64_t, int64_t) {
      at::globalContext().setFlushDenormal(true);
    });
  }
  if (o_.device == DeviceKind::kCuda) {
    if (!torch::cuda::is_available()) {
      throw UsageError("--device cuda: this LibTorch build has no CUDA, or no GPU is visible");
    }
    device_ = torch::Device(torch::kCUDA, 0);
  }
  dist_ = dist_env_from_environment();
  main_rank_ = dist_.rank == 0;
  if (dist_.world_size > 1 && o_.device == DeviceKind::kCuda) {
    device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dist_.local_rank));
  }
  comm_ = make_communicator(dist_);
  tty_ = o_.progress && ::isatty(STDERR_FILENO);
  open_data();
  build_model();

  bool resumed = false;
  if (!o_.output.empty()) {
    fs::create_directories(o_.output);
    if (o_.resume) {
      resumed = load_checkpoint();  // every rank reads the same file (a shared directory)
      if (!resumed && main_rank_) std::fprintf(stderr, "dscache-train: no checkpoint in %s; starting afresh\n",
                                 o_.output.c_str());
    }
    const std::string mpath = o_.output + "/metrics.jsonl";
    if (!main_rank_) {
      // Only rank 0 writes metrics, checkpoints and weights.
    } else if (resumed) {
      // Drop what the interrupted run logged after its last checkpoint: it is replayed.
      if (fs::exists(mpath) && fs::file_size(mpath) > st_.metrics_bytes) {
        fs::resize_file(mpath, st_.metrics_bytes);
      }
      metrics_.open(mpath, std::ios::app);
      metrics_size_ = fs::exists(mpath) ? fs::file_size(mpath) : 0;
    } else {
      metrics_.open(mpath, std::ios::trunc);
    }
    if (main_rank_ && !metrics_) throw Error(ErrorKind::kIOError, mpath, "cannot open for writing");
  }
  if (!resumed) {
    norm_ = measure_normalization(*train_, o_.normalize);
    st_.position = {o_.seed, 0, 0};
  }
  const BatchConverter conv(norm_, device_, o_.channels_last);

  const uint32_t k = o_.accum_steps;
  const uint64_t batches = train_loader_->batches_per_epoch();
  const uint64_t samples = train_loader_->samples_per_epoch();
  const std::vector<int64_t> windows = window_sample_counts(batches, samples, o_.batch, k);
  uint64_t total_steps = windows.size() * o_.epochs;
  if (o_.max_steps) total_steps = std::min(total_steps, o_.max_steps);

  const char* kill_env = std::getenv("DSCACHE_TEST_KILL_AFTER_STEPS");  // test hook
  const uint64_t kill_after = kill_env ? std::strtoull(kill_env, nullptr, 10) : 0;

  uint64_t epoch = st_.position.epoch;
  bool restore = resumed;
  if (resumed && st_.position.cursor >= batches) {  // the checkpoint closed its epoch
    ++epoch;
    restore = false;
  }
  bool done = o_.max_steps && st_.global_step >= o_.max_steps;
  double log_loss = 0;
  int64_t log_samples = 0;
  auto log_start = Clock::now();
  for (; epoch < o_.epochs && !done; ++epoch) {
    conv.wait_copied();  // start_epoch/restore may refill the buffer of the last batch
    if (restore) {
      train_loader_->restore(st_.position);
      restore = false;
    } else {
      train_loader_->start_epoch(o_.seed, epoch);
      st_.epoch_loss = 0;
      st_.epoch_correct = st_.epoch_samples = st_.epoch_skipped = 0;
      st_.epoch_seconds = st_.epoch_wait = 0;
    }
    uint64_t b = train_loader_->position().cursor;
    if (b % k != 0) throw std::runtime_error("checkpoint cursor is not on a window boundary");
    train_loader_->take_wait_seconds();
    const auto epoch_start = Clock::now();
    const double seconds_before = st_.epoch_seconds, wait_before = st_.epoch_wait;
    double wait = 0;
    model_->train();
    while (b < batches && !done) {
      const int64_t wsamples = windows[b / k] * dist_.world_size;  // over all ranks
      const uint64_t wend = std::min<uint64_t>(b + k, batches);
      optimizer_->zero_grad();
      torch::Tensor wloss_t, wcorrect_t;  // on the device; read once per window
      for (; b < wend; ++b) {
        conv.wait_copied();  // the Loader may refill the previous batch's buffer now
        const Batch* batch = train_loader_->next();
        if (!batch) throw std::logic_error("Loader ended before batches_per_epoch()");
        const torch::Tensor x = conv.images(*batch);
        const torch::Tensor y = conv.labels(*batch);
        const MicroResult r = forward_backward(*model_, x, y, wsamples, amp_,
                                               scaler_ ? &*scaler_ : nullptr);
        wloss_t = wloss_t.defined() ? wloss_t + r.loss_sum : r.loss_sum;
        wcorrect_t = wcorrect_t.defined() ? wcorrect_t + r.correct : r.correct;
      }
      double wloss = wloss_t.item<double>();
      int64_t wcorrect = wcorrect_t.item<int64_t>();
      wait += train_loader_->take_wait_seconds();
      if (comm_) {  // one all-reduce of all gradients per window, plus the window's totals
        std::vector<torch::Tensor> grads;
        for (const auto& p : params_) {
          if (p.grad().defined()) grads.push_back(p.grad());
        }
        comm_->allreduce_sum(grads);
        const torch::Tensor totals =
            torch::tensor({wloss, static_cast<double>(wcorrect)}, torch::kDouble);
        comm_->allreduce_sum({totals});
        wloss = totals[0].item<double>();
        wcorrect = static_cast<int64_t>(totals[1].item<double>());
      }
      const double lr = lr_at(o_, st_.sched_step, total_steps);
      bool finite;
      if (scaler_) {
        finite = scaler_->unscale(params_);
      } else {
        finite = std::isfinite(wloss) && grads_finite(params_);
      }
      if (finite) {
        if (o_.clip_grad > 0) torch::nn::utils::clip_grad_norm_(params_, o_.clip_grad);
        for (auto& g : optimizer_->param_groups()) g.options().set_lr(lr);
        optimizer_->step();
        ++st_.sched_step;
        st_.nonfinite_run = 0;
      } else {
        ++st_.epoch_skipped;
        if (!scaler_ && ++st_.nonfinite_run >= kMaxNonFiniteRun) {
          throw std::runtime_error(
              "loss or gradients were inf/NaN for " + std::to_string(kMaxNonFiniteRun) +
              " consecutive steps (last: step " + std::to_string(st_.global_step + 1) +
              "); lower --lr or add --clip-grad" +
              (o_.precision == Precision::kFp32 ? std::string() : std::string(", or use --precision fp32")));
        }
      }
      if (scaler_) scaler_->update(!finite);
      ++st_.global_step;
      st_.epoch_loss += wloss;
      st_.epoch_correct += wcorrect;
      st_.epoch_samples += wsamples;
      log_loss += wloss;
      log_samples += wsamples;
      st_.position = train_loader_->position();
      const double secs = std::chrono::duration<double>(Clock::now() - epoch_start).count();
      progress(epoch, b, batches, st_.epoch_samples ? st_.epoch_loss / st_.epoch_samples : 0, lr,
               (st_.epoch_samples) / std::max(1e-9, seconds_before + secs), false);
      if (o_.log_every && st_.global_step % o_.log_every == 0) {
        const double ls = std::chrono::duration<double>(Clock::now() - log_start).count();
        log_line({{"kind", "step"},
                  {"step", st_.global_step},
                  {"epoch", epoch},
                  {"loss", log_loss / std::max<int64_t>(1, log_samples)},
                  {"lr", lr},
                  {"scale", scaler_ ? scaler_->scale_value() : 1.0},
                  {"samples_per_s", log_samples / std::max(1e-9, ls)}});
        log_loss = 0;
        log_samples = 0;
        log_start = Clock::now();
      }
      if (o_.max_steps && st_.global_step >= o_.max_steps) done = true;
      if (main_rank_ && o_.checkpoint_every && st_.global_step % o_.checkpoint_every == 0 &&
          b < batches) {
        st_.epoch_seconds = seconds_before + secs;
        st_.epoch_wait = wait_before + wait;
        st_.metrics_bytes = metrics_size_;
        save_checkpoint();
      }
      if (kill_after && st_.global_step == kill_after) std::raise(SIGKILL);
    }
    st_.epoch_seconds =
        seconds_before + std::chrono::duration<double>(Clock::now() - epoch_start).count();
    st_.epoch_wait = wait_before + wait;
    progress(epoch, b, batches, st_.epoch_samples ? st_.epoch_loss / st_.epoch_samples : 0,
             lr_at(o_, st_.sched_step, total_steps),
             st_.epoch_samples / std::max(1e-9, st_.epoch_seconds), true);
    nlohmann::json line = {
        {"kind", "epoch"},
        {"epoch", epoch},
        {"step", st_.global_step},
        {"loss", st_.epoch_samples ? st_.epoch_loss / st_.epoch_samples : 0.0},
        {"train_acc", st_.epoch_samples ? double(st_.epoch_correct) / st_.epoch_samples : 0.0},
        {"val_loss", nullptr},
        {"val_acc", nullptr},
        {"seconds", st_.epoch_seconds},
        {"samples_per_s", st_.epoch_samples / std::max(1e-9, st_.epoch_seconds)},
        {"data_wait", st_.epoch_wait / std::max(1e-9, st_.epoch_seconds)},
        {"skipped_steps", st_.epoch_skipped},
        {"complete", b >= batches}};
    if (val_loader_) {
      const EvalResult ev = evaluate(*model_, *val_loader_, conv, amp_);
      line["val_loss"] = ev.loss;
      line["val_acc"] = ev.acc;
    }
    if (comm_) comm_->barrier();  // the other ranks wait for rank 0's validation
    if (!main_rank_) continue;
    std::printf("epoch %llu/%u: loss %.4f", static_cast<unsigned long long>(epoch + 1), o_.epochs,
                line["loss"].get<double>());
    if (val_loader_) {
      std::printf("  val_loss %.4f  val_acc %.4f", line["val_loss"].get<double>(),
                  line["val_acc"].get<double>());
    }
    std::printf("  %.1f s  %.0f samples/s  data_wait %.1f%%  skipped %lld\n", st_.epoch_seconds,
                line["samples_per_s"].get<double>(), 100 * line["data_wait"].get<double>(),
                static_cast<long long>(st_.epoch_skipped));
    std::fflush(stdout);
    log_line(line);
    if (!o_.output.empty()) {
      st_.metrics_bytes = metrics_size_;
      save_checkpoint();
    }
  }
  if (!o_.output.empty() && main_rank_) {
    torch::serialize::OutputArchive a;
    model_->save(a);
    save_archive_atomic(a, o_.output + "/model.pt");
  }
}

}  // namespace

void run_training(const TrainOptions& options) {
  try {
    Run(options).go();
  } catch (const c10::Error& e) {
    throw std::runtime_error(std::string("torch: ") + e.what_without_backtrace());
  }
}

}  // namespace train
}  // namespace dscache
