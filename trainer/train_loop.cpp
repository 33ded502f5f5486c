// The step loop of a training run (run.h): epochs of accumulation windows, each window's
// micro-batches, optimizer step, logs and checkpoints, and the stop requests of every rank.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "evaluate.h"
#include "run.h"
#include "task_metrics.h"
#include "test_hooks.h"

namespace dscache {
namespace train {

namespace {

constexpr int kMaxNonFiniteRun = 5;  // consecutive non-finite steps without a scaler → error

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The batches left in the run after batch `b` of `epoch` (its own included): the epochs', or
// --max-steps' windows when they end it sooner (for the progress line's ETA).
uint64_t run_batches_left(const TrainOptions& o, uint64_t epoch, uint64_t b, uint64_t batches,
                          uint64_t global_step) {
  const uint64_t left = (batches - std::min(b, batches)) + (o.epochs - epoch - 1) * batches;
  if (!o.max_steps) return left;
  const uint64_t steps = o.max_steps > global_step ? o.max_steps - global_step : 0;
  return std::min(left, steps * o.accum_steps);
}

}  // namespace

void Run::run_epochs(bool resumed) {
  uint64_t epoch = st_.epoch_position.epoch;
  bool resume = resumed;
  if (resumed && resumed_epoch_closed()) {
    // A mixture's next epoch draws on from where this one left each source's stream (after new
    // shares that is not where a pure epoch would start): the Loader learns it from the position.
    if (data_.info.mixture) data_.train_loader->resume(st_.epoch_position, weight_change());
    ++epoch;  // the checkpoint closed its epoch
    resume = false;
  }
  done_ = o_.max_steps && st_.global_step >= o_.max_steps;
  log_samples_ = 0;  // st_.log_loss/log_weight: 0 on a fresh run, the checkpoint's on resume
  log_start_ = Clock::now();
  stop_signals_training();  // from now on a signal asks to stop at a step boundary
  for (; epoch < o_.epochs && !done_; ++epoch) {
    EpochClock ec = start_epoch(epoch, resume);
    resume = false;
    while (ec.b < batches_ && !done_) apply_step(&ec, run_window(&ec));
    if (stop_sig_ &&
        ec.b < batches_) {  // mid-epoch: checkpoint here (the epoch's line comes later)
      if (main_rank_ && !o_.output.empty() && checkpoint_step_ != st_.global_step) {
        checkpoint_in_epoch(ec, seconds_since(ec.start));
      }
      break;
    }
    end_epoch(ec);
  }
}

Run::EpochClock Run::start_epoch(uint64_t epoch, bool resume) {
  Loader& train_loader = *data_.train_loader;
  conv_->wait_copied();  // start_epoch/resume may refill the buffer of the last batch
  if (resume) {
    // The global cursor, cut for this run's ranks and --batch: on another world size too, each
    // rank continues at batch G / (batch x world size), a window boundary since the global batch
    // is kept (elastic.h).
    // A mixture under other shares (--allow-mix-change, checked at the checkpoint's load):
    // the samples taken stand, the rest of the epoch follows the new shares.
    train_loader.resume(st_.epoch_position, weight_change());
    st_.position = train_loader.position();  // this geometry's cursor, for loader_cursor
  } else {
    train_loader.start_epoch(o_.seed, epoch);
    st_.epoch_loss = st_.epoch_weight = 0;
    st_.epoch_correct = st_.epoch_samples = st_.epoch_skipped = st_.epoch_count = 0;
    st_.epoch_seconds = st_.epoch_wait = 0;
    st_.epoch_source_samples.clear();
  }
  // a mixture's per-source counts (a resumed epoch's from its checkpoint)
  st_.epoch_source_samples.resize(data_.info.mixture ? data_.info.mixture->sources() : 0, 0);
  st_.epoch_length = train_loader.epoch_length();
  EpochClock ec;
  ec.epoch = epoch;
  ec.b = train_loader.position().cursor;
  if (ec.b % o_.accum_steps != 0) {
    throw std::runtime_error("checkpoint cursor is not on a window boundary");
  }
  train_loader.take_wait_seconds();
  ec.start = Clock::now();
  ec.seconds_before = st_.epoch_seconds;
  ec.wait_before = st_.epoch_wait;
  progress_->start_epoch(ec.b);
  model_->train();
  return ec;
}

Run::Window Run::run_window(EpochClock* ec) {
  Loader& train_loader = *data_.train_loader;
  const uint32_t k = o_.accum_steps;
  Window w;
  w.samples = windows_[ec->b / k] * dist_.world_size;  // over all ranks
  const uint64_t wend = std::min<uint64_t>(ec->b + k, batches_);
  optimizer_->zero_grad();
  // on the device; read once per window
  torch::Tensor wloss_t, wcorrect_t, wweight_t, wcount_t;
  int64_t pixels = 0;  // segment: the window's pixels over all ranks (every batch is H x W)
  w.per_source.assign(st_.epoch_source_samples.size(), 0);
  for (; ec->b < wend; ++ec->b) {
    conv_->wait_copied();  // the Loader may refill the previous batch's buffer now
    const Batch* batch = train_loader.next();
    if (!batch) throw std::logic_error("Loader ended before batches_per_epoch()");
    batch_hook(ec->epoch, st_.global_step + 1, dist_.rank, batch->indices, batch->sources,
               batch->size);
    if (batch->sources) {
      for (uint32_t i = 0; i < batch->size; ++i) ++w.per_source.at(batch->sources[i]);
    }
    const torch::Tensor x = conv_->images(*batch);
    if (grad_sync_ && ec->b + 1 == wend) grad_sync_->arm();  // buckets start in this backward
    GradScaler* scaler = scaler_ ? &*scaler_ : nullptr;
    MicroResult r;
    if (segment()) {
      pixels = w.samples * batch->height * batch->width;
      r = forward_backward_segment(*model_, x, batch_masks(targets_, *batch, device_), targets_,
                                   pixels, amp_, scaler);
      wweight_t = wweight_t.defined() ? wweight_t + r.weight : r.weight;
      wcount_t = wcount_t.defined() ? wcount_t + r.count : r.count;
    } else if (fields_task()) {
      const torch::Tensor y = batch_targets(targets_, *batch, device_, "--train " + o_.train);
      r = forward_backward_targets(*model_, x, y, targets_, w.samples, amp_, scaler);
    } else {
      r = forward_backward(*model_, x, conv_->labels(*batch), w.samples, amp_, scaler);
    }
    wloss_t = wloss_t.defined() ? wloss_t + r.loss_sum : r.loss_sum;
    wcorrect_t = wcorrect_t.defined() ? wcorrect_t + r.correct : r.correct;
  }
  w.loss = wloss_t.item<double>();
  w.correct = wcorrect_t.item<int64_t>();
  w.weight = segment() ? wweight_t.item<double>() : static_cast<double>(w.samples);
  w.count = segment() ? wcount_t.item<int64_t>() : w.samples;
  ec->wait += train_loader.take_wait_seconds();
  if (comm_) {  // the gradients' sum over ranks (still loss-scaled), plus the window's totals
    grad_sync_->finish();
    // and the stop requests: ranks that got SIGINT/SIGTERM, and the sum of those signals, so
    // that all ranks stop after this same step (a rank whose peer died fails here, exit 3)
    const int asked = stop_requested();
    std::vector<double> sums = {
        w.loss,   static_cast<double>(w.correct), asked ? 1.0 : 0.0, static_cast<double>(asked),
        w.weight, static_cast<double>(w.count)};
    for (int64_t n : w.per_source) sums.push_back(static_cast<double>(n));  // a mixture's
    const torch::Tensor totals = torch::tensor(sums, torch::kDouble).to(device_);
    comm_->allreduce_sum({totals});
    const torch::Tensor summed = totals.cpu();
    for (size_t k = 0; k < w.per_source.size(); ++k) {
      w.per_source[k] = static_cast<int64_t>(summed[6 + static_cast<int64_t>(k)].item<double>());
    }
    w.loss = totals[0].item<double>();
    w.correct = static_cast<int64_t>(totals[1].item<double>());
    const double votes = totals[2].item<double>();
    if (votes > 0) {
      w.stop = asked ? asked : totals[3].item<double>() == votes * SIGINT ? SIGINT : SIGTERM;
    }
    if (segment()) {  // otherwise both are w.samples, already over all ranks
      w.weight = totals[4].item<double>();
      w.count = static_cast<int64_t>(totals[5].item<double>());
    }
  }
  // One mean over the window's labelled pixels, whichever micro-batch or rank held them.
  if (segment()) rescale_window_grads(params_, static_cast<double>(pixels), w.weight);
  return w;
}

bool Run::step_optimizer(double window_loss, double lr) {
  bool finite;
  if (scaler_) {
    finite = scaler_->unscale(params_);
  } else {
    finite = std::isfinite(window_loss) && grads_finite(params_);
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
      throw DivergedError("loss or gradients were inf/NaN for " + std::to_string(kMaxNonFiniteRun) +
                          " consecutive steps (last: step " + std::to_string(st_.global_step + 1) +
                          "); lower --lr or add --clip-grad" +
                          (o_.precision == Precision::kFp32
                               ? std::string()
                               : std::string(", or use --precision fp32")));
    }
  }
  return finite;
}

void Run::apply_step(EpochClock* ec, const Window& w) {
  const double lr = lr_at(o_, st_.sched_step, total_steps_);
  const bool finite = step_optimizer(w.loss, lr);
  if (scaler_) scaler_->update(!finite);
  ++st_.global_step;
  st_.samples_seen += static_cast<uint64_t>(w.samples);
  st_.epoch_loss += w.loss;
  st_.epoch_correct += w.correct;
  st_.epoch_samples += w.samples;
  st_.epoch_weight += w.weight;
  st_.epoch_count += w.count;
  st_.log_loss += w.loss;
  st_.log_weight += w.weight;
  for (size_t k = 0; k < w.per_source.size(); ++k) st_.epoch_source_samples[k] += w.per_source[k];
  log_samples_ += w.samples;
  st_.position = data_.train_loader->position();
  st_.epoch_position = data_.train_loader->epoch_position();
  const double secs = seconds_since(ec->start);
  progress_->show({ec->epoch, ec->b, batches_,
                   run_batches_left(o_, ec->epoch, ec->b, batches_, st_.global_step),
                   st_.epoch_weight > 0 ? st_.epoch_loss / st_.epoch_weight : 0, lr,
                   st_.epoch_samples / std::max(1e-9, ec->seconds_before + secs)},
                  false);
  if (o_.log_every && st_.global_step % o_.log_every == 0) log_step(ec->epoch, lr);
  if (o_.max_steps && st_.global_step >= o_.max_steps) done_ = true;
  if (main_rank_ && o_.checkpoint_every && st_.global_step % o_.checkpoint_every == 0 &&
      ec->b < batches_) {
    checkpoint_in_epoch(*ec, secs);
  }
  step_hook(st_.global_step, dist_.rank);
  const int step_stop = comm_ ? w.stop : stop_requested();  // one process: what came meanwhile
  if (step_stop) {
    stop_sig_ = step_stop;
    stop_epoch_ = ec->epoch;
    done_ = true;
  }
}

void Run::log_step(uint64_t epoch, double lr) {
  const nlohmann::json line = {
      {"kind", "step"},
      {"step", st_.global_step},
      {"epoch", epoch},
      {"loss", st_.log_weight > 0 ? st_.log_loss / st_.log_weight : 0.0},
      {"lr", lr},
      {"scale", scaler_ ? scaler_->scale_value() : 1.0},
      {"samples_per_s", log_samples_ / std::max(1e-9, seconds_since(log_start_))}};
  metrics_.write(line);
  if (main_rank_ && !o_.output.empty()) curves_.add(line);
  st_.log_loss = st_.log_weight = 0;
  log_samples_ = 0;
  log_start_ = Clock::now();
}

void Run::checkpoint_in_epoch(const EpochClock& ec, double secs) {
  st_.epoch_seconds = ec.seconds_before + secs;
  st_.epoch_wait = ec.wait_before + ec.wait;
  st_.metrics_bytes = metrics_.bytes();
  write_checkpoint();
}

void Run::end_epoch(const EpochClock& ec) {
  st_.epoch_seconds = ec.seconds_before + seconds_since(ec.start);
  st_.epoch_wait = ec.wait_before + ec.wait;
  const double loss = st_.epoch_weight > 0 ? st_.epoch_loss / st_.epoch_weight : 0.0;
  const double acc = st_.epoch_count ? double(st_.epoch_correct) / st_.epoch_count : 0.0;
  progress_->show(
      {ec.epoch, ec.b, batches_, run_batches_left(o_, ec.epoch, ec.b, batches_, st_.global_step),
       loss, lr_at(o_, st_.sched_step, total_steps_),
       st_.epoch_samples / std::max(1e-9, st_.epoch_seconds)},
      true);
  const Clock::time_point validation_start = Clock::now();
  nlohmann::json line = {{"kind", "epoch"},
                         {"epoch", ec.epoch},
                         {"step", st_.global_step},
                         {"loss", loss},
                         {"train_acc", acc},
                         {"val_loss", nullptr},
                         {"val_acc", nullptr},
                         {"seconds", st_.epoch_seconds},
                         {"samples_per_s", st_.epoch_samples / std::max(1e-9, st_.epoch_seconds)},
                         {"data_wait", st_.epoch_wait / std::max(1e-9, st_.epoch_seconds)},
                         {"skipped_steps", st_.epoch_skipped},
                         {"complete", ec.b >= batches_}};
  if (grad_sync_) line["allreduce_bytes_per_step"] = grad_sync_->bytes_per_step();
  // regression has no accuracy; multilabel's is the share of samples with every output right
  if (o_.task.kind == TaskKind::kRegress) line["train_acc"] = nullptr;
  if (segment()) {  // per labelled pixel, as val_pixel_acc
    line.erase("train_acc");
    line["train_pixel_acc"] = acc;
  }
  if (data_.info.mixture) line["samples_per_source"] = samples_per_source();
  validate(&line);
  if (!data_.vals.empty()) progress_->validation_took(seconds_since(validation_start));
  if (comm_) comm_->barrier();  // the other ranks wait for rank 0's validation
  if (!main_rank_) return;
  print_epoch_summary(line, o_.epochs);
  metrics_.write(line);
  if (!o_.output.empty()) {
    st_.metrics_bytes = metrics_.bytes();
    write_checkpoint();
    curves_.add(line);  // after the checkpoint: a picture that cannot be written loses no epoch
    curves_.draw(curves_path());
  }
}

void Run::validate(nlohmann::json* line) {
  nlohmann::json per_val = nlohmann::json::object();
  for (ValSet& v : data_.vals) {
    nlohmann::json m;
    if (segment()) {
      const TargetEval ev = evaluate_segment(*model_, *v.loader, *conv_, amp_, targets_);
      m = ev.metrics;
      m["val_loss"] = ev.loss;
    } else if (fields_task()) {
      const TargetEval ev =
          evaluate_targets(*model_, *v.loader, *conv_, amp_, targets_, "--val " + v.path);
      m = ev.metrics;
      m["val_loss"] = ev.loss;
    } else {
      const EvalResult ev = evaluate(*model_, *v.loader, *conv_, amp_);
      m = {{"val_loss", ev.loss}, {"val_acc", ev.acc}};
    }
    if (per_val.empty()) line->update(m);  // the first --val: today's keys
    nlohmann::json& named = per_val[v.name];
    for (const auto& [k, value] : m.items())
      named[k.rfind("val_", 0) == 0 ? k.substr(4) : k] = value;
  }
  // Several --val: each under its own name ("loss", "acc", ...); one keeps today's line.
  if (data_.vals.size() > 1) (*line)["val"] = per_val;
}

nlohmann::json Run::samples_per_source() const {
  nlohmann::json counts = nlohmann::json::object();
  const Mixture& mix = *data_.info.mixture;
  for (size_t k = 0; k < mix.sources(); ++k) {
    counts[mix.source(k).name] =
        k < st_.epoch_source_samples.size() ? st_.epoch_source_samples[k] : 0;
  }
  return counts;
}

}  // namespace train
}  // namespace dscache
