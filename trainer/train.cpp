// run_training: one run from options to trained weights. Sets up the device, the data-parallel
// group, data and model, resumes from a checkpoint, runs the step loop (train_loop.cpp:
// micro-batches, accumulation windows, mixed precision, validation, checkpoints, logs) and
// finishes the run.
#include <ATen/Parallel.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dscache/cpus.h"
#include "elastic.h"
#include "model_card.h"
#include "precision.h"
#include "run.h"
#include "terminal.h"
#include "train.h"

namespace dscache {
namespace train {

namespace fs = std::filesystem;

void Run::build_model() {
  const DataInfo& m = data_.info;
  const int64_t h = o_.image_size ? o_.image_size : m.height;
  const int64_t w = o_.image_size ? o_.image_size : m.width;
  torch::manual_seed(o_.seed);
  const int64_t outputs =
      fields_task() ? m.targets.outputs() : static_cast<int64_t>(m.classes.size());
  model_ = make_model(o_.model, m.channels, outputs, h, w, o_.task.kind == TaskKind::kSegment);
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
                  {*model_, *optimizer_, scaler_ ? &*scaler_ : nullptr, st_, norm_,
                   fields_task() ? &targets_ : nullptr},
                  keep_previous_);
  keep_previous_ = true;
  checkpoint_step_ = st_.global_step;
}

LoadResult Run::read_checkpoint() {
  // --accum-steps keeps the checkpoint's global batch on this run's ranks and --batch (a
  // positive effective_batch: the user gave --accum-steps or --effective-batch, options.cpp)
  const uint64_t asked = o_.effective_batch > 0 ? o_.accum_steps : 0;
  const auto settings_for = [this, asked](const StepGeometry& saved) {
    const ElasticPlan plan =
        plan_elastic(saved, o_.batch, static_cast<uint64_t>(dist_.world_size), asked);
    o_.accum_steps = plan.accum_steps;
    elastic_note_ = plan.note;
    // a mixture's stratified batches are global batches: the stratum follows
    set_global_batch(&data_, uint64_t{o_.batch} * o_.accum_steps * uint64_t(dist_.world_size));
    return settings();
  };
  LoadResult r = load_checkpoint(o_.output, settings_for, device_,
                                 {*model_, *optimizer_, scaler_ ? &*scaler_ : nullptr, st_, norm_,
                                  fields_task() ? &targets_ : nullptr});
  // Older checkpoints derive the global cursor from their own cursor: a finished epoch's may pass
  // the epoch's end.
  const uint64_t epoch_length = data_.train_loader->epoch_length();
  st_.epoch_position.sample = std::min(st_.epoch_position.sample, epoch_length);
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
  fs::remove_all(o_.output + "/tb");  // the old run's curves would overlay the new one's
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

void Run::set_up_device() {
  // Default: the CPUs this process may use (affinity, cgroup quota, SLURM_CPUS_PER_TASK), not
  // the machine's: a Slurm task or a container often gets a few of many.
  const CpuBudget cpus = usable_cpus();
  const unsigned threads = o_.threads ? o_.threads : cpus.cpus;
  at::set_num_threads(static_cast<int>(threads));  // LibTorch starts at 1 here
  if (!o_.threads && cpus.cpus < std::max(1u, std::thread::hardware_concurrency())) {
    threads_note_ = std::to_string(threads) + " threads (" + cpus.source + ")";
  }
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
}

void Run::setup() {
  set_up_device();
  dist_ = dist_env_from_environment();
  main_rank_ = dist_.rank == 0;
  if (main_rank_ && !threads_note_.empty()) {
    std::fprintf(stderr, "dscache-train: %s\n", threads_note_.c_str());
  }
  if (main_rank_ && dist_.world_size > 1) {
    std::fprintf(stderr, "dscache-train: %d ranks from %s; rank 0 listens on %s:%d\n",
                 dist_.world_size, dist_.source.c_str(), dist_.master_addr.c_str(),
                 dist_.master_port);
  }
  if (!dist_.note.empty()) std::fprintf(stderr, "dscache-train: warning: %s\n", dist_.note.c_str());
  if (dist_.world_size > 1 && o_.device == DeviceKind::kCuda) {
    device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dist_.local_rank));
  }
  comm_ = make_communicator(dist_, std::chrono::seconds(o_.dist_timeout), o_.device);
  claim_output();  // before anything slow: a second trainer on this output fails at once
  progress_.emplace(main_rank_ ? o_.progress : ProgressMode::kNever, o_.epochs);
  // CUDA: page-locked batches, so the copies to the device are asynchronous and in place.
  const BufferAllocator allocator =
      o_.device == DeviceKind::kCuda ? tensor_allocator(/*pinned=*/true) : BufferAllocator{};
  data_ = open_data(o_, dist_.rank, dist_.world_size, allocator);
  targets_ = data_.info.targets;
  resolve_precision();  // said once the options and caches are known to be usable
  if (segment() && main_rank_) {
    std::string names;
    for (const auto& n : targets_.names) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr,
                 "dscache-train: --task segment: mask '%s', %lld classes (%s), pixels of "
                 "value %lld ignored\n",
                 targets_.fields[0].c_str(), static_cast<long long>(targets_.outputs()),
                 names.c_str(), static_cast<long long>(targets_.ignore_index));
  }
  const std::string cast = integer_targets_note(targets_, *data_.train);
  if (main_rank_ && !cast.empty()) std::fprintf(stderr, "dscache-train: %s\n", cast.c_str());
  build_model();
  batches_ = data_.train_loader->batches_per_epoch();
}

bool Run::resumed_epoch_closed() const {
  const uint64_t length = st_.epoch_length ? st_.epoch_length : data_.train_loader->epoch_length();
  return st_.epoch_position.sample >= length;
}

void Run::report_resume(const LoadResult& r) const {
  if (!r.fallback.empty()) {
    std::fprintf(stderr, "dscache-train: %s; falling back to the older %s\n", r.fallback.c_str(),
                 r.path.c_str());
  }
  const bool closed = resumed_epoch_closed();
  std::fprintf(stderr,
               "dscache-train: resuming from %s at %s of epoch %llu/%u, step %llu "
               "(%llu samples seen)\n",
               r.path.c_str(), closed ? "the end" : "a step",
               static_cast<unsigned long long>(st_.epoch_position.epoch + 1), o_.epochs,
               static_cast<unsigned long long>(st_.global_step),
               static_cast<unsigned long long>(st_.samples_seen));
  if (!r.data_note.empty()) {
    std::fprintf(stderr, "dscache-train: warning: %s\n", r.data_note.c_str());
  }
  if (!elastic_note_.empty()) std::fprintf(stderr, "dscache-train: %s\n", elastic_note_.c_str());
  if (!r.mix_note.empty()) std::fprintf(stderr, "dscache-train: %s\n", r.mix_note.c_str());
  if (!r.adjusted.empty()) {
    std::string list;
    for (const auto& a : r.adjusted) list += (list.empty() ? "" : ", ") + a;
    std::fprintf(stderr,
                 "dscache-train: --resume: options that differ from the checkpoint's take "
                 "effect from now: %s\n",
                 list.c_str());
  }
}

bool Run::resume() {
  bool resumed = false;
  if (!o_.output.empty()) {
    if (o_.resume) {
      const LoadResult r = read_checkpoint();  // every rank reads the same files (shared)
      resumed = r.found;
      if (!resumed && main_rank_) {
        std::fprintf(stderr, "dscache-train: no checkpoint in %s; starting afresh\n",
                     o_.output.c_str());
      }
      if (resumed && main_rank_) report_resume(r);
    }
    // Only rank 0 writes metrics, checkpoints and weights.
    if (main_rank_) {
      const std::string metrics_path = o_.output + "/metrics.jsonl";
      metrics_.open(metrics_path,
                    resumed ? std::optional<uint64_t>(st_.metrics_bytes) : std::nullopt);
      // A new event file each run; a resumed one tells TensorBoard to drop the steps it replays.
      metrics_.open_tensorboard(
          o_.output + "/tb", resumed
                                 ? std::optional<int64_t>(static_cast<int64_t>(st_.global_step) + 1)
                                 : std::nullopt);
      check_regular_if_exists(curves_path(), "chart");  // refused now, not after an epoch
      // The log now ends at the checkpoint: curves.png is drawn from all of it, not this part.
      const size_t skipped = resumed ? curves_.load(metrics_path) : 0;
      if (skipped > 0) {
        std::fprintf(stderr,
                     "dscache-train: %s: %zu lines are not JSON; curves.png leaves them out\n",
                     metrics_path.c_str(), skipped);
      }
    }
  }
  if (!resumed) {
    norm_ = measure_normalization(*data_.train, o_.normalize);
    if (fields_task() && o_.task.target_norm) {
      measure_target_stats(*data_.train, "--train " + o_.train, &targets_);
    }
    st_.position = {o_.seed, 0, 0};
    st_.epoch_position = {o_.seed, 0, 0, {}};
  }
  return resumed;
}

void Run::prepare_steps() {
  conv_.emplace(norm_, device_, o_.channels_last);
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
  const uint64_t samples = data_.train_loader->samples_per_epoch();
  windows_ = window_sample_counts(batches_, samples, o_.batch, o_.accum_steps);
  total_steps_ = windows_.size() * o_.epochs;
  if (o_.max_steps) total_steps_ = std::min(total_steps_, o_.max_steps);
}

int Run::go() {
  setup();
  const bool resumed = resume();
  prepare_steps();
  run_epochs(resumed);
  return finish();
}

int Run::finish() {
  progress_->break_line();  // the messages below start on a line of their own
  if (stop_sig_) {
    if (comm_) comm_->barrier();  // the others wait for rank 0's checkpoint
    stop_signals_exiting();
    const std::string who = dist_.world_size > 1 ? "rank " + std::to_string(dist_.rank) + " of " +
                                                       std::to_string(dist_.world_size) + ": "
                                                 : "";
    const std::string where = who + "stopped by " + signal_name(stop_sig_) + " at epoch " +
                              std::to_string(stop_epoch_ + 1) + " step " +
                              std::to_string(st_.global_step);
    if (!main_rank_) {
      std::fprintf(stderr, "dscache-train: %s (rank 0 writes the checkpoint)\n", where.c_str());
    } else if (o_.output.empty()) {
      std::fprintf(stderr, "dscache-train: %s; no --output, so nothing was saved\n", where.c_str());
    } else {
      std::fprintf(stderr, "dscache-train: %s; checkpoint written to %s/%s; resume with --resume\n",
                   where.c_str(), o_.output.c_str(), kCheckpointName);
    }
    return 128 + stop_sig_;
  }
  if (st_.global_step > 0 && st_.sched_step == 0) {
    // The model is its initialisation: every step's loss or gradients were inf/NaN (fewer in a
    // row than step_optimizer's limit, or a loss scaler backing off each time).
    char scale[64] = "";
    if (scaler_) std::snprintf(scale, sizeof scale, " (loss scale now %g)", scaler_->scale_value());
    throw DivergedError("all " + std::to_string(st_.global_step) +
                        " optimizer steps were skipped: the loss or gradients were inf/NaN at "
                        "every one" +
                        scale +
                        "; no model written. Lower --lr, add --clip-grad, or check the data");
  }
  if (!o_.output.empty() && main_rank_) {
    save_model(*model_, norm_, o_.output + "/model.pt");
    write_model_card(o_.output + "/model.json", make_model_card(o_, data_.info, norm_, targets_));
  }
  stop_signals_exiting();
  if (const int late = stop_requested(); late && main_rank_) {
    std::fprintf(stderr, "dscache-train: %s came after the last step: the run is complete\n",
                 signal_name(late).c_str());
  }
  return 0;
}

int run_training(const TrainOptions& options) {
  try {
    return Run(options).go();
  } catch (const c10::Error& e) {
    end_progress_line();  // the error message starts a line of its own
    const std::string what = e.what_without_backtrace();
    throw std::runtime_error("LibTorch failed: " + what);
  } catch (...) {
    end_progress_line();
    throw;
  }
}

}  // namespace train
}  // namespace dscache
