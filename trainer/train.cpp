// run_training: one run from options to trained weights. Sets up the device, the data-parallel
// group, data and model, then runs the step loop (micro-batches, accumulation windows, mixed
// precision, validation, checkpoints, logs).
#include <ATen/Parallel.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "amp.h"
#include "checkpoint.h"
#include "data.h"
#include "device_input.h"
#include "distributed.h"
#include "evaluate.h"
#include "grad_sync.h"
#include "metrics.h"
#include "models.h"
#include "precision.h"
#include "safety.h"
#include "step.h"
#include "train.h"

namespace dscache {
namespace train {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kMaxNonFiniteRun = 5;  // consecutive non-finite steps without a scaler → error

// One training run. Owns everything it trains with; go() once, on one thread.
class Run {
 public:
  explicit Run(const TrainOptions& o) : o_(o) {}
  // 0 when the run is complete, 128 + N when signal N stopped it (after its checkpoint).
  int go();

 private:
  void build_model();
  // --precision auto becomes what this device runs natively (precision.h); said once.
  void resolve_precision();
  // Rank 0 takes --output (creates it, locks it, refuses or clears a run there); every rank
  // learns the verdict, so all fail together with rank 0's exit code.
  void claim_output();
  void claim_output_on_main_rank();
  // OUTPUT/checkpoint.pt with this run's parts and settings (checkpoint.h).
  void write_checkpoint();
  LoadResult read_checkpoint();
  RunSettings settings() const {
    return run_settings(o_, data_.info, dist_.world_size, data_.train_loader->sampler_options());
  }

  TrainOptions o_;
  DistEnv dist_;
  std::unique_ptr<Communicator> comm_;   // null for a single process
  AllReduceFn bn_allreduce_;             // --sync-bn: the model's BatchNorm all-reduce
  std::unique_ptr<GradSync> grad_sync_;  // with comm_: the gradient all-reduce
  bool main_rank_ = true;                // rank 0: the only one that logs and writes files
  torch::Device device_{torch::kCPU};
  TrainData data_;
  std::shared_ptr<Classifier> model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::optional<GradScaler> scaler_;
  Normalization norm_;
  AmpConfig amp_;
  RunState st_;
  MetricsLog metrics_;
  std::unique_ptr<OutputLock> lock_;       // rank 0 with --output: held until the process ends
  bool keep_previous_ = true;              // false while checkpoint.pt is one that failed to verify
  uint64_t checkpoint_step_ = UINT64_MAX;  // global_step of the last checkpoint written
};

void Run::build_model() {
  const DataInfo& m = data_.info;
  const int64_t h = o_.image_size ? o_.image_size : m.height;
  const int64_t w = o_.image_size ? o_.image_size : m.width;
  torch::manual_seed(o_.seed);
  model_ = make_model(o_.model, m.channels, static_cast<int64_t>(m.classes.size()), h, w);
  model_->to(device_);
  if (comm_ && o_.sync_bn) {
    bn_allreduce_ = [this](const torch::Tensor& t) { comm_->allreduce_sum({t}); };
    model_->set_sync_bn(bn_allreduce_);
  }
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
        params_,
        torch::optim::SGDOptions(o_.lr).momentum(o_.momentum).weight_decay(o_.weight_decay));
  } else {
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        params_, torch::optim::AdamWOptions(o_.lr).weight_decay(o_.weight_decay));
  }
  const bool scaling = o_.loss_scaling == LossScaling::kOn ||
                       (o_.loss_scaling == LossScaling::kAuto && o_.precision == Precision::kFp16);
  if (scaling) scaler_.emplace();
  amp_ = amp_config(o_.precision, o_.device);
}

void Run::resolve_precision() {
  const int cuda_major = o_.device == DeviceKind::kCuda ? cuda_compute_major(device_.index()) : -1;
  const CpuBf16 cpu = detect_cpu_bf16();
  const PrecisionChoice ch = choose_precision(o_.precision, o_.device, cpu, cuda_major);
  o_.precision = ch.precision;
  // oneDNN capped below bf16 (ONEDNN_MAX_CPU_ISA) cannot create bf16 primitives, though LibTorch
  // still routes bf16 to it on an AVX-512 CPU: an explicit bf16 then takes ATen's kernels.
  if (o_.precision == Precision::kBf16 && o_.device == DeviceKind::kCpu && !cpu.cap_allows_bf16) {
    at::globalContext().setUserEnabledMkldnn(false);
  }
  if (!main_rank_) return;  // every rank decides alike; one says so
  if (!ch.reason.empty()) std::fprintf(stderr, "dscache-train: %s\n", ch.reason.c_str());
  if (!ch.warning.empty()) std::fprintf(stderr, "dscache-train: warning: %s\n", ch.warning.c_str());
}

void Run::write_checkpoint() {
  save_checkpoint(o_.output, settings(),
                  {*model_, *optimizer_, scaler_ ? &*scaler_ : nullptr, st_, norm_},
                  keep_previous_);
  keep_previous_ = true;
  checkpoint_step_ = st_.global_step;
}

LoadResult Run::read_checkpoint() {
  LoadResult r = load_checkpoint(o_.output, settings(), device_,
                                 {*model_, *optimizer_, scaler_ ? &*scaler_ : nullptr, st_, norm_});
  keep_previous_ = !r.current_bad;  // never keep a damaged checkpoint as the fallback
  if (r.found) {
    // The optimizer's archive restores its hyper-parameters too; the adjustable ones take this
    // run's values from now on (the LR is set every step anyway).
    for (auto& g : optimizer_->param_groups()) {
      if (o_.optimizer == OptimizerKind::kSgd) {
        static_cast<torch::optim::SGDOptions&>(g.options())
            .momentum(o_.momentum)
            .weight_decay(o_.weight_decay);
      } else {
        static_cast<torch::optim::AdamWOptions&>(g.options()).weight_decay(o_.weight_decay);
      }
    }
  }
  return r;
}

void Run::claim_output_on_main_rank() {
  struct stat st {};
  if (::stat(o_.output.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    throw UsageError("--output: " + o_.output + " is " + describe_file_type(st.st_mode) +
                     ", not a directory");
  }
  fs::create_directories(o_.output);
  lock_ = std::make_unique<OutputLock>(o_.output);
  const std::vector<std::string> present = run_files_present(o_.output);
  if (present.empty() || o_.resume) return;
  std::string names;
  for (const auto& n : present) names += (names.empty() ? "" : ", ") + n;
  if (!o_.force) {
    throw OutputInUseError("--output " + o_.output + " holds a run (" + names +
                           "); add --resume to continue it, or --force to start over");
  }
  for (const auto& n : present) fs::remove(o_.output + "/" + n);
  std::fprintf(stderr, "dscache-train: --force: removed the previous run's %s from %s\n",
               names.c_str(), o_.output.c_str());
}

void Run::claim_output() {
  if (o_.output.empty()) return;
  int code = 0;
  std::exception_ptr failure;
  if (main_rank_) {
    try {
      claim_output_on_main_rank();
    } catch (const std::exception& e) {
      code = to_int(exit_code_for(e));
      failure = std::current_exception();
    } catch (...) {
      code = to_int(ExitCode::kError);
      failure = std::current_exception();
    }
  }
  if (comm_) {
    const torch::Tensor verdict =
        torch::tensor({static_cast<double>(code)}, torch::kDouble).to(device_);
    comm_->allreduce_sum({verdict});
    code = static_cast<int>(verdict.item<double>());
  }
  if (failure) std::rethrow_exception(failure);
  if (code == 0) return;
  throw ExitCodeError(static_cast<ExitCode>(code),
                      "rank 0 could not take --output " + o_.output + " (see its message)");
}

int Run::go() {
  const unsigned threads =
      o_.threads ? o_.threads : std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(static_cast<int>(threads));  // LibTorch starts at 1 here
  // Denormal floats make the CPU kernels (Debian's generic-BLAS GEMM above all) several times
  // slower once activations get small: 157 vs 889 samples/s for cnn on Fashion-MNIST here.
  // The flag lives in each thread's MXCSR, so set it on every intra-op worker too.
  if (o_.device == DeviceKind::kCpu && o_.flush_denormal) {
    at::globalContext().setFlushDenormal(true);
    at::parallel_for(0, at::get_num_threads(), 1,
                     [](int64_t, int64_t) { at::globalContext().setFlushDenormal(true); });
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
  resolve_precision();
  comm_ = make_communicator(dist_, std::chrono::seconds(o_.dist_timeout), o_.device);
  claim_output();  // before anything slow: a second trainer on this output fails at once
  ProgressLine progress(o_.progress && main_rank_, o_.epochs);
  // CUDA: page-locked batches, so the copies to the device are asynchronous and in place.
  const BufferAllocator allocator =
      o_.device == DeviceKind::kCuda ? tensor_allocator(/*pinned=*/true) : BufferAllocator{};
  data_ = open_data(o_, dist_.rank, dist_.world_size, allocator);
  build_model();
  Loader& train_loader = *data_.train_loader;

  const uint64_t batches = train_loader.batches_per_epoch();
  bool resumed = false;
  if (!o_.output.empty()) {
    if (o_.resume) {
      const LoadResult r = read_checkpoint();  // every rank reads the same files (shared)
      resumed = r.found;
      if (!resumed && main_rank_) {
        std::fprintf(stderr, "dscache-train: no checkpoint in %s; starting afresh\n",
                     o_.output.c_str());
      }
      if (resumed && main_rank_) {
        if (!r.fallback.empty()) {
          std::fprintf(stderr, "dscache-train: %s; falling back to the older %s\n",
                       r.fallback.c_str(), r.path.c_str());
        }
        const bool closed = st_.position.cursor >= batches;
        std::fprintf(stderr,
                     "dscache-train: resuming from %s at %s of epoch %llu/%u, step %llu "
                     "(%llu samples seen)\n",
                     r.path.c_str(), closed ? "the end" : "a step",
                     static_cast<unsigned long long>(st_.position.epoch + 1), o_.epochs,
                     static_cast<unsigned long long>(st_.global_step),
                     static_cast<unsigned long long>(st_.samples_seen));
        if (!r.data_note.empty()) {
          std::fprintf(stderr, "dscache-train: warning: %s\n", r.data_note.c_str());
        }
        if (!r.adjusted.empty()) {
          std::string list;
          for (const auto& a : r.adjusted) list += (list.empty() ? "" : ", ") + a;
          std::fprintf(stderr,
                       "dscache-train: --resume: options that differ from the checkpoint's take "
                       "effect from now: %s\n",
                       list.c_str());
        }
      }
    }
    // Only rank 0 writes metrics, checkpoints and weights.
    if (main_rank_) {
      metrics_.open(o_.output + "/metrics.jsonl",
                    resumed ? std::optional<uint64_t>(st_.metrics_bytes) : std::nullopt);
    }
  }
  if (!resumed) {
    norm_ = measure_normalization(*data_.train, o_.normalize);
    st_.position = {o_.seed, 0, 0};
  }
  const BatchConverter conv(norm_, device_, o_.channels_last);
  if (comm_) {  // after any checkpoint load, which may replace the parameters' data
    grad_sync_ = std::make_unique<GradSync>(params_, *comm_,
                                            static_cast<uint64_t>(o_.bucket_mb * 1024 * 1024));
    if (main_rank_) {
      std::fprintf(stderr,
                   "dscache-train: %d ranks (%s): %llu gradient bytes all-reduced per optimizer "
                   "step, %s%s\n",
                   dist_.world_size, comm_->backend(),
                   static_cast<unsigned long long>(grad_sync_->bytes_per_step()),
                   o_.bucket_mb > 0 ? (std::to_string(grad_sync_->buckets()) +
                                       " buckets started during the last backward of each window")
                                          .c_str()
                                    : "one flat buffer after the last backward of each window",
                   o_.sync_bn ? "; sync-BN" : "");
    }
  }

  const uint32_t k = o_.accum_steps;
  const uint64_t samples = train_loader.samples_per_epoch();
  const std::vector<int64_t> windows = window_sample_counts(batches, samples, o_.batch, k);
  uint64_t total_steps = windows.size() * o_.epochs;
  if (o_.max_steps) total_steps = std::min(total_steps, o_.max_steps);

  const char* kill_env = std::getenv("DSCACHE_TEST_KILL_AFTER_STEPS");  // test hook
  const char* kill_sig = std::getenv("DSCACHE_TEST_KILL_SIGNAL");       // test hook: not SIGKILL
  const char* kill_rank = std::getenv("DSCACHE_TEST_KILL_RANK");        // test hook: only this rank
  const uint64_t kill_after = kill_env && (!kill_rank || std::atoi(kill_rank) == dist_.rank)
                                  ? std::strtoull(kill_env, nullptr, 10)
                                  : 0;

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
  int stop_sig = 0;  // SIGINT/SIGTERM: every rank stops after the same step
  uint64_t stop_epoch = 0;
  stop_signals_training();  // from now on a signal asks to stop at a step boundary
  for (; epoch < o_.epochs && !done; ++epoch) {
    conv.wait_copied();  // start_epoch/restore may refill the buffer of the last batch
    if (restore) {
      train_loader.restore(st_.position);
      restore = false;
    } else {
      train_loader.start_epoch(o_.seed, epoch);
      st_.epoch_loss = 0;
      st_.epoch_correct = st_.epoch_samples = st_.epoch_skipped = 0;
      st_.epoch_seconds = st_.epoch_wait = 0;
    }
    uint64_t b = train_loader.position().cursor;
    if (b % k != 0) throw std::runtime_error("checkpoint cursor is not on a window boundary");
    train_loader.take_wait_seconds();
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
        const Batch* batch = train_loader.next();
        if (!batch) throw std::logic_error("Loader ended before batches_per_epoch()");
        const torch::Tensor x = conv.images(*batch);
        const torch::Tensor y = conv.labels(*batch);
        if (grad_sync_ && b + 1 == wend) grad_sync_->arm();  // buckets start in this backward
        const MicroResult r =
            forward_backward(*model_, x, y, wsamples, amp_, scaler_ ? &*scaler_ : nullptr);
        wloss_t = wloss_t.defined() ? wloss_t + r.loss_sum : r.loss_sum;
        wcorrect_t = wcorrect_t.defined() ? wcorrect_t + r.correct : r.correct;
      }
      double wloss = wloss_t.item<double>();
      int64_t wcorrect = wcorrect_t.item<int64_t>();
      wait += train_loader.take_wait_seconds();
      int step_stop = 0;
      if (comm_) {  // the gradients' sum over ranks (still loss-scaled), plus the window's totals
        grad_sync_->finish();
        // and the stop requests: ranks that got SIGINT/SIGTERM, and the sum of those signals, so
        // that all ranks stop after this same step (a rank whose peer died fails here, exit 3)
        const int asked = stop_requested();
        const torch::Tensor totals = torch::tensor({wloss, static_cast<double>(wcorrect),
                                                    asked ? 1.0 : 0.0, static_cast<double>(asked)},
                                                   torch::kDouble)
                                         .to(device_);
        comm_->allreduce_sum({totals});
        wloss = totals[0].item<double>();
        wcorrect = static_cast<int64_t>(totals[1].item<double>());
        const double votes = totals[2].item<double>();
        if (votes > 0) {
          step_stop = asked ? asked : totals[3].item<double>() == votes * SIGINT ? SIGINT : SIGTERM;
        }
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
          throw DivergedError(
              "loss or gradients were inf/NaN for " + std::to_string(kMaxNonFiniteRun) +
              " consecutive steps (last: step " + std::to_string(st_.global_step + 1) +
              "); lower --lr or add --clip-grad" +
              (o_.precision == Precision::kFp32 ? std::string()
                                                : std::string(", or use --precision fp32")));
        }
      }
      if (scaler_) scaler_->update(!finite);
      ++st_.global_step;
      st_.samples_seen += static_cast<uint64_t>(wsamples);
      st_.epoch_loss += wloss;
      st_.epoch_correct += wcorrect;
      st_.epoch_samples += wsamples;
      log_loss += wloss;
      log_samples += wsamples;
      st_.position = train_loader.position();
      const double secs = std::chrono::duration<double>(Clock::now() - epoch_start).count();
      progress.show(epoch, b, batches, st_.epoch_samples ? st_.epoch_loss / st_.epoch_samples : 0,
                    lr, (st_.epoch_samples) / std::max(1e-9, seconds_before + secs), false);
      if (o_.log_every && st_.global_step % o_.log_every == 0) {
        const double ls = std::chrono::duration<double>(Clock::now() - log_start).count();
        metrics_.write({{"kind", "step"},
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
        st_.metrics_bytes = metrics_.bytes();
        write_checkpoint();
      }
      if (kill_after && st_.global_step == kill_after) {  // test hook
        std::raise(kill_sig                                   ? std::atoi(kill_sig)
                   : std::getenv("DSCACHE_TEST_STOP_INSTEAD") ? SIGSTOP
                                                              : SIGKILL);
        if (kill_sig && std::getenv("DSCACHE_TEST_SIGNAL_TWICE")) {  // a second one, 1.2 s later
          std::this_thread::sleep_for(std::chrono::milliseconds(1200));
          std::raise(std::atoi(kill_sig));
        }
      }
      if (!comm_) step_stop = stop_requested();  // one process: whatever came during the step
      if (step_stop) {
        stop_sig = step_stop;
        stop_epoch = epoch;
        done = true;
      }
    }
    if (stop_sig && b < batches) {  // mid-epoch: checkpoint here (the epoch's line comes later)
      if (main_rank_ && !o_.output.empty() && checkpoint_step_ != st_.global_step) {
        st_.epoch_seconds =
            seconds_before + std::chrono::duration<double>(Clock::now() - epoch_start).count();
        st_.epoch_wait = wait_before + wait;
        st_.metrics_bytes = metrics_.bytes();
        write_checkpoint();
      }
      break;
    }
    st_.epoch_seconds =
        seconds_before + std::chrono::duration<double>(Clock::now() - epoch_start).count();
    st_.epoch_wait = wait_before + wait;
    progress.show(epoch, b, batches, st_.epoch_samples ? st_.epoch_loss / st_.epoch_samples : 0,
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
    if (grad_sync_) line["allreduce_bytes_per_step"] = grad_sync_->bytes_per_step();
    if (data_.val_loader) {
      const EvalResult ev = evaluate(*model_, *data_.val_loader, conv, amp_);
      line["val_loss"] = ev.loss;
      line["val_acc"] = ev.acc;
    }
    if (comm_) comm_->barrier();  // the other ranks wait for rank 0's validation
    if (!main_rank_) continue;
    print_epoch_summary(line, o_.epochs);
    metrics_.write(line);
    if (!o_.output.empty()) {
      st_.metrics_bytes = metrics_.bytes();
      write_checkpoint();
    }
  }
  if (stop_sig) {
    if (comm_) comm_->barrier();  // the others wait for rank 0's checkpoint
    stop_signals_exiting();
    const std::string who = dist_.world_size > 1 ? "rank " + std::to_string(dist_.rank) + " of " +
                                                       std::to_string(dist_.world_size) + ": "
                                                 : "";
    const std::string where = who + "stopped by " + signal_name(stop_sig) + " at epoch " +
                              std::to_string(stop_epoch + 1) + " step " +
                              std::to_string(st_.global_step);
    if (!main_rank_) {
      std::fprintf(stderr, "dscache-train: %s (rank 0 writes the checkpoint)\n", where.c_str());
    } else if (o_.output.empty()) {
      std::fprintf(stderr, "dscache-train: %s; no --output, so nothing was saved\n", where.c_str());
    } else {
      std::fprintf(stderr, "dscache-train: %s; checkpoint written to %s/%s; resume with --resume\n",
                   where.c_str(), o_.output.c_str(), kCheckpointName);
    }
    return 128 + stop_sig;
  }
  if (!o_.output.empty() && main_rank_) save_model(*model_, o_.output + "/model.pt");
  stop_signals_exiting();
  if (const int late = stop_requested(); late && main_rank_) {
    std::fprintf(stderr, "dscache-train: %s came after the last step: the run is complete\n",
                 signal_name(late).c_str());
  }
  return 0;
}

}  // namespace

int run_training(const TrainOptions& options) {
  try {
    return Run(options).go();
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw std::runtime_error("LibTorch failed: " + what);
  }
}

}  // namespace train
}  // namespace dscache
