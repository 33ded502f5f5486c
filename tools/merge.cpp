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

#include "build_part.h"
#include "build_pipeline.h"
#include "dscache/atomic_file.h"
#include "dscache/cache_dir.h"
#include "dscache/cache_writer.h"
#include "dscache/checksum.h"
#include "dscache/file.h"
#include "dscache/ingest/source_list.h"
#include "dscache/manifest.h"
#include "dscache/remote.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Part {
  std::string dir;  // absolute path
  Manifest m;
  std::shared_ptr<const CacheDir> files;  // every file of the part is read through it
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
  std::string fields;  // what makes two parts' fields the same: every member of every spec
  for (const FieldSpec& f : m.fields) {
    fields +=
        (fields.empty() ? "" : ",") + f.name + ":" + to_string(f.kind) + ":" + to_string(f.dtype);
    for (uint32_t d : f.shape) fields += ":" + std::to_string(d);
    if (!f.rows_of.empty()) fields += ":rows_of=" + f.rows_of;
    for (const auto& c : f.classes) fields += ":" + c;
  }
  return {
      {"storage", to_string(m.storage)},
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
      {"alpha", r.alpha != AlphaMode::kComposite
                    ? std::string(to_string(r.alpha))
                    : "composite=" + std::to_string(r.background[0]) + "," +
                          std::to_string(r.background[1]) + "," + std::to_string(r.background[2])},
      {"classes", classes},
      {"fields", fields},
      {"format_version", std::to_string(m.format_version)},
      {"tool_version", m.tool_version}};
}

std::string part_name(const Manifest& m) {
  return "part " + std::to_string(m.part.index) + "/" + std::to_string(m.part.count);
}

// --parts N (expect): every part directory holds a finished part, else one Error(kNotFound)
// naming each that does not: unfinished (its interrupted build's partial directory is there, for
// --resume) or missing. Reads nothing but the file system's entries; a remote part is checked
// when it is opened.
void check_parts_finished(const std::vector<std::string>& dirs, uint32_t expect,
                          const std::string& output) {
  const std::string n = std::to_string(expect);
  if (dirs.size() != expect) {
    throw PartsMismatchError(ErrorKind::kInvalidArgument, "--parts " + n,
                             std::to_string(dirs.size()) + " PART_DIRs given; give the " + n +
                                 " parts 0.." + std::to_string(expect - 1) + ", in that order");
  }
  std::string list, what;
  for (uint32_t i = 0; i < expect; ++i) {
    if (is_remote_location(dirs[i])) continue;
    const std::string dir = strip_slashes(dirs[i]);
    std::error_code ec;
    if (fs::exists(dir + "/manifest.json", ec)) continue;
    const std::string partial = CacheWriter::partial_dir_for(dir);
    list += (list.empty() ? "" : ",") + std::to_string(i);
    const bool interrupted = fs::is_directory(partial, ec);
    what += (what.empty() ? "" : "; ") + ("part " + std::to_string(i)) +
            (interrupted ? " unfinished (an interrupted build in " + partial +
                               ": rerun its build with --resume)"
                         : " missing (no " + dir + "/manifest.json)");
  }
  if (list.empty()) return;
  const bool one = list.find(',') == std::string::npos;
  throw Error(ErrorKind::kNotFound, output,
              (one ? "part " : "parts ") + list + " of " + n + " did not finish: " + what +
                  "; build " + (one ? "it" : "them") + " with dscache build --part I/" + n +
                  " --resume, then merge again (nothing was written)");
}

// Reads every part and checks they make one cache; returns them sorted by part index. With
// `expect` (--parts), dirs[i] must be part i/expect.
std::vector<Part> load_parts(const std::vector<std::string>& dirs, uint32_t expect,
                             const std::string& output) {
  std::vector<Part> parts;
  for (const auto& d : dirs) {
    Part p{strip_slashes(d), Manifest{}, nullptr};
    p.files = CacheDir::open(p.dir);
    p.m = p.files->manifest();
    if (!p.m.has_part) {
      throw PartsMismatchError(ErrorKind::kInvalidArgument, p.dir,
                               "not a part of a partitioned build (its manifest has no part; "
                               "build parts with dscache build --part I/N)");
    }
    const uint32_t place = static_cast<uint32_t>(parts.size());
    if (expect != 0 && (p.m.part.index != place || p.m.part.count != expect)) {
      throw PartsMismatchError(ErrorKind::kInvalidArgument, p.dir,
                               "is " + part_name(p.m) + "; --parts " + std::to_string(expect) +
                                   " takes part " + std::to_string(place) + "/" +
                                   std::to_string(expect) + " here (PART_DIRs in part order)");
    }
    p.files->check_open();  // what every reader checks first: a damaged part is refused by name
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

// Side file `f` of part `p`, opened through its CacheDir, checked against its manifest entry
// (size and XXH64) before anything is taken from it.
File checked_file(const Part& p, const FileEntry& f) {
  File file = p.files->open_file(f.file, f.bytes);
  if (hash_file(file).xxh64 != f.xxh64) {
    throw Error(ErrorKind::kCorruption, p.dir + "/" + f.file,
                "does not match its manifest entry (size or XXH64); run dscache verify");
  }
  return file;
}

// What a part contributes to the side files, read through CacheDir's validated accessors:
// compact arrays (8 bytes a label or checksum, 24 or 32 an index row); its sources are streamed
// (for_each_source), never held for the whole part.
struct PartRecords {
  std::vector<int64_t> labels;
  std::vector<uint64_t> checksums;
  std::vector<SkipRecord> skips;
  std::vector<int64_t> index;  // rows as the index file holds them (3 or 4 columns)
};

PartRecords read_records(const Part& p) {
  const Manifest& m = p.m;
  for (const FileEntry* f : {&m.labels, &m.checksums, &m.sources, &m.skips}) checked_file(p, *f);
  PartRecords r;
  r.labels = p.files->labels();
  r.checksums = p.files->checksums();
  p.files->for_each_source([](uint64_t, std::string&&) {});  // checked: read again when merged
  r.skips = p.files->skips();
  if (m.has_index()) {
    checked_file(p, m.index);
    const bool jpeg = m.codec == Codec::kJpeg;
    const std::vector<IndexRow> rows = p.files->index();
    r.index.reserve(rows.size() * (jpeg ? 4 : 3));
    for (const IndexRow& row : rows) {
      r.index.push_back(static_cast<int64_t>(row.offset));
      if (jpeg) r.index.push_back(static_cast<int64_t>(row.length));
      r.index.push_back(row.height);
      r.index.push_back(row.width);
    }
  }
  return r;
}

// The side-file rows of shard `k` of a part, but its sources.
ShardRecords shard_records(const Manifest& m, const PartRecords& r, size_t k) {
  const ShardEntry& e = m.shards[k];
  const size_t columns = m.has_index() ? (m.codec == Codec::kJpeg ? 4 : 3) : 0;
  auto slice = [&](const auto& v, size_t width) {
    using V = std::decay_t<decltype(v)>;
    return V(v.begin() + static_cast<ptrdiff_t>(e.first * width),
             v.begin() + static_cast<ptrdiff_t>((e.first + e.count) * width));
  };
  return ShardRecords{
      slice(r.labels, 1), slice(r.checksums, m.checksum_columns()), {}, slice(r.index, columns)};
}

// Part `p`'s shards, then its skips, to the writer, one record each (`next`: the records so
// far; a resumed merge has position() of them already). Its records are read (and checked)
// again here, one part at a time, and its sources streamed, a shard's worth at a time: what
// the merge holds grows with the largest part's compact arrays and shard, not with the cache.
void add_part(CacheWriter& writer, const Part& p, uint64_t* next, MergeSummary* sum) {
  const Manifest& m = p.m;
  const PartRecords records = read_records(p);
  size_t k = 0;
  std::vector<std::string> sources;  // of shard k
  // Adds shard k once its sources are all read (an empty shard at once), and any empty ones
  // after it.
  auto add_ready = [&] {
    while (k < m.shards.size() && sources.size() == m.shards[k].count) {
      if ((*next)++ >= writer.position()) {
        // The part's count goes with its first shard (and stays with it on a resume).
        if (k == 0) writer.note_transparent(m.transparent);
        ShardRecords r = shard_records(m, records, k);
        r.sources = std::move(sources);
        const bool copied = writer.add_shard(*p.files, k, r);
        sum->linked += !copied;
        sum->copied += copied;
      }
      sources.clear();
      ++k;
    }
  };
  add_ready();
  p.files->for_each_source([&](uint64_t, std::string&& s) {
    sources.push_back(std::move(s));
    add_ready();
  });
  for (const SkipRecord& s : records.skips) {
    if ((*next)++ < writer.position()) continue;
    writer.skip(s.source, s.reason);
  }
}

// `have` (an existing OUTPUT's manifest) is the merge `want` describes: the same listing,
// options, samples and shards (by size and XXH64); side files are derived from the same parts.
bool same_merge(const Manifest& have, const Manifest& want) {
  if (have.has_part || have.count != want.count || have.skipped != want.skipped ||
      have.class_counts != want.class_counts || options_of(have) != options_of(want) ||
      have.transparent_known != want.transparent_known || have.transparent != want.transparent ||
      have.shards.size() != want.shards.size() || have.source.digest != want.source.digest ||
      have.source.root != want.source.root || have.source.entries != want.source.entries) {
    return false;
  }
  for (size_t i = 0; i < have.shards.size(); ++i) {
    const ShardEntry &a = have.shards[i], &b = want.shards[i];
    if (a.file != b.file || a.first != b.first || a.count != b.count || a.bytes != b.bytes ||
        a.xxh64 != b.xxh64 || a.fields.size() != b.fields.size()) {
      return false;
    }
    for (size_t f = 0; f < a.fields.size(); ++f) {
      const FieldFiles &x = a.fields[f], &y = b.fields[f];
      if (x.values.file != y.values.file || x.values.xxh64 != y.values.xxh64 ||
          x.offsets.file != y.offsets.file || x.offsets.xxh64 != y.offsets.xxh64) {
        return false;
      }
    }
  }
  return true;
}

// The merged cache's manifest as the parts make it (shards renumbered, counts summed): what an
// existing OUTPUT must equal to be this merge. Side-file entries are left as the first part's.
Manifest planned_manifest(const std::vector<Part>& parts) {
  Manifest m = parts.front().m;
  m.has_part = false;
  m.part = PartRecord{};
  m.count = m.skipped = m.transparent = 0;
  m.shards.clear();
  std::fill(m.class_counts.begin(), m.class_counts.end(), 0);
  for (const Part& p : parts) {
    for (const ShardEntry& s : p.m.shards) {
      ShardEntry e = s;
      for (size_t f = 0; f < e.fields.size(); ++f) {
        e.fields[f].values.file = field_file_name(m.fields[f].name, m.shards.size(), false);
        if (!e.fields[f].offsets.file.empty()) {
          e.fields[f].offsets.file = field_file_name(m.fields[f].name, m.shards.size(), true);
        }
      }
      e.file = shard_file_name(m.storage, m.shards.size());
      e.first = m.count;
      m.count += e.count;
      m.shards.push_back(e);
    }
    m.skipped += p.m.skipped;
    m.transparent_known = m.transparent_known && p.m.transparent_known;
    m.transparent += p.m.transparent;
    for (size_t c = 0; c < m.class_counts.size(); ++c) m.class_counts[c] += p.m.class_counts[c];
  }
  return m;
}

// What the cache writer is told: the parts' recipe, classes and source, and a fingerprint of
// the parts (their directories and manifests): a resumed merge must join the same parts.
CacheWriterOptions writer_options(const MergeOptions& opt, const std::vector<Part>& parts,
                                  const Manifest& want) {
  const Manifest& ref = parts.front().m;
  CacheWriterOptions w;
  w.storage = ref.storage;
  w.layout = ref.layout;
  w.codec = ref.codec;
  w.recipe = ref.recipe;
  w.recipe.channels = ref.channels;
  w.classes = ref.classes;
  w.fields = ref.fields;
  w.source = ref.source;
  w.tool_version = ref.tool_version;
  w.force = opt.force;
  w.resume = opt.resume;
  w.command = opt.command;
  w.count_transparent = want.transparent_known;  // every part counted its transparent sources
  json fp{{"merge", json::array()}};
  for (const Part& p : parts) {
    fp["merge"].push_back({p.dir, hex64(hash_file(p.files->open_file("manifest.json")).xxh64)});
  }
  w.fingerprint = fp.dump();
  w.is_this_write = [want](const Manifest& done) { return same_merge(done, want); };
  return w;
}

}  // namespace

MergeSummary run_merge(const MergeOptions& opt) {
  const std::string output = strip_slashes(opt.output);
  if (opt.expect_parts != 0) check_parts_finished(opt.parts, opt.expect_parts, output);
  CacheWriterOptions claim;
  claim.force = opt.force;
  claim.resume = opt.resume;
  claim.command = opt.command;
  const auto writer = CacheWriter::claim(output, claim);  // one writer per output, first
  std::vector<Part> parts = load_parts(opt.parts, opt.expect_parts, output);
  if (opt.strict) {
    for (const Part& p : parts) {
      if (p.m.skipped == 0) continue;
      std::string first = checked_file(p, p.m.skips).read_all(p.m.skips.bytes);
      first = first.substr(0, first.find('\n'));
      throw BadSourceError(ErrorKind::kCorruption, p.dir,
                           part_name(p.m) + " skipped " + std::to_string(p.m.skipped) +
                               " entries (first: " + first + ") (--strict)");
    }
  }
  const Manifest want = planned_manifest(parts);
  if (want.count == 0) {
    // As a single build of the listing would: refused, and before anything is written.
    throw Error(ErrorKind::kInvalidArgument, output,
                "no sample could be decoded: all " + std::to_string(want.skipped) + " of " +
                    std::to_string(want.source.entries) + " entries were skipped in the parts");
  }
  MergeSummary sum;
  sum.parts = parts.size();
  sum.shards = want.shards.size();
  sum.output = output;
  // Everything a refusal can find is checked before the partial directory exists, so that a
  // refused merge leaves nothing behind (a later merge needs no --force): each part's shards
  // (regular files inside it, of their manifest's size and header) and side files (size, XXH64
  // and content).
  for (const Part& p : parts) {
    for (size_t k = 0; k < p.m.shards.size(); ++k) {
      p.files->open_shard(k);
      for (size_t f = 0; f < p.m.fields.size(); ++f) p.files->open_field(k, f);
    }
    read_records(p);  // checked, then let go: add_part reads each part again when it merges it
  }
  writer->begin(writer_options(opt, parts, want));
  if (!writer->complete() && !writer->finished()) {
    // Records in order: each part's shards, then its skips.
    uint64_t next = 0;
    for (const Part& p : parts) add_part(*writer, p, &next, &sum);
  }
  const Manifest m = writer->publish();  // the fingerprint goes last (cache_writer.h)
  sum.count = m.count;
  sum.skipped = m.skipped;
  return sum;
}

}  // namespace dscache
