// `dscache build`: claims OUTPUT (dscache/cache_writer.h), lists the source (dscache_ingest),
// resolves the recipe, then decodes in parallel (build_decode) and hands the samples in order
// to the cache writer, which cuts shards, writes the side files and manifest and publishes.
#include "build_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <thread>

#include "build_decode.h"
#include "build_estimate.h"
#include "build_fingerprint.h"
#include "build_notices.h"
#include "build_part.h"
#include "cli_util.h"
#include "dscache/cpus.h"
#include "dscache/crash_point.h"
#include "dscache/disk_space.h"
#include "dscache/ingest/source_list.h"
#include "dscache/jpeg.h"
#include "dscache/sampler.h"
#include "progress.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;

constexpr size_t kSkipsShown = 20;  // skip reasons printed to stderr before "... N more"

// `path` as a message may show it: a NUL byte (a bad entry's, skipped for it) as "\0", so the
// rest of the message is not cut there.
std::string printable(std::string path) {
  for (size_t i = path.find('\0'); i != std::string::npos; i = path.find('\0', i + 2)) {
    path.replace(i, 1, "\\0");
  }
  return path;
}

// The recipe a build of `src` uses: the options resolved against the source (idx sources have a
// native size and one channel), checked. Error(kInvalidArgument) names the flag.
BuildRecipe resolve_recipe(const BuildOptions& opt, const SourceListing& src) {
  BuildRecipe r = opt.recipe;
  const bool ragged = opt.layout == Layout::kRagged;
  if (ragged) {
    if (r.max_side == 0) {
      throw UsageError(
          "--max-side: is required with --layout ragged (the shorter side's limit, e.g. 256)");
    }
    if (opt.size_given) {
      throw UsageError("--size: does not apply to --layout ragged (use --max-side)");
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
    throw UsageError(
        "--size: is required for folder and list sources (e.g. --size 224 or --size 256x192)");
  }
  if (!ragged) r.max_side = 0;
  if (r.alpha == AlphaMode::kKeep) {
    if (r.channels == 1) {
      throw UsageError(
          "--alpha keep: stores RGBA (4 channels), not grey" +
          std::string(opt.channels_given ? " (--channels 1)" : " (the default for an idx source)") +
          "; use --channels 3, or --alpha composite");
    }
    if (opt.codec == Codec::kJpeg) {
      throw UsageError(
          "--alpha keep: JPEG cannot store an alpha channel (--codec jpeg); use --codec raw, or "
          "--alpha composite");
    }
    r.channels = 4;
  }
  if (opt.codec == Codec::kJpeg) {
    if (!jpeg_supported()) {
      throw UsageError(
          "--codec jpeg: this dscache was built without JPEG support (meson feature jpeg)");
    }
    if (r.quality < 1 || r.quality > 100) {
      throw UsageError("--codec: jpeg quality " + std::to_string(r.quality) + ": expected 1..100");
    }
  } else {
    r.quality = 0;
  }
  return r;
}

// What the cache writer is told: the recipe, the classes, the source and the part, and the
// build's own fingerprint (build_fingerprint.h).
CacheWriterOptions writer_options(const BuildOptions& opt, const SourceListing& src,
                                  const BuildRecipe& r, uint64_t first) {
  CacheWriterOptions w;
  w.storage = opt.storage;
  w.layout = opt.layout;
  w.codec = opt.codec;
  w.recipe = r;
  w.classes = src.classes;
  w.fields = src.fields;
  w.source = SourceRecord{src.kind, src.root, src.labels_path, src.entries.size(), src.digest};
  w.force = opt.force;
  w.resume = opt.resume;
  w.command = opt.command;
  w.count_transparent = true;
  const auto fp = build_fingerprint(src, r, opt.storage, opt.codec, opt.part_index, opt.part_count);
  w.fingerprint = fp.dump();
  w.is_this_write = [fp](const Manifest& done) { return build_fingerprint(done) == fp; };
  w.first_position = first;
  if (opt.part_count != 0) {
    const uint64_t n = src.entries.size();
    w.has_part = true;
    w.part = PartRecord{opt.part_index, opt.part_count, first,
                        part_first(n, opt.part_index + 1, opt.part_count) - first};
  }
  return w;
}

// The skips and library warnings a build reports on stderr as it runs and at its end.
class BuildReport {
 public:
  explicit BuildReport(bool quiet) : quiet_(quiet) {}
  void skipped(const std::string& source, const std::string& reason) {
    if (quiet_ || printed_ >= kSkipsShown) return;
    std::fprintf(stderr, "skipped %s: %s\n", source.c_str(), reason.c_str());
    ++printed_;
  }
  void finish(uint64_t skipped, const LibraryWarnings& library_warnings) const {
    if (quiet_) return;
    if (skipped > printed_) {
      std::fprintf(stderr, "... and %llu more skipped; all are listed in skipped.jsonl\n",
                   static_cast<unsigned long long>(skipped - printed_));
    }
    if (library_warnings.total() == 0) return;
    // One line per kind instead of one per file; the samples decoded, so nothing is skipped.
    constexpr size_t kKindsShown = 5;
    const auto& kinds = library_warnings.warnings();
    std::fprintf(stderr,
                 "note: %llu warnings from the image libraries while decoding (not errors: a "
                 "file that could not be decoded is a skip, reported as such):\n",
                 static_cast<unsigned long long>(library_warnings.total()));
    for (size_t i = 0; i < kinds.size() && i < kKindsShown; ++i) {
      std::fprintf(stderr, "  %llux %s\n", static_cast<unsigned long long>(kinds[i].second),
                   kinds[i].first.c_str());
    }
    if (kinds.size() > kKindsShown) {
      std::fprintf(stderr, "  ... and %zu more kinds\n", kinds.size() - kKindsShown);
    }
  }

 private:
  bool quiet_;
  size_t printed_ = 0;
};

// Decodes source positions [writer.position(), end) in parallel and hands them in order to the
// writer. Under --strict the first bad file stops the pipeline: returned as (source, reason).
std::pair<std::string, std::string> decode_into(CacheWriter& writer, const BuildOptions& opt,
                                                const SourceListing& src, const BuildRecipe& r,
                                                uint64_t first, uint64_t end, BuildReport& report) {
  const uint64_t n = src.entries.size();
  const bool ragged = opt.layout == Layout::kRagged;
  // Default: the CPUs this process may use (affinity, cgroup quota, SLURM_CPUS_PER_TASK).
  const int threads = opt.threads > 0 ? opt.threads : static_cast<int>(usable_cpus().cpus);
  std::pair<std::string, std::string> failure;
  Progress progress(end - first, opt.quiet);
  // The cache's order: the source order, or with --shuffle a seeded permutation of it (the same
  // whatever the thread count, and for a resumed build).
  std::vector<uint64_t> order;
  if (r.shuffled) {
    order = build_order(n, r.shuffle_seed);  // over the whole listing, whatever the part
  } else {
    order.resize(n);
    std::iota(order.begin(), order.end(), uint64_t{0});
  }
  LibraryWarnings library_warnings;  // out of stderr while decoding; summarised at the end
  std::vector<FieldData> fields(src.fields.size());
  run_decode_pipeline(SampleDecoder(src, r, ragged, opt.codec), order, writer.position(), end,
                      threads, [&](const Token& t) {
                        const SourceEntry& e = src.entries[t.entry];
                        const std::string where = printable(e.path.empty() ? e.name : e.path);
                        for (size_t f = 0; t.ok && f < fields.size(); ++f) {
                          fields[f] = FieldData{t.fields[f].data(), t.fields[f].size()};
                        }
                        const FieldData* values = fields.empty() ? nullptr : fields.data();
                        if (t.ok && t.transparent) writer.note_transparent();  // this sample's
                        if (t.ok && opt.codec == Codec::kJpeg) {
                          writer.append_encoded(t.stored.data(), t.stored.size(), t.height, t.width,
                                                e.label, e.name, &t.checksum, values);
                        } else if (t.ok) {
                          writer.append(t.pixels.data(), ragged ? t.height : r.height,
                                        ragged ? t.width : r.width, e.label, e.name, &t.checksum,
                                        values);
                        } else if (opt.strict) {
                          failure = {where, t.reason};
                        } else {
                          writer.skip(e.name, t.reason);
                          report.skipped(where, t.reason);
                        }
                        progress.update(t.index + 1 - first, writer.skipped());
                        return failure.first.empty();
                      });
  library_warnings.stop();
  if (failure.first.empty()) {
    progress.finish(end - first, writer.skipped());
    report.finish(writer.skipped(), library_warnings);
  }
  return failure;
}

// Refuses (NotEnoughSpaceError) a build whose estimate, less what `writer` already holds (a
// resumed build's kept shards), exceeds the free space where OUTPUT goes.
void check_space(const BuildOptions& opt, const BuildPlan& plan, const CacheWriter& writer) {
  const BuildEstimate est = estimate_build(opt, plan.src, plan.recipe, plan.first, plan.end);
  const FreeSpace space = free_space_for(writer.partial());
  // What the partial directory holds is written: the fingerprint begin() wrote (counted in the
  // estimate's resume state) and, resumed, the finished shards and their sidecars.
  const uint64_t kept = bytes_under(writer.partial());
  const bool resumed = writer.position() > plan.first;
  const uint64_t needs = allocated_bytes(est, space.block);
  const SpaceDecision d = decide_space(needs, kept, space.available);
  if (d.fits) return;
  std::string what = "about " + format_bytes(needs) + " (dscache build --dry-run shows how)";
  if (resumed) {
    what = format_bytes(d.needed) + ": an estimated " + format_bytes(needs) + " less the " +
           format_bytes(kept) + " the interrupted build already wrote";
  }
  throw NotEnoughSpaceError(ErrorKind::kIOError, writer.output(),
                            "not enough space on the filesystem mounted at " + space.mount_point +
                                ": the build needs " + what + ", " + format_bytes(space.available) +
                                " is free; free some space, or pass --no-space-check to start "
                                "anyway");
}

}  // namespace

BuildPlan plan_build(const BuildOptions& opt) {
  BuildPlan plan;
  SourceOptions so;
  so.labels_file = opt.labels_file;
  so.class_names = opt.class_names;
  so.image_column = opt.image_column;
  so.label_column = opt.label_column;
  so.field_kinds = opt.field_kinds;
  so.field_classes = opt.field_classes;
  so.image_root = opt.image_root;
  so.coco_mask = opt.coco_mask;
  so.confine = opt.confine;
  plan.src = list_source(opt.source, so);
  for (const std::string& notice : plan.src.notices) {
    if (!opt.quiet) std::fprintf(stderr, "note: %s\n", notice.c_str());
  }
  plan.recipe = resolve_recipe(opt, plan.src);
  // --part I/N: positions [first, end) of the cache order (docs/FORMAT.md "Parts").
  const uint64_t n = plan.src.entries.size();
  plan.first = opt.part_count != 0 ? part_first(n, opt.part_index, opt.part_count) : 0;
  plan.end = opt.part_count != 0 ? part_first(n, opt.part_index + 1, opt.part_count) : n;
  return plan;
}

BuildSummary run_build(const BuildOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  // Claimed before the listing: a refusal (locked, OUTPUT exists) comes before a long listing.
  CacheWriterOptions claim_opt;
  claim_opt.force = opt.force;
  claim_opt.resume = opt.resume;
  claim_opt.command = opt.command;
  const auto writer = CacheWriter::claim(opt.output, claim_opt);
  auto summary = [&](const Manifest& m, uint64_t resumed) {
    BuildSummary s;
    s.count = m.count;
    s.skipped = m.skipped;
    s.resumed = resumed;
    s.transparent_known = m.transparent_known;
    s.transparent = m.transparent;
    s.alpha = m.recipe.alpha;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.output = writer->output();
    return s;
  };

  const BuildPlan plan = plan_build(opt);
  const SourceListing& src = plan.src;
  const BuildRecipe& r = plan.recipe;
  crash_point("listed");
  const uint64_t n = src.entries.size();
  const bool partitioned = opt.part_count != 0;
  const uint64_t first = plan.first;
  const uint64_t end = plan.end;
  writer->begin(writer_options(opt, src, r, first));
  if (writer->complete()) {
    if (!opt.quiet) {
      std::fprintf(stderr, "resuming: %s is already complete\n", writer->output().c_str());
    }
    const Manifest m = writer->publish();
    return summary(m, m.count);
  }
  if (writer->finished()) {
    if (!opt.quiet) std::fprintf(stderr, "resuming: the build was complete; publishing it\n");
    const Manifest m = writer->publish();
    return summary(m, m.count);
  }
  if (opt.space_check) {
    try {
      check_space(opt, plan, *writer);
    } catch (const NotEnoughSpaceError&) {
      if (writer->position() == first) writer->abandon();  // nothing kept: leave nothing behind
      throw;
    }
  }
  const uint64_t resumed = writer->count();
  if (opt.resume && writer->position() > first && !opt.quiet) {
    std::fprintf(stderr, "resuming: %llu samples in %llu finished shards kept\n",
                 static_cast<unsigned long long>(resumed),
                 static_cast<unsigned long long>(writer->shard_count()));
  }

  BuildReport report(opt.quiet);
  const auto failure = decode_into(*writer, opt, src, r, first, end, report);
  if (!failure.first.empty()) {
    writer->abandon();
    throw BadSourceError(ErrorKind::kCorruption, failure.first, failure.second + " (--strict)");
  }
  // A part may hold no sample (every entry of its range skipped, or an empty range when N
  // exceeds the listing): it records its skips and merges like any part. A whole build with no
  // sample is refused.
  if (writer->count() == 0 && !partitioned) {
    writer->abandon();
    throw Error(ErrorKind::kInvalidArgument, src.root,
                n == 0 ? std::string("no sample could be decoded: the source lists no entries")
                       : "no sample could be decoded: all " + std::to_string(writer->skipped()) +
                             " of " + std::to_string(n) + " entries were skipped");
  }
  const BuildSummary s = summary(writer->publish(), resumed);
  if (s.transparent > 0 && r.alpha == AlphaMode::kDrop && !opt.quiet) {
    std::fprintf(stderr,
                 "note: %llu of %llu sources have transparent pixels; --alpha drop (the default) "
                 "stored the colour under them (often black). --alpha composite puts them on "
                 "white (composite=R,G,B on another colour); --alpha keep stores RGBA\n",
                 static_cast<unsigned long long>(s.transparent),
                 static_cast<unsigned long long>(s.count));
  }
  return s;
}

}  // namespace dscache
