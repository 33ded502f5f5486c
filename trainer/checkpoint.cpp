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

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

torch::Tensor int64_tensor(const std::vector<uint64_t>& v) {
  std::vector<int64_t> s(v.begin(), v.end());
  return torch::tensor(s, torch::kInt64);
}
// An int64 tensor `k` (absent: empty).
std::vector<int64_t> try_read_int64s(torch::serialize::InputArchive& a, const std::string& k) {
  torch::Tensor t;
  if (!a.try_read(k, t)) return {};
  t = t.cpu().contiguous();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

// The epoch's length, and a mixture's state (keys added after format 2, read with try_read):
// where the order continues (EpochPosition::mix), the shares it was made under and the epoch's
// samples per source.
void write_mix(torch::serialize::OutputArchive& a, const RunState& st, const RunSettings& s) {
  write_i(a, "loader_epoch_samples", static_cast<int64_t>(st.epoch_length));
  if (!s.mix_fingerprint) return;
  const MixState& m = st.epoch_position.mix;
  // before the first step the Loader has not said; the shares in force are this run's
  write_i(a, "mix/fingerprint",
          static_cast<int64_t>(m.fingerprint ? m.fingerprint : s.mix_fingerprint));
  a.write("mix/shares", c10::IValue(s.mix_shares));
  write_i(a, "mix/segment", m.segment);
  write_i(a, "mix/segment_start", static_cast<int64_t>(m.segment_start));
  a.write("mix/segment_drawn", int64_tensor(m.segment_drawn));
  a.write("mix/drawn", int64_tensor(m.drawn));
  a.write("mix/taken", int64_tensor(m.taken));
  a.write("epoch_source_samples", torch::tensor(st.epoch_source_samples, torch::kInt64));
}

void read_mix(torch::serialize::InputArchive& a, RunState* st) {
  c10::IValue v;
  st->epoch_length = a.try_read("loader_epoch_samples", v) ? static_cast<uint64_t>(v.toInt()) : 0;
  MixState& m = st->epoch_position.mix;
  m = {};
  st->epoch_source_samples.clear();
  if (!a.try_read("mix/fingerprint", v)) return;
  m.fingerprint = static_cast<uint64_t>(v.toInt());
  m.segment = static_cast<uint32_t>(read_i(a, "mix/segment"));
  m.segment_start = static_cast<uint64_t>(read_i(a, "mix/segment_start"));
  const auto as_u64 = [](const std::vector<int64_t>& x) {
    return std::vector<uint64_t>(x.begin(), x.end());
  };
  m.segment_drawn = as_u64(try_read_int64s(a, "mix/segment_drawn"));
  m.drawn = as_u64(try_read_int64s(a, "mix/drawn"));
  m.taken = as_u64(try_read_int64s(a, "mix/taken"));
  st->epoch_source_samples = try_read_int64s(a, "epoch_source_samples");
}

// A mixture resumes under the shares it was made with, or with allow_mix_change under new ones
// (said in *note); a checkpoint with a mixture's state and a run without one (or the reverse)
// cannot continue each other's epoch. Throws UsageError naming both.
void check_mix(torch::serialize::InputArchive& a, const std::string& path,
               const RunSettings& settings, std::string* note) {
  note->clear();
  c10::IValue fp, shares;
  const bool saved = a.try_read("mix/fingerprint", fp);
  if (!saved && !settings.mix_fingerprint) return;
  const std::string saved_shares =
      saved && a.try_read("mix/shares", shares) ? shares.toStringRef() : "(not recorded)";
  const std::string fix =
      "; give the checkpoint's --train caches and shares, or --force to start over";
  if (!saved) {
    throw UsageError("--resume: " + path + " was made on one cache; this run mixes several (" +
                     settings.mix_shares + ")" + fix);
  }
  if (!settings.mix_fingerprint) {
    throw UsageError("--resume: " + path + " was made on a mixture (" + saved_shares +
                     "); this run trains on one cache" + fix);
  }
  if (static_cast<uint64_t>(fp.toInt()) == settings.mix_fingerprint) return;
  const std::string what = saved_shares + " (this run: " + settings.mix_shares + ")";
  if (!settings.allow_mix_change) {
    throw UsageError("--resume: " + path + " was made under other mixture shares: " + what +
                     "; give the checkpoint's --mix/--mix-repeat/--mix-samples/--mix-batching, "
                     "or pass --allow-mix-change to serve the rest of its epoch under the new "
                     "ones");
  }
  *note =
      "--allow-mix-change: the samples taken stand; the rest of the epoch and the epochs "
      "after it follow the new shares: " +
      what;
}

}  // namespace

namespace {
// What a checkpoint from before --task (or elastic resume) existed implies for the settings it
// lacks.
std::string saved_setting(torch::serialize::InputArchive& a, const std::string& k) {
  c10::IValue v;
  if (a.try_read("cfg/" + k, v)) return v.toStringRef();
  if (k == "task") return "classify";
  if (k == "targets" || k == "loss") return "(none)";
  if (k == "target-norm") return "off";
  if (k == "segment") return "(none)";
  if (k == kGlobalBatch) {  // before elastic resume: the product of its three fixed factors
    return std::to_string(std::stoull(read_s(a, std::string("cfg/") + kBatch)) *
                          std::stoull(read_s(a, std::string("cfg/") + kAccumSteps)) *
                          std::stoull(read_s(a, std::string("cfg/") + kWorldSize)));
  }
  return read_s(a, "cfg/" + k);  // throws: the key should be there
}

StepGeometry saved_geometry(torch::serialize::InputArchive& a) {
  StepGeometry g;
  g.batch = std::stoull(read_s(a, std::string("cfg/") + kBatch));
  g.accum_steps = std::stoull(read_s(a, std::string("cfg/") + kAccumSteps));
  g.world_size = std::stoull(read_s(a, std::string("cfg/") + kWorldSize));
  return g;
}
}  // namespace

void save_checkpoint(const std::string& dir, const RunSettings& settings, const CheckpointParts& p,
                     bool keep_previous) {
  const RunState& st = p.state;
  torch::serialize::OutputArchive a;
  write_i(a, "format", kArchiveFormat);
  for (const auto& [k, v] : settings.fixed) a.write("cfg/" + k, c10::IValue(v));
  for (const auto& [k, v] : settings.elastic) a.write("cfg/" + k, c10::IValue(v));
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
  write_i(a, "loader_sample", static_cast<int64_t>(st.epoch_position.sample));
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
  write_mix(a, st, settings);

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

// The data: the same bytes (content digest) or, with --allow-data-change, said so (data_note);
// otherwise UsageError.
void check_data(torch::serialize::InputArchive& a, const std::string& path,
                const RunSettings& settings, std::string* data_note) {
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
}

// Restores `p` from a verified payload. Throws UsageError for other fixed settings.
void restore(const std::string& payload, const std::string& path, const SettingsFor& settings_for,
             torch::Device device, const CheckpointParts& p, LoadResult* r) {
  std::vector<std::string>* adjusted = &r->adjusted;
  std::string* data_note = &r->data_note;
  torch::serialize::InputArchive a;
  std::istringstream in(payload);
  a.load_from(in, device);
  if (read_i(a, "format") != kArchiveFormat) {
    throw CheckpointError(path + ": archive format " + std::to_string(read_i(a, "format")) +
                          " is not " + std::to_string(kArchiveFormat));
  }
  r->saved = saved_geometry(a);
  const RunSettings settings = settings_for(r->saved);
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
  check_data(a, path, settings, data_note);
  check_mix(a, path, settings, &r->mix_note);
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
  st.epoch_position.seed = st.position.seed;
  st.epoch_position.epoch = st.position.epoch;
  c10::IValue sample;
  st.epoch_position.sample =
      a.try_read("loader_sample", sample)
          ? static_cast<uint64_t>(sample.toInt())
          : st.position.cursor * r->saved.batch * r->saved.world_size;  // older checkpoints
  read_mix(a, &st);
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

LoadResult load_checkpoint(const std::string& dir, const SettingsFor& settings_for,
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
      restore(verified_checkpoint_payload(path), path, settings_for, device, p, &r);
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
