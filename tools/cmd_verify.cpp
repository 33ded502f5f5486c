// `dscache verify CACHE [--source] [--json] [--threads N]`
#include <boost/program_options.hpp>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "cache_view.h"
#include "cli_util.h"
#include "commands.h"
#include "dscache/atomic_file.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/ingest/image_decode.h"
#include "dscache/ingest/source_decoder.h"
#include "dscache/jpeg.h"

namespace dscache {
namespace po = boost::program_options;
using json = nlohmann::json;

namespace {

struct Problem {
  std::string file;     // cache file (or source path) concerned
  int64_t sample = -1;  // sample index, or -1 for a whole file
  std::string reason;
};

class Checker {
 public:
  explicit Checker(CacheView& c) : c_(c), m_(c.manifest()) {}

  std::vector<Problem> problems;
  uint64_t samples_checked = 0;
  bool decode = true;  // JPEG: decode every stream in full (false with --quick: header only)

  // Records a problem once: a bad side file is met by its size/hash check and by its reader.
  void add(std::string file, int64_t sample, std::string reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!seen_.insert(std::make_tuple(file, sample, reason)).second) return;
    problems.push_back({std::move(file), sample, std::move(reason)});
  }

  // A cache file's name as the other problems give it (DIR/name -> name).
  std::string file_name(const std::string& path) const {
    const std::string prefix = c_.path("");
    return path.compare(0, prefix.size(), prefix) == 0 ? path.substr(prefix.size()) : path;
  }

  // Size and whole-file XXH64 against the manifest. Returns false when the file is unusable.
  bool check_file(const std::string& name, uint64_t bytes, uint64_t hash) {
    FileEntry actual;
    try {
      actual = c_.hash(name);
    } catch (const Error& e) {
      add(name, -1, e.reason());
      return false;
    }
    if (actual.bytes != bytes) {
      add(name, -1,
          "size is " + std::to_string(actual.bytes) + " bytes, manifest says " +
              std::to_string(bytes));
      return false;
    }
    if (actual.xxh64 != hash) add(name, -1, "file checksum differs from the manifest");
    return true;
  }

  void run(bool with_source, int threads) {
    // First the open-time checks, through the very function Cache::open, inspect and Python run
    // (CacheDir::check_open): whatever they refuse, verify reports; the checks below then find
    // the rest (every hash, every sample).
    try {
      c_.files().check_open();
    } catch (const Error& e) {
      add(file_name(e.path()), -1, e.reason());
    }
    bool side_ok = true;
    for (const FileEntry* f : {&m_.labels, &m_.checksums, &m_.sources, &m_.skips, &m_.index}) {
      if (f->file.empty()) continue;  // no index for the fixed layout
      side_ok = check_file(f->file, f->bytes, f->xxh64) && side_ok;
    }
    (void)side_ok;
    // The image's column; every column (row-major) of a cache with fields. Without fields the
    // one column is `sums` itself: verify holds 8 bytes per sample of checksums, not 16.
    std::vector<uint64_t> sums, all;
    try {
      all = c_.checksums();
      const uint64_t cols = m_.checksum_columns();
      if (cols == 1) {
        sums.swap(all);
      } else {
        sums.reserve(static_cast<size_t>(m_.count));
        for (uint64_t i = 0; i < m_.count; ++i) sums.push_back(all[i * cols]);
      }
    } catch (const Error& e) {
      add(m_.checksums.file, -1, e.reason());
    }
    check_fields(all);  // nothing to do without fields (and then `all` is empty)
    // The same validated readers as Cache::open: what it refuses, verify reports. Only checked,
    // so read and let go (labels) or streamed (sources, skips).
    try {
      c_.labels();
    } catch (const Error& e) {
      add(m_.labels.file, -1, e.reason());
    }
    try {
      c_.files().for_each_source([](uint64_t, std::string&&) {});
    } catch (const Error& e) {
      add(m_.sources.file, -1, e.reason());
    }
    try {
      c_.files().for_each_skip([](SkipRecord&&) {});
    } catch (const Error& e) {
      add(m_.skips.file, -1, e.reason());
    }
    if (m_.has_index()) {
      check_indexed(sums);
      if (with_source) check_sources(sums, threads);
      return;
    }
    SampleShape shape{m_.height, m_.width, m_.channels};
    std::vector<uint8_t> buf;
    for (size_t k = 0; k < m_.shards.size(); ++k) {
      const ShardEntry& s = m_.shards[k];
      if (!check_file(s.file, s.bytes, s.xxh64)) continue;
      try {
        c_.shard(k);  // header against the manifest
      } catch (const Error& e) {
        add(s.file, -1, e.reason());
        continue;
      }
      if (sums.empty() && m_.count > 0) continue;  // nothing to compare samples against
      constexpr uint64_t kChunk = 256;
      buf.resize(kChunk * shape.bytes());
      for (uint64_t j = 0; j < s.count; j += kChunk) {
        uint64_t n = std::min(kChunk, s.count - j);
        try {
          c_.read_samples(k, j, n, buf.data());
        } catch (const Error& e) {
          add(s.file, -1, e.reason());
          break;
        }
        for (uint64_t k = 0; k < n; ++k) {
          uint64_t i = s.first + j + k;
          if (xxh64(buf.data() + k * shape.bytes(), shape.bytes()) != sums[i]) {
            add(s.file, static_cast<int64_t>(i), "sample checksum mismatch");
          }
          ++samples_checked;
        }
      }
    }
    if (with_source) check_sources(sums, threads);
  }

  // Every field file (size, XXH64, header, offsets), every sample's value against its checksum
  // column and the writer's rules (check_field_value: boxes inside the image, text UTF-8, floats
  // finite unless the field allows others).
  void check_fields(const std::vector<uint64_t>& all) {
    if (m_.fields.empty()) return;
    const std::vector<IndexRow>* index = nullptr;
    if (m_.has_index()) {
      try {
        index = &c_.index();
      } catch (const Error& e) {
        add(m_.index.file, -1, e.reason());
        return;
      }
    }
    const uint64_t cols = m_.checksum_columns();
    std::vector<uint8_t> value;
    for (size_t k = 0; k < m_.shards.size(); ++k) {
      const ShardEntry& s = m_.shards[k];
      for (size_t f = 0; f < m_.fields.size(); ++f) {
        const FieldSpec& spec = m_.fields[f];
        const FieldFiles& files = s.fields[f];
        bool ok = check_file(files.values.file, files.values.bytes, files.values.xxh64);
        if (!files.offsets.file.empty()) {
          ok = check_file(files.offsets.file, files.offsets.bytes, files.offsets.xxh64) && ok;
        }
        if (!ok) continue;
        FieldShardFile file;
        try {
          file = c_.files().open_field(k, f, index);
        } catch (const Error& e) {
          add(e.path().empty() ? files.values.file : e.path().substr(e.path().rfind('/') + 1), -1,
              e.reason());
          continue;
        }
        const uint64_t fixed =
            file.offsets.empty() ? file.data_bytes / std::max<uint64_t>(1, s.count) : 0;
        const uint64_t row =
            spec.kind == FieldKind::kMask ? element_bytes(spec.dtype) : spec.row_bytes();
        for (uint64_t j = 0; j < s.count; ++j) {
          const uint64_t i = s.first + j;
          const uint64_t at = file.offsets.empty() ? j * fixed : uint64_t(file.offsets[j]) * row;
          const uint64_t n =
              file.offsets.empty() ? fixed : uint64_t(file.offsets[j + 1] - file.offsets[j]) * row;
          value.resize(n);
          try {
            if (n > 0) file.values.read_at(file.data_offset + at, n, value.data());
          } catch (const Error& e) {
            add(files.values.file, static_cast<int64_t>(i), e.reason());
            break;
          }
          if (!all.empty() && xxh64(value.data(), n) != all[i * cols + 1 + f]) {
            add(files.values.file, static_cast<int64_t>(i),
                "field '" + spec.name + "': value checksum mismatch");
            continue;
          }
          // What the writer checked: boxes inside the image, text UTF-8, floats finite.
          const uint32_t h = index ? (*index)[i].height : m_.height;
          const uint32_t w = index ? (*index)[i].width : m_.width;
          try {
            check_field_value(spec, FieldData{value.data(), n}, h, w, "");
          } catch (const Error& e) {
            add(files.values.file, static_cast<int64_t>(i), e.reason());
          }
        }
      }
    }
  }

  // Raw ragged layout and JPEG caches: index rows inside their shards, every sample's checksum
  // (of its stored bytes), and for JPEG every stream's header against its row's size.
  void check_indexed(const std::vector<uint64_t>& sums) {
    const bool jpeg = m_.codec == Codec::kJpeg;
    std::vector<uint8_t> buf, pixels;
    JpegScratch scratch;
    for (size_t k = 0; k < m_.shards.size(); ++k) {
      try {
        c_.shard(k);
      } catch (const Error& e) {
        add(m_.shards[k].file, -1, e.reason());
        for (const auto& s : m_.shards) check_file(s.file, s.bytes, s.xxh64);
        return;
      }
    }
    try {
      c_.index();  // every row against its shard
    } catch (const Error& e) {
      add(m_.index.file, -1, e.reason());
      for (const auto& s : m_.shards) check_file(s.file, s.bytes, s.xxh64);
      return;
    }
    for (uint64_t i = 0; i < m_.count; ++i) {
      const ShardEntry& s = c_.shard_of(i);
      uint32_t h = 0, w = 0;
      try {
        c_.read_stored(i, &buf, &h, &w);
      } catch (const Error& e) {
        add(e.path() == c_.path(m_.index.file) ? m_.index.file : s.file, static_cast<int64_t>(i),
            e.reason());
        continue;
      }
      ++samples_checked;
      if (!sums.empty() && xxh64(buf.data(), buf.size()) != sums[i]) {
        add(s.file, static_cast<int64_t>(i), "sample checksum mismatch");
        continue;
      }
      if (!jpeg) continue;
      try {
        const JpegInfo info = jpeg_info(buf.data(), buf.size());
        if (info.height != h || info.width != w) {
          add(s.file, static_cast<int64_t>(i),
              "JPEG is " + std::to_string(info.height) + "x" + std::to_string(info.width) +
                  ", the index says " + std::to_string(h) + "x" + std::to_string(w));
          continue;
        }
        // The whole stream decoded, as the Loader would: a checksum rewritten over a torn
        // stream or bad Huffman data (libjpeg's warnings are errors) is caught here, not
        // mid-epoch. --quick stops at the header.
        if (decode) {
          pixels.resize(size_t{h} * w * m_.channels);
          jpeg_decode(buf.data(), buf.size(), h, w, m_.channels, pixels.data(), &scratch);
        }
      } catch (const Error& e) {
        add(s.file, static_cast<int64_t>(i), e.reason());
      }
    }
    for (const auto& s : m_.shards) check_file(s.file, s.bytes, s.xxh64);
  }

  // Whether sample i's decoded source pixels give its stored checksum: of the pixels (raw), or of
  // their JPEG encoding at the recipe's quality (deterministic for one libjpeg-turbo).
  // False when the pixels cannot be what was stored (another size).
  bool same_as_stored(uint64_t i, const std::vector<uint8_t>& pixels,
                      std::vector<uint8_t>* encoded) {
    if (m_.codec != Codec::kJpeg) return xxh64(pixels.data(), pixels.size()) == sums_[i];
    uint32_t h = m_.height, w = m_.width;
    if (m_.layout == Layout::kRagged) {  // jpeg-index.npy rows: offset, length, h, w
      h = jpeg_index_[i].height;
      w = jpeg_index_[i].width;
    }
    if (pixels.size() != size_t{h} * w * m_.channels) return false;
    JpegEncodeOptions o;
    o.quality = static_cast<int>(m_.recipe.quality);
    jpeg_encode(pixels.data(), h, w, m_.channels, o, encoded);
    if (xxh64(encoded->data(), encoded->size()) == sums_[i]) return true;
    o.restart_markers = false;  // a cache written before streams had restart markers
    jpeg_encode(pixels.data(), h, w, m_.channels, o, encoded);
    return xxh64(encoded->data(), encoded->size()) == sums_[i];
  }

  // Re-decodes every source with the recorded recipe and compares with the stored checksum.
  void check_sources(const std::vector<uint64_t>& sums, int threads) {
    std::vector<std::string> sources;
    try {
      sources = c_.sources();
    } catch (const Error& e) {
      add(m_.sources.file, -1, e.reason());
      return;
    }
    if (sums.size() != m_.count) return;
    sums_ = sums;
    if (m_.codec == Codec::kJpeg && m_.layout == Layout::kRagged) {
      try {
        jpeg_index_ = c_.index();
      } catch (const Error& e) {
        return;  // reported by check_indexed
      }
    }
    std::unique_ptr<SourceDecoder> dec;
    try {
      dec = std::make_unique<SourceDecoder>(m_, std::move(sources), m_.source.root);
    } catch (const Error& e) {
      add(m_.source.root, -1, e.reason());
      return;
    }
    set_decode_threads(0);
    tbb::task_arena arena(threads > 0 ? threads : tbb::task_arena::automatic);
    arena.execute([&] {
      tbb::parallel_for(
          tbb::blocked_range<uint64_t>(0, m_.count, 64),
          [&](const tbb::blocked_range<uint64_t>& r) {
            std::vector<uint8_t> pixels, encoded;
            std::string reason;
            for (uint64_t i = r.begin(); i != r.end(); ++i) {
              if (!dec->decode(i, &pixels, &reason)) {
                add(dec->path(i), static_cast<int64_t>(i), "source no longer decodes: " + reason);
              } else if (!same_as_stored(i, pixels, &encoded)) {
                add(dec->path(i), static_cast<int64_t>(i),
                    m_.codec == Codec::kJpeg ? "source re-encodes to a different JPEG than stored"
                                             : "source decodes to different pixels than stored");
              }
            }
          });
    });
  }

 private:
  CacheView& c_;
  const Manifest& m_;
  std::mutex mu_;
  std::set<std::tuple<std::string, int64_t, std::string>> seen_;
  std::vector<uint64_t> sums_;        // --source: checksums.npy
  std::vector<IndexRow> jpeg_index_;  // --source on a ragged JPEG cache: the samples' sizes
};

void print_json(const CacheView& c, const Checker& check) {
  json probs = json::array();
  for (const auto& x : check.problems) {
    json j{{"file", x.file}, {"reason", x.reason}};
    if (x.sample >= 0) j["sample"] = x.sample;
    probs.push_back(j);
  }
  std::printf("%s\n", json{{"ok", check.problems.empty()},
                           {"samples", c.manifest().count},
                           {"samples_checked", check.samples_checked},
                           {"shards", c.manifest().shards.size()},
                           {"problems", probs}}
                          .dump(2)
                          .c_str());
}

void print_text(const std::string& dir, const CacheView& c, const Checker& check,
                bool with_source) {
  const auto& p = check.problems;
  constexpr size_t kShown = 100;
  for (size_t i = 0; i < p.size() && i < kShown; ++i) {
    if (p[i].sample >= 0) {
      std::printf("%s: sample %lld: %s\n", p[i].file.c_str(), static_cast<long long>(p[i].sample),
                  p[i].reason.c_str());
    } else {
      std::printf("%s: %s\n", p[i].file.c_str(), p[i].reason.c_str());
    }
  }
  if (p.size() > kShown) std::printf("... and %zu more problems\n", p.size() - kShown);
  if (!p.empty()) {
    std::printf("CORRUPT: %zu problem%s found in %s\n", p.size(), p.size() == 1 ? "" : "s",
                dir.c_str());
    return;
  }
  const bool jpeg = c.manifest().codec == Codec::kJpeg;
  std::printf("OK: %llu samples in %zu shards, every file and sample checksum matches%s%s\n",
              static_cast<unsigned long long>(c.manifest().count), c.manifest().shards.size(),
              !jpeg          ? ""
              : check.decode ? ", every JPEG stream decodes"
                             : ", every JPEG header matches (--quick: not decoded)",
              !with_source ? ""
              : jpeg       ? ", and every source re-encodes to the stored JPEG"
                           : ", and every source decodes to the stored pixels");
}

int verify(int argc, char** argv) {
  po::options_description desc(
      "Usage: dscache verify CACHE [options]\n\n"
      "Check every file and every sample checksum against the manifest; for a JPEG cache,\n"
      "also decode every stream in full (as the Loader would).\n\nOptions");
  std::string dir;
  int threads = 0;
  desc.add_options()("help,h", "show this help")(
      "source", "also re-decode the source files and compare with the stored samples")(
      "threads", po::value(&threads)->default_value(0), "decode threads for --source (0 = all)")(
      "quick", "JPEG caches: check each stream's header only, not a full decode (faster)")(
      "json", "machine-readable output");
  po::variables_map vm;
  if (!parse_cache_args(argc, argv, desc, "verify", &dir, &vm)) return to_int(ExitCode::kOk);
  if (threads < 0) throw UsageError("--threads must be >= 0");
  const bool with_source = vm.count("source") > 0;
  CacheView c(dir);
  Checker check(c);
  check.decode = vm.count("quick") == 0;
  check.run(with_source, threads);
  std::sort(check.problems.begin(), check.problems.end(), [](const Problem& a, const Problem& b) {
    return a.sample != b.sample ? a.sample < b.sample : a.file < b.file;
  });
  if (vm.count("json")) {
    print_json(c, check);
  } else {
    print_text(dir, c, check, with_source);
  }
  return to_int(check.problems.empty() ? ExitCode::kOk : ExitCode::kCorruption);
}

}  // namespace

int cmd_verify(int argc, char** argv) {
  return run_command("dscache verify", [&] { return verify(argc, argv); });
}

}  // namespace dscache
