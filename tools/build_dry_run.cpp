// `dscache build --dry-run` (build_estimate.h): the estimate and the free space, nothing written.
#include <cstdio>
#include <filesystem>
#include <string>

#include "build_estimate.h"
#include "cli_util.h"
#include "dscache/cache_writer.h"
#include "dscache/disk_space.h"

namespace dscache {
namespace {

void line(const char* key, const std::string& value) {
  std::printf("%-12s%s\n", key, value.c_str());
}

std::string count_of(uint64_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::symlink_status(path, ec));
}

std::string sized(uint64_t bytes) {
  return format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

void dry_run_build(const BuildOptions& opt) {
  const BuildPlan plan = plan_build(opt);
  const BuildRecipe& r = plan.recipe;
  const BuildEstimate est = estimate_build(opt, plan.src, r, plan.first, plan.end);
  const std::string output = absolute_path(opt.output);
  const std::string partial = CacheWriter::partial_dir_for(output);
  const FreeSpace space = free_space_for(partial);
  // A --resume keeps the interrupted build's finished shards: only the rest is to be written.
  const uint64_t kept = opt.resume ? bytes_under(partial) : 0;
  const uint64_t needs = allocated_bytes(est, space.block);
  const SpaceDecision d = decide_space(needs, kept, space.available);

  std::printf("dry run: nothing was written\n");
  line("source:", plan.src.root + " (" + plan.src.kind + ", " +
                      std::to_string(plan.src.entries.size()) + " entries)");
  if (opt.part_count != 0) {
    line("part:", std::to_string(opt.part_index) + "/" + std::to_string(opt.part_count) +
                      ": positions " + std::to_string(plan.first) + ".." +
                      std::to_string(plan.end));
  }
  const bool ragged = opt.layout == Layout::kRagged;
  std::string shape = ragged ? "ragged, shorter side <= " + std::to_string(r.max_side) + ", " +
                                   std::to_string(r.channels) + " channels"
                             : "fixed " + std::to_string(r.height) + "x" + std::to_string(r.width) +
                                   "x" + std::to_string(r.channels);
  shape += ", " + std::string(to_string(opt.storage)) + ", " + to_string(opt.codec);
  if (opt.codec == Codec::kJpeg) shape += " quality " + std::to_string(r.quality);
  line("samples:", std::to_string(est.samples) + " (" + shape + ")");
  if (est.skips) line("skips:", std::to_string(est.skips) + " entries the listing marks bad");
  line("shards:", std::to_string(est.shards) + " (shard size " + format_bytes(r.shard_bytes) + ")");
  line("images:", sized(est.image_bytes) + ", " + est.basis);
  if (!plan.src.fields.empty()) {
    line("fields:", sized(est.field_bytes) + " (" + count_of(plan.src.fields.size(), "field") +
                        ": values and offsets files)");
  }
  line("estimate:",
       sized(est.bytes) + " for OUTPUT: shards, field files, side files and manifest.json");
  line("on disk:", sized(needs) + " at the peak: the " + std::to_string(est.files.size()) +
                       " files and the build's resume state, each in whole " +
                       format_bytes(space.block) + " blocks");
  for (const std::string& note : est.notes) line("note:", note);
  line("output:", output);
  if (exists(output)) {
    line("", "exists: the build needs --force to replace it (or --resume, if it is this build)");
  }
  if (exists(partial)) {
    line("", opt.resume ? "an interrupted build holds " + format_bytes(kept) +
                              " (counted as written: the estimate less it is left to write)"
                        : "an interrupted build is there: --resume continues it, --force "
                          "discards it");
  }
  line("free:", sized(space.available) + " on the filesystem mounted at " + space.mount_point);
  if (d.fits) {
    line("fits:", "yes (" + format_bytes(space.available - d.needed) + " would be left)");
  } else if (!opt.space_check) {
    line("fits:", "no: short by " + format_bytes(d.needed - space.available) +
                      "; with --no-space-check the build starts anyway");
  } else {
    line("fits:",
         "no: short by " + format_bytes(d.needed - space.available) +
             "; the build would refuse to start (exit 7; --no-space-check skips the check)");
  }
}

}  // namespace dscache
