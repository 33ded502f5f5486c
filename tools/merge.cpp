#include "merge.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "build_finish.h"
#include "build_part.h"
#include "build_partial.h"
#include "build_pipeline.h"
#include "dscache/atomic_file.h"
#include "dscache/cache_dir.h"
#include "dscache/checksum.h"
#include "dscache/file.h"
#include "dscache/ingest/source_list.h"
#include "dscache/lock.h"
#include "dscache/manifest.h"
#include "dscache/npy.h"
#include "dscache/shard.h"
#include "test_hooks.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Part {
  std::string dir;  // absolute path
  Manifest m;
};

std::string strip_slashes(std::string p) {
  p = absolute_path(p);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// The options that change the bytes of a sample or shard, as (name, value) for messages.
std::vector<std::pair<std::string, std::string>> options_of(const Manifest& m) {
  const BuildRecipe& r = m.recipe;
  std::string classes;
  for (const auto& c : m.classes) classes += (classes.empty() ? "" : ",") + c;
  return {{"storage", to_string(m.storage)},
          {"layout", to_string(m.layout)},
          {"codec", to_string(m.codec)},
          {"quality", std::to_string(r.quality)},
          {"size", std::to_string(r.height) + "x" + std::to_string(r.width)},
          {"channels", std::to_string(m.channels)},
          {"max_side", std::to_string(r.max_side)},
          {"resize", to_string(r.resize)},
          {"reduced_decode", r.reduced_decode ? "on" : "off"},
          {"max_pixels", std::to_string(r.max_pixels)},
          {"shard_bytes", std::to_string(r.shard_bytes)},
          {"shuffle", r.shuffled ? std::to_string(r.shuffle_seed) : "none"},
          {"classes", classes},
          {"format_version", std::to_string(m.format_version)},
          {"tool_version", m.tool_version}};
}

std::string part_name(const Manifest& m) {
  return "part " + std::to_string(m.part.index) + "/" + std::to_string(m.part.count);
}

// Reads every part and checks they make one cache; returns them sorted by part index.
std::vector<Part> load_parts(const std::vector<std::string>& dirs, const std::string& output) {
  std::vector<Part> parts;
  for (const auto& d : dirs) {
    Part p{strip_slashes(d), Manifest{}};
    p.m = read_manifest(p.dir);
    if (!p.m.has_part) {
      throw PartsMismatchError(ErrorKind::kInvalidArgument, p.dir,
                               "not a part of a partitioned build (its manifest has no part; "
                               "build parts with dscache build --part I/N)");
    }
    parts.push_back(std::move(p));
  }
  const Part& ref = parts.front();
  const SourceRecord& rs = ref.m.source;
  const auto ref_options = options_of(ref.m);
  for (const Part& p : parts) {
    const SourceRecord& s = p.m.source;
    if (s.kind != rs.kind || s.root != rs.root || s.labels != rs.labels ||
        s.entries != rs.entries || s.digest != rs.digest) {
      throw PartsMismatchError(ErrorKind::kInvalidArgument, p.dir,
                               "part from another listing: " + s.root + " (" +
                                   std::to_string(s.entries) + " entries, digest " +
                                   hex64(s.digest) + ") vs " + rs.root + " (" +
                                   std::to_string(rs.entries) + " entries, digest " +
                                   hex64(rs.digest) + ") in " + ref.dir);
    }
    const auto options = options_of(p.m);
    for (size_t i = 0; i < options.size(); ++i) {
      if (options[i].second != ref_options[i].second) {
        throw PartsMismatchError(ErrorKind::kInvalidArgument, p.dir,
                                 "options differ: " + options[i].first + " is " +
                                     options[i].second + " here, " + ref_options[i].second +
                                     " in " + ref.dir);
      }
    }
    if (p.m.part.count != ref.m.part.count) {
      throw PartsMismatchError(ErrorKind::kInvalidArgument, p.dir,
                               "options differ: built as " + part_name(p.m) + ", " + ref.dir +
                                   " as " + part_name(ref.m));
    }
  }
  std::stable_sort(parts.begin(), parts.end(),
                   [](const Part& a, const Part& b) { return a.m.part.index < b.m.part.index; });
  const uint32_t count = ref.m.part.count;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i].m.part.index == parts[i + 1].m.part.index) {
      throw PartsMismatchError(ErrorKind::kInvalidArgument, parts[i + 1].dir,
                               part_name(parts[i].m) + " given twice: here and in " + parts[i].dir);
    }
  }
  for (uint32_t i = 0; i < count; ++i) {
    if (i >= parts.size() || parts[i].m.part.index != i) {
      throw PartsMismatchError(ErrorKind::kInvalidArgument, output,
                               "missing part " + std::to_string(i) + "/" + std::to_string(count) +
                                   " (" + std::to_string(parts.size()) + " of " +
                                   std::to_string(count) + " parts given)");
    }
    const uint64_t first = part_first(rs.entries, i, count);
    const uint64_t end = part_first(rs.entries, i + 1, count);
    const PartRecord& pr = parts[i].m.part;
    if (pr.first != first || pr.first + pr.entries != end) {
      throw PartsMismatchError(
          ErrorKind::kInvalidArgument, parts[i].dir,
          part_name(parts[i].m) + " covers positions [" + std::to_string(pr.first) + ", " +
              std::to_string(pr.first + pr.entries) + "), expected [" + std::to_string(first) +
              ", " + std::to_string(end) + "): an overlap or gap with its neighbours");
    }
  }
  return parts;
}

std::string read_checked(const std::string& dir, const FileEntry& f) {
  const std::string path = dir + "/" + f.file;
  // Opened like Cache::open opens it: a regular file inside the part, of the manifest's size
  // (checked before reading), never a FIFO or a symlink out.
  const std::string bytes = CacheDir::open(dir)->open_file(f.file, f.bytes).read_all(f.bytes);
  if (xxh64(bytes.data(), bytes.size()) != f.xxh64) {
    throw Error(ErrorKind::kCorruption, path,
                "does not match its manifest entry (size or XXH64); run dscache verify");
  }
  return bytes;
}

// The array bytes of a part's .npy side file (checked against its manifest entry).
std::string npy_data(const std::string& dir, const FileEntry& f) {
  const std::string bytes = read_checked(dir, f);
  const NpyHeader h = parse_npy_header(bytes.data(), bytes.size(), dir + "/" + f.file);
  return bytes.substr(h.data_offset);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// Checks part shard `src` as the merge will take it: a regular file, not a symlink (link()
// would copy the link itself, dangling or leading out of the output, and copying a FIFO would
// block), of its manifest's size. Returns it open.
File open_part_shard(const std::string& src, const ShardEntry& e) {
  File f = File::open(src, FollowSymlinks::kNo);
  if (f.size() != e.bytes) {
    throw Error(ErrorKind::kCorruption, src,
                "is " + std::to_string(f.size()) + " bytes, its manifest says " +
                    std::to_string(e.bytes) + "; run dscache verify");
  }
  return f;
}

// Copies `from` (open, `e.bytes` long) to `dst` through a temp file renamed into place. Done
// here rather than with std::filesystem::copy_file, which reports a short copy onto a full disk
// as EIO: a write error keeps its errno (ENOSPC, EDQUOT, EFBIG: exit 7) and names the file.
void copy_shard(const File& from, const std::string& src, const std::string& dst,
                const ShardEntry& e) {
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  std::string buf(static_cast<size_t>(std::min<uint64_t>(kChunk, std::max<uint64_t>(e.bytes, 1))),
                  '\0');
  AtomicFile out(dst);  // removes its temp file unless committed: a failed copy leaves nothing
  for (uint64_t done = 0; done < e.bytes;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), e.bytes - done);
    from.read_at(done, n, buf.data());
    out.write(buf.data(), static_cast<size_t>(n));
    done += n;
  }
  const FileEntry got = out.commit();
  if (got.bytes != e.bytes || got.xxh64 != e.xxh64) {
    ::unlink(dst.c_str());
    throw Error(ErrorKind::kCorruption, src,
                "does not match its manifest entry (size or XXH64); run dscache verify");
  }
}

// Puts part shard `src` at `dst`: kept when already there (a resumed merge), else hard-linked,
// else (another filesystem) copied. Returns 0 kept, 1 linked, 2 copied.
int place_shard(const std::string& src, const std::string& dst, const ShardEntry& e) {
  const File from = open_part_shard(src, e);
  if (path_exists(dst)) {
    if (same_file(src, dst)) return 0;
    const FileEntry have = hash_file(dst);
    if (have.bytes == e.bytes && have.xxh64 == e.xxh64) return 0;
    fs::remove(dst);
  }
  if (::link(src.c_str(), dst.c_str()) == 0) return 1;
  if (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != ENOTSUP) {
    throw_errno(dst, "cannot hard-link " + src);
  }
  copy_shard(from, src, dst, e);
  return 2;
}

// `have` (an existing OUTPUT's manifest) is the merge `want` describes: the same listing,
// options, samples and shards (by size and XXH64); side files are derived from the same parts.
bool same_merge(const Manifest& have, const Manifest& want) {
  if (have.has_part || have.count != want.count || have.skipped != want.skipped ||
      have.class_counts != want.class_counts || options_of(have) != options_of(want) ||
      have.shards.size() != want.shards.size() || have.source.digest != want.source.digest ||
      have.source.root != want.source.root || have.source.entries != want.source.entries) {
    return false;
  }
  for (size_t i = 0; i < have.shards.size(); ++i) {
    const ShardEntry &a = have.shards[i], &b = want.shards[i];
    if (a.file != b.file || a.first != b.first || a.count != b.count || a.bytes != b.bytes ||
        a.xxh64 != b.xxh64) {
      return false;
    }
  }
  return true;
}

}  // namespace

MergeSummary run_merge(const MergeOptions& opt) {
  std::string output = strip_slashes(opt.output);
  const std::string partial = partial_dir_for(output);
  fs::create_directories(fs::path(output).parent_path());
  const auto lock = PathLock::acquire(output, opt.command);  // one writer per output
  std::vector<Part> parts = load_parts(opt.parts, output);
  if (opt.strict) {
    for (const Part& p : parts) {
      if (p.m.skipped == 0) continue;
      std::string first = read_checked(p.dir, p.m.skips);
      first = first.substr(0, first.find('\n'));
      throw BadSourceError(ErrorKind::kCorruption, p.dir,
                           part_name(p.m) + " skipped " + std::to_string(p.m.skipped) +
                               " entries (first: " + first + ") (--strict)");
    }
  }
  recover_interrupted(output, partial);
  const OutputPlan plan = check_output(output, partial, opt.force, opt.resume);
  const bool replace = plan.replace;

  // A resumed merge must join the same parts: their directories and manifests.
  json fp{{"merge", json::array()}};
  for (const Part& p : parts) {
    fp["merge"].push_back({p.dir, hex64(hash_file(p.dir + "/manifest.json").xxh64)});
  }
  Manifest m = parts.front().m;
  m.has_part = false;
  m.part = PartRecord{};
  m.count = m.skipped = 0;
  m.shards.clear();
  std::fill(m.class_counts.begin(), m.class_counts.end(), 0);
  std::vector<std::string> wanted{kFingerprintFile};
  for (const Part& p : parts) {
    for (const ShardEntry& s : p.m.shards) {
      ShardEntry e = s;
      e.file = shard_file_name(m.storage, m.shards.size());
      e.first = m.count;
      m.count += e.count;
      wanted.push_back(e.file);
      m.shards.push_back(e);
    }
    m.skipped += p.m.skipped;
    for (size_t c = 0; c < m.class_counts.size(); ++c) m.class_counts[c] += p.m.class_counts[c];
  }
  if (m.count == 0) {
    // As a single build of the listing would: refused, and before anything is written.
    throw Error(ErrorKind::kInvalidArgument, output,
                "no sample could be decoded: all " + std::to_string(m.skipped) + " of " +
                    std::to_string(m.source.entries) + " entries were skipped in the parts");
  }
  MergeSummary sum;
  sum.parts = parts.size();
  sum.shards = m.shards.size();
  sum.output = output;
  if (plan.maybe_done) {
    // --resume and no interrupted merge: done if OUTPUT is this merge (killed after its
    // publish), refused as any existing OUTPUT otherwise.
    Manifest done;
    try {
      done = read_manifest(output);
    } catch (const Error&) {
      throw_output_exists(output);
    }
    if (same_merge(done, m)) {
      sum.count = done.count;
      sum.skipped = done.skipped;
      return sum;
    }
    if (!opt.force) throw_output_exists(output);
  }
  // Everything a refusal can find is checked before the partial directory exists, so that a
  // refused merge leaves nothing behind (a later merge needs no --force): each part's shards
  // (regular files of their manifest's size) and side files (size and XXH64).
  for (const Part& p : parts) {
    for (const ShardEntry& s : p.m.shards) open_part_shard(p.dir + "/" + s.file, s);
  }
  std::string labels, checksums, index, sources, skips;
  for (const Part& p : parts) {
    labels += npy_data(p.dir, p.m.labels);
    checksums += npy_data(p.dir, p.m.checksums);
    if (m.has_index()) index += npy_data(p.dir, p.m.index);
    sources += read_checked(p.dir, p.m.sources);
    skips += read_checked(p.dir, p.m.skips);
  }

  open_partial(partial, fp);
  crash_point("partial-open");

  // Anything else in the partial directory is a temp file of an interrupted run (or the side
  // files and manifest of one killed before its publish: written again, the same bytes).
  for (const auto& ent : fs::directory_iterator(partial)) {
    const std::string name = ent.path().filename().string();
    if (std::find(wanted.begin(), wanted.end(), name) == wanted.end()) fs::remove_all(ent.path());
  }

  const char* kill = std::getenv("DSCACHE_TEST_KILL_AFTER_SHARDS");  // test hook, as build's
  const uint64_t kill_after = kill ? std::strtoull(kill, nullptr, 10) : 0;
  size_t g = 0;
  for (const Part& p : parts) {
    for (const ShardEntry& s : p.m.shards) {
      const int how = place_shard(p.dir + "/" + s.file, partial + "/" + m.shards[g].file, s);
      sum.linked += how == 1;
      sum.copied += how == 2;
      ++g;
      crash_point("shard-placed");
      if (kill_after != 0 && sum.linked + sum.copied == kill_after) std::raise(SIGKILL);
    }
  }

  auto npy = [&](const FileEntry& like, const std::string& descr, std::vector<uint64_t> shape,
                 const std::string& data) {
    write_npy_file(partial + "/" + like.file, descr, shape, data.data(), data.size());
    FileEntry e = hash_file(partial + "/" + like.file);
    e.file = like.file;
    crash_point("side-file");
    return e;
  };
  auto text = [&](const FileEntry& like, const std::string& data) {
    FileEntry e = write_file_atomic(partial + "/" + like.file, data.data(), data.size());
    e.file = like.file;
    crash_point("side-file");
    return e;
  };
  m.labels = npy(m.labels, "<i8", {m.count}, labels);
  m.checksums = npy(m.checksums, "<u8", {m.count}, checksums);
  if (m.has_index()) {
    const uint64_t columns = m.codec == Codec::kJpeg ? 4 : 3;
    m.index = npy(m.index, "<i8", {m.count, columns}, index);
  }
  m.sources = text(m.sources, sources);
  m.skips = text(m.skips, skips);
  m.created_utc = utc_now();

  write_manifest(partial, m);  // last: a directory without it is not a cache
  crash_point("manifest-written");
  fsync_directory(partial);
  publish(partial, output, replace);  // the fingerprint goes last (build_partial.h)

  sum.count = m.count;
  sum.skipped = m.skipped;
  return sum;
}

}  // namespace dscache
