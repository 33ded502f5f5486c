// Checkpoints: the settings fingerprint, the archive's fields, atomic save and load.
#include "checkpoint.h"

#include <filesystem>
#include <mutex>
#include <sstream>

#include "dscache/atomic_file.h"

namespace dscache {
namespace train {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kCheckpointFormat = 1;

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

}  // namespace

Fingerprint fingerprint(const TrainOptions& o, const DataInfo& m, int world,
                        const SamplerOptions& sampler) {
  const std::string shuffle =
      sampler.shuffle != Shuffle::kWindowed
          ? "global"
          : "windowed (blocks of " + std::to_string(sampler.block) + " samples, windows of " +
                std::to_string(sampler.window_blocks) +
                " blocks; pass the same --window-bytes to resume elsewhere)";
  return {
      {"shuffle", shuffle},
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

void save_checkpoint(const std::string& path, const Fingerprint& fp, const CheckpointParts& p) {
  const RunState& st = p.state;
  torch::serialize::OutputArchive a;
  write_i(a, "format", kCheckpointFormat);
  for (const auto& [k, v] : fp) a.write("cfg/" + k, c10::IValue(v));
  torch::serialize::OutputArchive model_a, opt_a;
  p.model.save(model_a);
  p.optimizer.save(opt_a);
  a.write("model", model_a);
  a.write("optimizer", opt_a);
  write_i(a, "scaler_on", p.scaler ? 1 : 0);
  if (p.scaler) {
    torch::serialize::OutputArchive scaler_a;
    p.scaler->save(scaler_a);
    a.write("scaler", scaler_a);
  }
  write_i(a, "global_step", static_cast<int64_t>(st.global_step));
  write_i(a, "sched_step", static_cast<int64_t>(st.sched_step));
  write_i(a, "nonfinite_run", st.nonfinite_run);
  write_i(a, "loader_seed", static_cast<int64_t>(st.position.seed));
  write_i(a, "loader_epoch", static_cast<int64_t>(st.position.epoch));
  write_i(a, "loader_cursor", static_cast<int64_t>(st.position.cursor));
  write_d(a, "epoch_loss", st.epoch_loss);
  write_i(a, "epoch_correct", st.epoch_correct);
  write_i(a, "epoch_samples", st.epoch_samples);
  write_i(a, "epoch_skipped", st.epoch_skipped);
  write_d(a, "epoch_seconds", st.epoch_seconds);
  write_d(a, "epoch_wait", st.epoch_wait);
  write_i(a, "metrics_bytes", static_cast<int64_t>(st.metrics_bytes));
  a.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  a.write("norm_mean", torch::tensor(p.norm.mean, torch::kDouble));
  a.write("norm_std", torch::tensor(p.norm.std, torch::kDouble));
  save_archive_atomic(a, path);
}

bool load_checkpoint(const std::string& path, const Fingerprint& fp, torch::Device device,
                     const CheckpointParts& p) {
  if (!fs::exists(path)) return false;
  torch::serialize::InputArchive a;
  a.load_from(path, device);
  if (read_i(a, "format") != kCheckpointFormat) {
    throw std::runtime_error(path + ": checkpoint format " + std::to_string(read_i(a, "format")) +
                             " is not " + std::to_string(kCheckpointFormat));
  }
  for (const auto& [k, v] : fp) {
    c10::IValue saved;
    a.read("cfg/" + k, saved);
    if (saved.toStringRef() != v) {
      throw UsageError("--resume: " + path + " was made with --" + k + " " + saved.toStringRef() +
                       ", this run has " + v);
    }
  }
  torch::serialize::InputArchive model_a, opt_a;
  a.read("model", model_a);
  a.read("optimizer", opt_a);
  p.model.load(model_a);
  p.optimizer.load(opt_a);
  if (read_i(a, "scaler_on") != (p.scaler ? 1 : 0)) {
    throw UsageError("--resume: " + path + " was made with loss scaling " +
                     (p.scaler ? "off" : "on") + " (--precision/--loss-scaling differ)");
  }
  if (p.scaler) {
    torch::serialize::InputArchive scaler_a;
    a.read("scaler", scaler_a);
    p.scaler->load(scaler_a);
  }
  RunState& st = p.state;
  st.global_step = static_cast<uint64_t>(read_i(a, "global_step"));
  st.sched_step = static_cast<uint64_t>(read_i(a, "sched_step"));
  st.nonfinite_run = read_i(a, "nonfinite_run");
  st.position.seed = static_cast<uint64_t>(read_i(a, "loader_seed"));
  st.position.epoch = static_cast<uint64_t>(read_i(a, "loader_epoch"));
  st.position.cursor = static_cast<uint64_t>(read_i(a, "loader_cursor"));
  st.epoch_loss = read_d(a, "epoch_loss");
  st.epoch_correct = read_i(a, "epoch_correct");
  st.epoch_samples = read_i(a, "epoch_samples");
  st.epoch_skipped = read_i(a, "epoch_skipped");
  st.epoch_seconds = read_d(a, "epoch_seconds");
  st.epoch_wait = read_d(a, "epoch_wait");
  st.metrics_bytes = static_cast<uint64_t>(read_i(a, "metrics_bytes"));
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
  p.norm.mean.assign(mean.data_ptr<double>(), mean.data_ptr<double>() + mean.numel());
  p.norm.std.assign(stdv.data_ptr<double>(), stdv.data_ptr<double>() + stdv.numel());
  return true;
}

void save_model(const Classifier& model, const std::string& path) {
  torch::serialize::OutputArchive a;
  model.save(a);
  save_archive_atomic(a, path);
}

}  // namespace train
}  // namespace dscache
