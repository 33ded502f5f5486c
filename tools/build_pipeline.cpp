// `dscache build`: resolves the recipe, then runs the stages in order: list the source
// (dscache_ingest), open the partial directory (build_partial), decode in parallel
// (build_decode), write shards in order (build_writer), write the side files and manifest
// (build_finish), publish.
#include "build_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <thread>

#include "build_decode.h"
#include "build_finish.h"
#include "build_notices.h"
#include "build_part.h"
#include "build_partial.h"
#include "build_writer.h"
#include "dscache/ingest/source_list.h"
#include "dscache/jpeg.h"
#include "dscache/lock.h"
#include "dscache/sampler.h"
#include "progress.h"
#include "test_hooks.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;

constexpr size_t kSkipsShown = 20;  // skip reasons printed to stderr before "... N more"

}  // namespace

BuildSummary run_build(const BuildOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  std::string output = absolute_path(opt.output);
  while (output.size() > 1 && output.back() == '/') output.pop_back();
  std::string partial = partial_dir_for(output);

  // One writer per output: the lock file lives beside OUTPUT (the directories are swapped).
  fs::create_directories(fs::path(output).parent_path());
  const auto lock = PathLock::acquire(output, opt.command);
  recover_interrupted(output, partial);
  const OutputPlan plan = check_output(output, partial, opt.force, opt.resume);
  const bool replace = plan.replace;

  SourceListing src = list_source(opt.source, SourceOptions{opt.labels_file, opt.class_names});
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
  SampleShape shape{r.height, r.width, r.channels};
  // Raw ragged and every JPEG cache write byte shards capped at shard_bytes; raw fixed shards
  // hold a whole number of samples.
  const bool byte_shards = ragged || opt.codec == Codec::kJpeg;
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
  uint64_t per_shard = byte_shards ? 0 : std::max<uint64_t>(1, r.shard_bytes / shape.bytes());

  crash_point("listed");
  const auto fp = build_fingerprint(src, r, opt.storage, opt.codec, opt.part_index, opt.part_count);
  auto summary = [&](const Manifest& m, uint64_t resumed) {
    BuildSummary s;
    s.count = m.count;
    s.skipped = m.skipped;
    s.resumed = resumed;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.output = output;
    return s;
  };
  if (plan.maybe_done) {
    // --resume and no interrupted build: done if OUTPUT is this very build (killed after its
    // publish), refused as any existing OUTPUT otherwise.
    Manifest done;
    try {
      done = read_manifest(output);
    } catch (const Error&) {
      throw_output_exists(output);
    }
    if (build_fingerprint(done) != fp) {
      if (!opt.force) throw_output_exists(output);
    } else {
      if (!opt.quiet) std::fprintf(stderr, "resuming: %s is already complete\n", output.c_str());
      return summary(done, done.count);
    }
  }
  // The partial directory and its fingerprint: a resumed build must be the same build.
  open_partial(partial, fp);
  crash_point("partial-open");
  if (path_exists(partial + "/manifest.json")) {
    // Killed after the manifest was written: only the publish is left.
    const Manifest m = finish_partial(partial);
    if (!opt.quiet) std::fprintf(stderr, "resuming: the build was complete; publishing it\n");
    publish(partial, output, replace);
    return summary(m, m.count);
  }

  // --part I/N: positions [first, end) of the cache order below (docs/FORMAT.md "Parts").
  const uint64_t n = src.entries.size();
  const bool partitioned = opt.part_count != 0;
  const uint64_t first = partitioned ? part_first(n, opt.part_index, opt.part_count) : 0;
  const uint64_t end = partitioned ? part_first(n, opt.part_index + 1, opt.part_count) : n;

  BuildWriter writer(partial, opt.storage, shape, per_shard, byte_shards ? r.shard_bytes : 0,
                     opt.codec);
  uint64_t start = std::max(first, writer.adopt_finished());
  uint64_t resumed = writer.count();
  if (opt.resume && start > first && !opt.quiet) {
    std::fprintf(stderr, "resuming: %llu samples in %llu finished shards kept\n",
                 static_cast<unsigned long long>(resumed),
                 static_cast<unsigned long long>(writer.shard_count()));
  }

  int threads = opt.threads > 0
                    ? opt.threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool failed = false;  // --strict met a bad file
  std::string fail_source, fail_reason;
  Progress progress(end - first, opt.quiet);
  size_t skips_printed = 0;

  // The cache's order: the source order, or with --shuffle a seeded permutation of it (the same
  // whatever the thread count, and for a resumed build).
  std::vector<uint64_t> order;
  if (r.shuffled) {
    order = build_order(n, r.shuffle_seed);  // over the whole listing, whatever the part
  } else {
    order.resize(n);
    std::iota(order.begin(), order.end(), uint64_t{0});
  }
  LibraryWarnings library_warnings;  // out of stderr while decoding; summarised below
  run_decode_pipeline(
      SampleDecoder(src, r, ragged, opt.codec), order, start, end, threads, [&](const Token& t) {
        const SourceEntry& e = src.entries[t.entry];
        if (t.ok) {
          writer.add_sample(t, e);
        } else if (opt.strict) {
          failed = true;
          fail_source = e.path.empty() ? e.name : e.path;
          fail_reason = t.reason;
        } else {
          writer.add_skip(e, t.reason);
          if (!opt.quiet && skips_printed < kSkipsShown) {
            std::fprintf(stderr, "skipped %s: %s\n", (e.path.empty() ? e.name : e.path).c_str(),
                         t.reason.c_str());
            ++skips_printed;
          }
        }
        progress.update(t.index + 1 - first, writer.skipped());
        return !failed;
      });

  library_warnings.stop();
  if (failed) {
    remove_tree(partial);
    throw BadSourceError(ErrorKind::kCorruption, fail_source, fail_reason + " (--strict)");
  }
  writer.commit_shard(end);
  progress.finish(end - first, writer.skipped());
  if (!opt.quiet && writer.skipped() > skips_printed) {
    std::fprintf(stderr, "... and %llu more skipped; all are listed in skipped.jsonl\n",
                 static_cast<unsigned long long>(writer.skipped() - skips_printed));
  }
  if (!opt.quiet && library_warnings.total() > 0) {
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
  // A part may hold no sample (every entry of its range skipped, or an empty range when N
  // exceeds the listing): it records its skips and merges like any part. A whole build with no
  // sample is refused.
  if (writer.count() == 0 && !partitioned) {
    remove_tree(partial);
    throw Error(ErrorKind::kInvalidArgument, src.root,
                n == 0 ? std::string("no sample could be decoded: the source lists no entries")
                       : "no sample could be decoded: all " + std::to_string(writer.skipped()) +
                             " of " + std::to_string(n) + " entries were skipped");
  }

  PartRecord part{opt.part_index, opt.part_count, first, end - first};
  const Manifest m = finish_cache(partial, src, r, opt.storage, ragged, opt.codec, writer,
                                  partitioned ? &part : nullptr);
  publish(partial, output, replace);
  return summary(m, resumed);
}

}  // namespace dscache
