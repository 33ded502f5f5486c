#include "build_pipeline.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <opencv2/core.hpp>

#include <tbb/concurrent_queue.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/npy.h"
#include "dscache/shard.h"
#include "dscache/ingest/image_decode.h"
#include "progress.h"
#include "dscache/ingest/source_decoder.h"
#include "dscache/ingest/source_list.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kFingerprintFile = ".build.json";
constexpr size_t kSkipsShown = 20;  // skip reasons printed to stderr before "... N more"

bool path_exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

std::string sidecar_name(uint64_t shard) {
  char buf[48];
  std::snprintf(buf, sizeof buf, ".shard-%05llu.json", static_cast<unsigned long long>(shard));
  return buf;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}


json fingerprint(const SourceListing& src, const BuildRecipe& r, Storage storage) {
  return json{{"source_kind", src.kind},
              {"source_root", src.root},
              {"source_labels", src.labels_path},
              {"source_entries", src.entries.size()},
              {"source_digest", src.digest},
              {"classes", src.classes},
              {"storage", to_string(storage)},
              {"height", r.height},
              {"width", r.width},
              {"channels", r.channels},
              {"resize", to_string(r.resize)},
              {"reduced_decode", r.reduced_decode},
              {"max_pixels", r.max_pixels},
              {"shard_bytes", r.shard_bytes},
              {"layout", r.max_side > 0 ? "ragged" : "fixed"},
              {"max_side", r.max_side}};
}

// A unit of work flowing through the pipeline; reused through a pool to avoid per-sample
// allocations.
struct Token {
  uint64_t index = 0;
  std::vector<uint8_t> file;    // encoded bytes, grows to the largest file seen
  std::vector<uint8_t> pixels;  // decoded sample
  uint32_t height = 0;          // its size (the ragged layout varies per sample)
  uint32_t width = 0;
  uint64_t checksum = 0;
  bool ok = false;
  std::string reason;
};

struct Skip {
  std::string source;
  std::string reason;
};

// Everything the serial writer stage owns. Touched from that stage only.
class Writer {
 public:
  // Fixed layout: `per_shard` samples of `shape` per shard. Ragged (`ragged_bytes` > 0): shards
  // close before the sample that would take them past `ragged_bytes` image bytes.
  Writer(std::string dir, Storage storage, SampleShape shape, uint64_t per_shard,
         uint64_t ragged_bytes)
      : dir_(std::move(dir)),
        storage_(storage),
        shape_(shape),
        per_shard_(per_shard),
        ragged_bytes_(ragged_bytes) {
    const char* kill = std::getenv("DSCACHE_TEST_KILL_AFTER_SHARDS");
    if (kill != nullptr) kill_after_ = std::strtoull(kill, nullptr, 10);
  }

  // Takes over the finished shards of an interrupted build. Returns the source index to
  // continue from. Removes anything past the last complete shard.
  uint64_t adopt_finished() {
    uint64_t src_end = 0;
    for (uint64_t k = 0;; ++k) {
      std::string side = dir_ + "/" + sidecar_name(k);
      std::string shard = dir_ + "/" + shard_file_name(storage_, k);
      if (!path_exists(side) || !path_exists(shard)) break;
      json j;
      try {
        std::ifstream in(side);
        j = json::parse(in);
      } catch (const std::exception&) {
        break;  // torn sidecar: redo this shard
      }
      ShardEntry e;
      e.file = j["shard"]["file"];
      e.first = j["shard"]["first"];
      e.count = j["shard"]["count"];
      e.bytes = j["shard"]["bytes"];
      e.xxh64 = j["shard"]["xxh64"];
      FileEntry actual = hash_file(shard);
      if (actual.bytes != e.bytes || actual.xxh64 != e.xxh64 || e.first != next_first_) break;
      shards_.push_back(e);
      next_first_ += e.count;
      for (auto& v : j["labels"]) labels_.push_back(v.get<int64_t>());
      for (auto& v : j["checksums"]) checksums_.push_back(v.get<uint64_t>());
      for (auto& v : j["sources"]) sources_.push_back(v.get<std::string>());
      for (auto& v : j["skips"]) skips_.push_back({v["source"], v["reason"]});
      if (j.contains("index")) {
        for (auto& v : j["index"]) index_.push_back(v.get<int64_t>());
      }
      src_end = j["src_end"];
      shard_index_ = k + 1;
    }
    // Anything else in the directory is an unfinished shard or a temp file: remove it.
    for (const auto& ent : fs::directory_iterator(dir_)) {
      std::string name = ent.path().filename().string();
      if (name == kFingerprintFile) continue;
      bool keep = false;
      for (uint64_t k = 0; k < shard_index_; ++k) {
        keep = keep || name == sidecar_name(k) || name == shard_file_name(storage_, k);
      }
      if (!keep) fs::remove_all(ent.path());
    }
    shard_skip_begin_ = skips_.size();
    shard_sample_begin_ = labels_.size();
    return src_end;
  }

  void add_sample(const Token& t, const SourceEntry& e) {
    if (ragged_bytes_ > 0) {
      add_ragged(t, e);
      return;
    }
    if (!writer_) {
      writer_ = ShardWriter::create(storage_, dir_ + "/" + shard_file_name(storage_, shard_index_),
                                    shape_, per_shard_);
    }
    writer_->append(t.pixels.data(), e.label);
    labels_.push_back(e.label);
    checksums_.push_back(t.checksum);
    sources_.push_back(e.name);
    if (writer_->count() == per_shard_) commit_shard(t.index + 1);
  }

  void add_ragged(const Token& t, const SourceEntry& e) {
    const uint64_t bytes = uint64_t{t.height} * t.width * shape_.channels;
    if (ragged_ && ragged_->count() > 0 && ragged_->bytes() + bytes > ragged_bytes_) {
      commit_shard(t.index);  // this sample opens the next shard
    }
    if (!ragged_) {
      ragged_ = RaggedShardWriter::create(
          storage_, dir_ + "/" + shard_file_name(storage_, shard_index_), shape_.channels,
          std::max(ragged_bytes_, bytes));
    }
    uint64_t offset = ragged_->append(t.pixels.data(), t.height, t.width, e.label);
    index_.insert(index_.end(), {static_cast<int64_t>(offset), int64_t{t.height}, int64_t{t.width}});
    labels_.push_back(e.label);
    checksums_.push_back(t.checksum);
    sources_.push_back(e.name);
  }

  void add_skip(const SourceEntry& e, const std::string& reason) {
    skips_.push_back({e.name, reason});
  }

  // Commits the open shard (if any) as the one ending at source index `src_end`.
  void commit_shard(uint64_t src_end) {
    if (!writer_ && !ragged_) return;
    ShardEntry e = writer_ ? writer_->commit() : ragged_->commit();
    writer_.reset();
    ragged_.reset();
    e.first = next_first_;
    next_first_ += e.count;
    json side;
    side["shard"] = {{"file", e.file}, {"first", e.first}, {"count", e.count},
                     {"bytes", e.bytes}, {"xxh64", e.xxh64}};
    side["src_end"] = src_end;
    side["labels"] = std::vector<int64_t>(labels_.begin() + shard_sample_begin_, labels_.end());
    side["checksums"] =
        std::vector<uint64_t>(checksums_.begin() + shard_sample_begin_, checksums_.end());
    side["sources"] =
        std::vector<std::string>(sources_.begin() + shard_sample_begin_, sources_.end());
    json skips = json::array();
    for (size_t i = shard_skip_begin_; i < skips_.size(); ++i) {
      skips.push_back({{"source", skips_[i].source}, {"reason", skips_[i].reason}});
    }
    side["skips"] = std::move(skips);
    if (ragged_bytes_ > 0) {
      side["index"] =
          std::vector<int64_t>(index_.begin() + 3 * shard_sample_begin_, index_.end());
    }
    std::string text = side.dump();
    write_file_atomic(dir_ + "/" + sidecar_name(shard_index_), text.data(), text.size());
    shards_.push_back(e);
    shard_sample_begin_ = labels_.size();
    shard_skip_begin_ = skips_.size();
    ++shard_index_;
    if (kill_after_ != 0 && shard_index_ == kill_after_) std::raise(SIGKILL);  // test hook
  }

  uint64_t count() const { return labels_.size(); }
  uint64_t skipped() const { return skips_.size(); }
  const std::vector<ShardEntry>& shards() const { return shards_; }
  const std::vector<int64_t>& labels() const { return labels_; }
  const std::vector<uint64_t>& checksums() const { return checksums_; }
  const std::vector<std::string>& sources() const { return sources_; }
  const std::vector<Skip>& skips() const { return skips_; }
  const std::vector<int64_t>& ragged_index() const { return index_; }
  uint64_t shard_count() const { return shard_index_; }

 private:
  std::string dir_;
  Storage storage_;
  SampleShape shape_;
  uint64_t per_shard_;
  uint64_t ragged_bytes_;
  uint64_t kill_after_ = 0;
  std::unique_ptr<ShardWriter> writer_;
  std::unique_ptr<RaggedShardWriter> ragged_;
  uint64_t shard_index_ = 0;
  uint64_t next_first_ = 0;
  size_t shard_sample_begin_ = 0;
  size_t shard_skip_begin_ = 0;
  std::vector<ShardEntry> shards_;
  std::vector<int64_t> labels_;
  std::vector<uint64_t> checksums_;
  std::vector<std::string> sources_;
  std::vector<Skip> skips_;
  std::vector<int64_t> index_;  // ragged: (offset, height, width) per sample
};

FileEntry write_text(const std::string& dir, const std::string& name, const std::string& text) {
  FileEntry e = write_file_atomic(dir + "/" + name, text.data(), text.size());
  e.file = name;
  return e;
}

FileEntry write_npy(const std::string& dir, const std::string& name, const std::string& descr,
                    const void* data, std::vector<uint64_t> shape, size_t item) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  write_npy_file(dir + "/" + name, descr, shape, data, n * item);
  FileEntry e = hash_file(dir + "/" + name);
  e.file = name;
  return e;
}

// Moves the finished partial directory to `output`, swapping out an old cache atomically.
void publish(const std::string& partial, const std::string& output, bool replace) {
  if (replace) {
    if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, output.c_str(), RENAME_EXCHANGE) != 0) {
      throw_errno(output, "cannot swap the new cache into place");
    }
    fs::remove_all(partial);  // now holds the old cache
  } else if (::rename(partial.c_str(), output.c_str()) != 0) {
    throw_errno(output, "cannot rename the new cache into place");
  }
  fsync_directory(fs::path(output).parent_path().string());
}

bool is_replaceable(const std::string& output) {
  if (path_exists(output + "/manifest.json")) return true;
  std::error_code ec;
  return fs::is_directory(output, ec) && fs::is_empty(output, ec);
}

}  // namespace

std::string partial_dir_for(const std::string& output) {
  fs::path p = fs::path(output);
  return (p.parent_path() / ("." + p.filename().string() + ".partial")).string();
}

BuildSummary run_build(const BuildOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  std::string output = absolute_path(opt.output);
  while (output.size() > 1 && output.back() == '/') output.pop_back();
  std::string partial = partial_dir_for(output);

  bool replace = path_exists(output);
  if (replace && !opt.force) {
    throw OutputExistsError(ErrorKind::kInvalidArgument, output,
                            "already exists; pass --force to replace it");
  }
  if (replace && !is_replaceable(output)) {
    throw OutputExistsError(ErrorKind::kInvalidArgument, output,
                            "exists and is not a dscache cache (no manifest.json); refusing to "
                            "replace it");
  }
  if (path_exists(partial) && !opt.resume) {
    if (!opt.force) {
      throw OutputExistsError(ErrorKind::kInvalidArgument, partial,
                              "an interrupted build is here: pass --resume to continue it or "
                              "--force to start over");
    }
    fs::remove_all(partial);
  }

  SourceListing src = list_source(opt.source, SourceOptions{opt.labels_file, opt.class_names});
  BuildRecipe r = opt.recipe;
  const bool ragged = opt.layout == Layout::kRagged;
  if (ragged) {
    if (r.max_side == 0) {
      throw Error(ErrorKind::kInvalidArgument, "--max-side",
                  "is required with --layout ragged (the shorter side's limit, e.g. 256)");
    }
    if (opt.size_given) {
      throw Error(ErrorKind::kInvalidArgument, "--size",
                  "does not apply to --layout ragged (use --max-side)");
    }
    r.height = r.width = 0;
    if (src.kind == "idx" && !opt.channels_given) r.channels = 1;
  } else if (src.kind == "idx") {
    if (!opt.size_given) {
      r.height = src.idx->rows;
      r.width = src.idx->cols;
    }
    if (!opt.channels_given) r.channels = 1;
  } else if (!opt.size_given) {
    throw Error(ErrorKind::kInvalidArgument, "--size",
                "is required for folder and list sources (e.g. --size 224 or --size 256x192)");
  }
  if (!ragged) r.max_side = 0;
  SampleShape shape{r.height, r.width, r.channels};
  uint64_t per_shard = ragged ? 0 : std::max<uint64_t>(1, r.shard_bytes / shape.bytes());

  // The partial directory and its fingerprint: a resumed build must be the same build.
  json fp = fingerprint(src, r, opt.storage);
  std::string fp_path = partial + "/" + kFingerprintFile;
  if (path_exists(partial)) {
    std::ifstream in(fp_path);
    json old;
    try {
      old = json::parse(in);
    } catch (const std::exception&) {
      old = json();
    }
    if (old != fp) {
      throw Error(ErrorKind::kInvalidArgument, partial,
                  "the interrupted build here used other options or another source (or the "
                  "source changed); pass --force to start over");
    }
  } else {
    fs::create_directories(fs::path(partial).parent_path());
    if (::mkdir(partial.c_str(), 0755) != 0) throw_errno(partial, "cannot create directory");
    std::string text = fp.dump(2);
    write_file_atomic(fp_path, text.data(), text.size());
  }

  Writer writer(partial, opt.storage, shape, per_shard, ragged ? r.shard_bytes : 0);
  uint64_t start = writer.adopt_finished();
  uint64_t resumed = writer.count();
  if (opt.resume && start > 0 && !opt.quiet) {
    std::fprintf(stderr, "resuming: %llu samples in %llu finished shards kept\n",
                 static_cast<unsigned long long>(resumed),
                 static_cast<unsigned long long>(writer.shard_count()));
  }

  DecodeOptions dopt;
  dopt.height = ragged ? 1 : r.height;  // unused by the ragged decode
  dopt.width = ragged ? 1 : r.width;
  dopt.channels = r.channels;
  dopt.resize = r.resize;
  dopt.reduced_decode = r.reduced_decode;
  dopt.max_pixels = r.max_pixels;

  int threads = opt.threads > 0 ? opt.threads
                                : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cv::setNumThreads(0);  // our threads are the parallelism; OpenCV's own pool would oversubscribe

  const uint64_t end = src.entries.size();
  uint64_t next = start;
  bool failed = false;  // --strict met a bad file; set by the writer stage
  std::string fail_source, fail_reason;
  Progress progress(end, opt.quiet);
  size_t skips_printed = 0;

  const size_t ntokens = static_cast<size_t>(threads) * 4;
  std::vector<std::unique_ptr<Token>> tokens_owned;
  tbb::concurrent_queue<Token*> pool;
  for (size_t i = 0; i < ntokens; ++i) {
    tokens_owned.push_back(std::make_unique<Token>());
    if (!ragged) tokens_owned.back()->pixels.resize(shape.bytes());
    pool.push(tokens_owned.back().get());
  }

  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_pipeline(
        ntokens,
        tbb::make_filter<void, Token*>(
            tbb::filter_mode::serial_in_order,
            [&](tbb::flow_control& fc) -> Token* {
              if (next >= end || failed) {
                fc.stop();
                return nullptr;
              }
              Token* t = nullptr;
              pool.try_pop(t);  // never empty: at most ntokens are in flight
              t->index = next++;
              return t;
            }) &
            tbb::make_filter<Token*, Token*>(
                tbb::filter_mode::parallel,
                [&](Token* t) -> Token* {
                  const SourceEntry& e = src.entries[t->index];
                  t->reason.clear();
                  if (src.idx && ragged) {
                    resize_pixels_ragged(src.idx->image(t->index), src.idx->rows, src.idx->cols,
                                         1, r.channels, r.max_side, &t->pixels, &t->height,
                                         &t->width);
                    t->ok = true;
                  } else if (src.idx) {
                    resize_pixels(src.idx->image(t->index), src.idx->rows, src.idx->cols, 1, dopt,
                                  t->pixels.data());
                    t->ok = true;
                  } else if (read_whole_file(e.path, t->file, t->reason)) {
                    DecodeResult d =
                        ragged ? decode_image_ragged(t->file.data(), t->file.size(), dopt,
                                                     r.max_side, &t->pixels, &t->height,
                                                     &t->width)
                               : decode_image(t->file.data(), t->file.size(), dopt,
                                              t->pixels.data());
                    t->ok = d.ok;
                    t->reason = d.reason;
                  } else {
                    t->ok = false;
                  }
                  if (t->ok) {
                    size_t bytes = ragged ? size_t{t->height} * t->width * r.channels
                                          : t->pixels.size();
                    t->checksum = xxh64(t->pixels.data(), bytes);
                  }
                  return t;
                }) &
            tbb::make_filter<Token*, void>(
                tbb::filter_mode::serial_in_order, [&](Token* t) {
                  const SourceEntry& e = src.entries[t->index];
                  if (!failed) {
                    if (t->ok) {
                      writer.add_sample(*t, e);
                    } else if (opt.strict) {
                      failed = true;
                      fail_source = e.path.empty() ? e.name : e.path;
                      fail_reason = t->reason;
                    } else {
                      writer.add_skip(e, t->reason);
                      if (!opt.quiet && skips_printed < kSkipsShown) {
                        std::fprintf(stderr, "skipped %s: %s\n",
                                     (e.path.empty() ? e.name : e.path).c_str(),
                                     t->reason.c_str());
                        ++skips_printed;
                      }
                    }
                    progress.update(t->index + 1, writer.skipped());
                  }
                  pool.push(t);
                }));
  });

  if (failed) {
    fs::remove_all(partial);
    throw BadSourceError(ErrorKind::kCorruption, fail_source, fail_reason + " (--strict)");
  }
  writer.commit_shard(end);
  progress.finish(end, writer.skipped());
  if (!opt.quiet && writer.skipped() > skips_printed) {
    std::fprintf(stderr, "... and %llu more skipped; all are listed in skipped.jsonl\n",
                 static_cast<unsigned long long>(writer.skipped() - skips_printed));
  }
  if (writer.count() == 0) {
    fs::remove_all(partial);
    throw Error(ErrorKind::kInvalidArgument, src.root,
                "no sample could be decoded (" + std::to_string(writer.skipped()) +
                    " entries skipped)");
  }

  Manifest m;
  m.layout = ragged ? Layout::kRagged : Layout::kFixed;
  m.storage = opt.storage;
  m.height = ragged ? 0 : r.height;
  m.width = ragged ? 0 : r.width;
  m.channels = r.channels;
  m.channel_order = r.channels == 3 ? "RGB" : "L";
  m.count = writer.count();
  m.classes = src.classes;
  m.class_counts.assign(src.classes.size(), 0);
  for (int64_t l : writer.labels()) ++m.class_counts[static_cast<size_t>(l)];
  m.shards = writer.shards();
  m.labels = write_npy(partial, "labels.npy", "<i8", writer.labels().data(), {m.count}, 8);
  m.checksums =
      write_npy(partial, "checksums.npy", "<u8", writer.checksums().data(), {m.count}, 8);
  if (ragged) {
    m.index = write_npy(partial, "ragged-index.npy", "<i8", writer.ragged_index().data(),
                        {m.count, 3}, 8);
  }
  std::string text;
  for (const auto& s : writer.sources()) text += json(s).dump() + "\n";
  m.sources = write_text(partial, "sources.jsonl", text);
  text.clear();
  for (const auto& s : writer.skips()) {
    text += json{{"source", s.source}, {"reason", s.reason}}.dump() + "\n";
  }
  m.skips = write_text(partial, "skipped.jsonl", text);
  m.skipped = writer.skipped();
  m.source.kind = src.kind;
  m.source.root = src.root;
  m.source.labels = src.labels_path;
  m.source.entries = src.entries.size();
  m.source.digest = src.digest;
  m.recipe = r;
  m.tool_version = DSCACHE_VERSION;
  m.created_utc = utc_now();

  for (uint64_t k = 0; k < writer.shard_count(); ++k) fs::remove(partial + "/" + sidecar_name(k));
  fs::remove(fp_path);
  write_manifest(partial, m);  // last: a directory without it is not a cache
  fsync_directory(partial);
  publish(partial, output, replace);

  BuildSummary s;
  s.count = m.count;
  s.skipped = m.skipped;
  s.resumed = resumed;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.output = output;
  return s;
}

}  // namespace dscache
