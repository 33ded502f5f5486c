// Checkpoints: the settings they record, their header and checksum, atomic save with the previous
// one kept, and load with fallback.
#include "checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "safety.h"

namespace dscache {
namespace train {

namespace {

namespace fs = std::filesystem;

// The archive's own format number (keys and their meaning). 1: before the header existed.
constexpr int64_t kArchiveFormat = 2;

// The header before the archive: "DSCKPT\r\n" (the CR LF, as in PNG's signature, catches text-mode
// mangling), u32 format, u32 header size, u64 payload size, u64 XXH64 of the payload; little
// endian. Every field is checked exactly, so any change to the header is refused.
constexpr char kMagic[8] = {'D', 'S', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr uint32_t kFileFormat = 2;
constexpr uint32_t kHeaderBytes = 32;

void put_le(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const std::string& s, size_t off, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[off + i]);
  return v;
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
std::string read_s(torch::serialize::InputArchive& a, const std::string& k) {
  c10::IValue v;
  a.read(k, v);
  return v.toStringRef();
}

void save_archive_atomic(torch::serialize::OutputArchive& archive, const std::string& path) {
  std::ostringstream out;
  archive.save_to(out);
  const std::string bytes = out.str();
  write_file_atomic(path, bytes.data(), bytes.size());  // temp + fsync + rename
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

namespace {
std::string targets_text(const TaskOptions& t) {
  std::string s;
  for (const auto& n : t.targets) s += (s.empty() ? "" : ",") + n;
  return s.empty() ? "(none)" : s;
}
// --task segment's classes, --ignore-index and --class-weights, as a user would give them.
std::string segment_text(const TaskOptions& t, const DataInfo& m) {
  if (t.kind != TaskKind::kSegment) return "(none)";
  std::string s = std::to_string(m.targets.outputs()) + " classes, --ignore-index " +
                  std::to_string(t.ignore_index) + ", --class-weights ";
  if (t.class_weights.empty()) return s + "(none)";
  for (size_t i = 0; i < t.class_weights.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.17g", i ? "," : "", t.class_weights[i]);
    s += buf;
  }
  return s;
}
// What a checkpoint from before --task existed implies for the settings it lacks.
std::string saved_setting(torch::serialize::InputArchive& a, const std::string& k) {
  c10::IValue v;
  if (a.try_read("cfg/" + k, v)) return v.toStringRef();
  if (k == "task") return "classify";
  if (k == "targets" || k == "loss") return "(none)";
  if (k == "target-norm") return "off";
  if (k == "segment") return "(none)";
  return read_s(a, "cfg/" + k);  // throws: the key should be there
}
}  // namespace

RunSettings run_settings(const TrainOptions& o, const DataInfo& m, int world,
                         const SamplerOptions& sampler) {
  const std::string shuffle =
      sampler.shuffle != Shuffle::kWindowed
          ? "global"
          : "windowed (blocks of " + std::to_string(sampler.block) + " samples, windows of " +
                std::to_string(sampler.window_blocks) +
                " blocks; pass the same --window-bytes to resume elsewhere)";
  const bool scaling = o.loss_scaling == LossScaling::kOn ||
                       (o.loss_scaling == LossScaling::kAuto && o.precision == Precision::kFp16);
  RunSettings s;
  // Fixed: the checkpoint's state (Loader position, optimizer state, weights, normalization)
  // means something only under these values; another value would silently continue a different
  // run.
  s.fixed = {
      // the sample order of every epoch, which the Loader position indexes
      {"shuffle", shuffle},
      // each rank's shard of that order, and the samples per window
      {"world-size (WORLD_SIZE)", std::to_string(world)},
      // the parameters' names and shapes
      {"model", to_string(o.model)},
      // the Loader position counts batches; a window is batch x accum-steps samples
      {"batch", std::to_string(o.batch)},
      {"accum-steps", std::to_string(o.accum_steps)},
      // the optimizer state's layout (momentum buffers vs Adam moments)
      {"optimizer", to_string(o.optimizer)},
      // the shuffle of every epoch and the initial weights
      {"seed", std::to_string(o.seed)},
      // the dataset the position indexes and the classes the output layer names
      {"train", std::to_string(m.count) + " samples " + std::to_string(m.height) + "x" +
                    std::to_string(m.width) + "x" + std::to_string(m.channels) + ", " +
                    std::to_string(m.classes.size()) + " classes"},
      // the input shape the weights were trained on
      {"image-size", std::to_string(o.image_size)},
      // the input distribution the weights were trained on (the checkpoint's values are used)
      {"normalize", to_string(o.normalize)},
      // the scaler's state exists only with scaling (fp16 turns it on under auto)
      {"loss-scaling (resolved)", scaling ? "on" : "off"},
      // what the head predicts and the loss it was trained with (the targets' units)
      {"task", to_string(o.task.kind)},
      {"targets", targets_text(o.task)},
      {"loss", o.task.kind == TaskKind::kRegress ? to_string(o.task.loss) : "(none)"},
      {"target-norm", o.task.target_norm ? "on" : "off"},
      {"segment", segment_text(o.task, m)},
  };
  // Adjustable: read afresh at every step (or only at the end of the run), and the state stays
  // valid under a new value: the LR is recomputed from the step count, momentum buffers and Adam
  // moments do not depend on lr or weight decay, weights are fp32 whatever the autocast
  // precision, clipping and BatchNorm's synchronisation act on the next steps only, the number of
  // epochs or steps only moves the end (and the cosine/step schedules' length), and validation
  // only reads the weights.
  s.adjustable = {
      {"lr", num(o.lr)},
      {"momentum", num(o.momentum)},
      {"weight-decay", num(o.weight_decay)},
      {"schedule", to_string(o.schedule)},
      {"warmup-steps", std::to_string(o.warmup_steps)},
      {"step-size", std::to_string(o.step_size)},
      {"gamma", num(o.gamma)},
      {"clip-grad", num(o.clip_grad)},
      {"epochs", std::to_string(o.epochs)},
      {"max-steps", std::to_string(o.max_steps)},
      {"precision", to_string(o.precision)},
      {"device", to_string(o.device)},
      {"channels-last", o.channels_last ? "on" : "off"},
      {"sync-bn", o.sync_bn ? "on" : "off"},
      {"val", o.val.empty() ? "(none)" : o.val},
  };
  s.data = m.identity;
  s.allow_data_change = o.allow_data_change;
  return s;
}

void save_checkpoint(const std::string& dir, const RunSettings& settings, const CheckpointParts& p,
                     bool keep_previous) {
  const RunState& st = p.state;
  torch::serialize::OutputArchive a;
  write_i(a, "format", kArchiveFormat);
  for (const auto& [k, v] : settings.fixed) a.write("cfg/" + k, c10::IValue(v));
  for (const auto& [k, v] : settings.adjustable) a.write("now/" + k, c10::IValue(v));
  a.write("data/recipe", c10::IValue(settings.data.recipe));
  a.write("data/content", c10::IValue(settings.data.content));
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
  write_i(a, "samples_seen", static_cast<int64_t>(st.samples_seen));
  write_d(a, "log_loss", st.log_loss);
  write_d(a, "log_weight", st.log_weight);
  a.write("rng", at::detail::getDefaultCPUGenerator().get_state());
  a.write("norm_mean", torch::tensor(p.norm.mean, torch::kDouble));
  a.write("norm_std", torch::tensor(p.norm.std, torch::kDouble));
  if (p.targets) {
    a.write("target_mean", torch::tensor(p.targets->mean, torch::kDouble));
    a.write("target_std", torch::tensor(p.targets->std, torch::kDouble));
  }
  if (p.targets && p.targets->kind == TaskKind::kSegment) {  // the epoch's pixel totals
    write_d(a, "epoch_weight", st.epoch_weight);
    write_i(a, "epoch_count", st.epoch_count);
  }

  std::ostringstream out;
  a.save_to(out);
  const std::string payload = out.str();
  std::string header(kMagic, sizeof kMagic);
  put_le(header, kFileFormat, 4);
  put_le(header, kHeaderBytes, 4);
  put_le(header, payload.size(), 8);
  put_le(header, xxh64(payload.data(), payload.size()), 8);

  const std::string cur = dir + "/" + kCheckpointName;
  const std::string prev = dir + "/" + kPreviousCheckpointName;
  AtomicFile f(cur);
  f.write(header.data(), header.size());
  f.write(payload.data(), payload.size());
  if (keep_previous && ::rename(cur.c_str(), prev.c_str()) != 0 && errno != ENOENT) {
    throw_errno(prev, "rename " + cur + " to");
  }
  f.commit();  // fsync, rename over checkpoint.pt, fsync the directory
}

std::string verified_checkpoint_payload(const std::string& path) {
  std::string bytes;
  try {
    bytes = trainer_read_regular_file(path, "checkpoint");
  } catch (const Error& e) {
    throw CheckpointError(e.path() + ": " + e.reason());
  }
  if (bytes.size() >= 2 && bytes[0] == 'P' && bytes[1] == 'K') {
    throw CheckpointError(path +
                          ": a bare LibTorch archive without dscache-train's header and checksum "
                          "(written by an older dscache-train, or by another program): it cannot "
                          "be verified");
  }
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    throw CheckpointError(path + ": not a dscache-train checkpoint (" +
                          (bytes.size() < kHeaderBytes
                               ? std::to_string(bytes.size()) + " bytes, shorter than the header"
                               : std::string("no checkpoint header")) +
                          ")");
  }
  const uint64_t format = get_le(bytes, 8, 4), header = get_le(bytes, 12, 4);
  const uint64_t size = get_le(bytes, 16, 8), sum = get_le(bytes, 24, 8);
  if (format != kFileFormat) {
    throw CheckpointError(path + ": checkpoint format " + std::to_string(format) +
                          ", this dscache-train reads format " + std::to_string(kFileFormat));
  }
  if (header != kHeaderBytes) {
    throw CheckpointError(path + ": damaged header (header size field " + std::to_string(header) +
                          ", expected " + std::to_string(kHeaderBytes) + ")");
  }
  if (size != bytes.size() - kHeaderBytes) {
    throw CheckpointError(path + ": the header says " + std::to_string(size) +
                          " bytes follow it, the file holds " +
                          std::to_string(bytes.size() - kHeaderBytes) + " (truncated or damaged)");
  }
  const uint64_t actual = xxh64(bytes.data() + kHeaderBytes, bytes.size() - kHeaderBytes);
  if (actual != sum) {
    throw CheckpointError(path + ": checksum mismatch (the header records " + hex64(sum) +
                          ", the contents hash to " + hex64(actual) +
                          "): the file changed after it was written");
  }
  return bytes.substr(kHeaderBytes);
}

namespace {

// Restores `p` from a verified payload. Throws UsageError for other fixed settings.
void restore(const std::string& payload, const std::string& path, const RunSettings& settings,
             torch::Device device, const CheckpointParts& p, std::vector<std::string>* adjusted,
             std::string* data_note) {
  torch::serialize::InputArchive a;
  std::istringstream in(payload);
  a.load_from(in, device);
  if (read_i(a, "format") != kArchiveFormat) {
    throw CheckpointError(path + ": archive format " + std::to_string(read_i(a, "format")) +
                          " is not " + std::to_string(kArchiveFormat));
  }
  std::string refused;
  for (const auto& [k, v] : settings.fixed) {
    const std::string saved = saved_setting(a, k);
    if (saved != v)
      refused += (refused.empty() ? "--" : ", --") + k + " " + saved + " (this run: " + v + ")";
  }
  if (!refused.empty()) {
    throw UsageError("--resume: " + path +
                     " was made with other settings that change the run's meaning: " + refused +
                     "; give the checkpoint's values to continue it, or --force to start over");
  }
  // The data: the same bytes (content digest) or, with --allow-data-change, said so. Checkpoints
  // from before the record are resumed with a note (nothing to compare).
  data_note->clear();
  c10::IValue saved_content, saved_recipe;
  if (!a.try_read("data/content", saved_content) || !a.try_read("data/recipe", saved_recipe)) {
    *data_note = path +
                 " does not record which data it was made on (an older dscache-train): "
                 "cannot check that --train holds the same samples";
  } else if (saved_content.toStringRef() != settings.data.content) {
    std::string what = "content digest " + saved_content.toStringRef() +
                       " (this run: " + settings.data.content + ")";
    if (saved_recipe.toStringRef() != settings.data.recipe) {
      what = "recipe \"" + saved_recipe.toStringRef() + "\" (this run: \"" + settings.data.recipe +
             "\"), " + what;
    } else {
      what += ", the same recipe (\"" + settings.data.recipe + "\")";
    }
    if (!settings.allow_data_change) {
      throw UsageError("--resume: " + path + " was made on other training data: " + what +
                       "; point --train at the cache it was made on, pass --allow-data-change to "
                       "continue on this data anyway, or --force to start over");
    }
    *data_note = "--allow-data-change: continuing " + path + " on other training data: " + what;
  }
  adjusted->clear();
  for (const auto& [k, v] : settings.adjustable) {
    const std::string saved = read_s(a, "now/" + k);
    if (saved != v) adjusted->push_back("--" + k + " " + v + " (checkpoint: " + saved + ")");
  }
  torch::serialize::InputArchive model_a, opt_a;
  a.read("model", model_a);
  a.read("optimizer", opt_a);
  p.model.load(model_a);
  p.optimizer.load(opt_a);
  if (read_i(a, "scaler_on") != (p.scaler ? 1 : 0)) {
    throw CheckpointError(path + ": records loss scaling " + (p.scaler ? "off" : "on") +
                          " but its settings say otherwise");
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
  st.samples_seen = static_cast<uint64_t>(read_i(a, "samples_seen"));
  // The step line's running sums (older checkpoints lack them: the line averages from here).
  c10::IValue log_loss, log_weight;
  const bool have_log = a.try_read("log_loss", log_loss) && a.try_read("log_weight", log_weight);
  st.log_loss = have_log ? log_loss.toDouble() : 0;
  st.log_weight = have_log ? log_weight.toDouble() : 0;
  if (p.targets && p.targets->kind == TaskKind::kSegment) {
    st.epoch_weight = read_d(a, "epoch_weight");
    st.epoch_count = read_i(a, "epoch_count");
  } else {  // per sample
    st.epoch_weight = static_cast<double>(st.epoch_samples);
    st.epoch_count = st.epoch_samples;
  }
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
  if (p.targets) {  // the task matched (a fixed setting), so the checkpoint holds them
    torch::Tensor tm, ts;
    a.read("target_mean", tm);
    a.read("target_std", ts);
    tm = tm.cpu().contiguous();
    ts = ts.cpu().contiguous();
    if (tm.numel() != p.targets->outputs() || ts.numel() != p.targets->outputs()) {
      throw CheckpointError(path + ": holds " + std::to_string(tm.numel()) +
                            " target statistics, the head has " +
                            std::to_string(p.targets->outputs()) + " outputs");
    }
    p.targets->mean.assign(tm.data_ptr<double>(), tm.data_ptr<double>() + tm.numel());
    p.targets->std.assign(ts.data_ptr<double>(), ts.data_ptr<double>() + ts.numel());
  }
}

}  // namespace

LoadResult load_checkpoint(const std::string& dir, const RunSettings& settings,
                           torch::Device device, const CheckpointParts& p) {
  LoadResult r;
  const std::string names[2] = {kCheckpointName, kPreviousCheckpointName};
  std::vector<std::string> problems;
  bool current_missing = false;
  for (int i = 0; i < 2; ++i) {
    const std::string path = dir + "/" + names[i];
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      if (i == 0) {
        problems.push_back(path + " is missing");
        current_missing = true;
      }
      continue;
    }
    r.found = true;
    try {
      restore(verified_checkpoint_payload(path), path, settings, device, p, &r.adjusted,
              &r.data_note);
      r.path = path;
      if (i == 1) {
        r.fallback = problems.front();
        r.current_bad = !current_missing;
      }
      return r;
    } catch (const CheckpointError& e) {
      problems.push_back(e.what());
    } catch (const c10::Error& e) {
      problems.push_back(path + ": its checksum verifies but LibTorch cannot read it as a " +
                         "dscache-train checkpoint: " + first_line(e.what_without_backtrace()));
    }
  }
  if (!r.found) return r;
  std::string all;
  for (const auto& s : problems) all += (all.empty() ? "" : "; ") + s;
  throw CheckpointError("--resume: no usable checkpoint in " + dir + ": " + all +
                        ". Restore a good copy, or start over with --force");
}

void save_model(const Classifier& model, const Normalization& norm, const std::string& path) {
  torch::serialize::OutputArchive a;
  model.save(a);
  const auto as_float = [](const std::vector<double>& v) {
    return torch::tensor(v, torch::kDouble).to(torch::kFloat32);
  };
  a.write(kNormMeanBuffer, as_float(norm.mean), /*is_buffer=*/true);
  a.write(kNormStdBuffer, as_float(norm.std), /*is_buffer=*/true);
  save_archive_atomic(a, path);
}

}  // namespace train
}  // namespace dscache
