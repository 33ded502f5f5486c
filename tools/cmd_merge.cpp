// `dscache merge PART_DIR... OUTPUT [--parts N] [--force] [--resume] [--strict]`
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "build_pipeline.h"
#include "cli_util.h"
#include "commands.h"
#include "dscache/remote.h"
#include "merge.h"

namespace dscache {
namespace po = boost::program_options;

namespace {

// Parses the command line into `opt`. Returns false when --help was asked for (and printed).
// Throws UsageError naming the option.
bool parse_merge_command_line(int argc, char** argv, MergeOptions* opt, bool* quiet) {
  po::options_description desc(
      "Usage: dscache merge PART_DIR... OUTPUT [options]\n\n"
      "Join the parts of a partitioned build (dscache build --part I/N, one per part 0..N-1, in\n"
      "any order) into the cache a single build with the same options makes. Shards are\n"
      "hard-linked (copied across filesystems) and renumbered, never decoded again.\n\n"
      "Options");
  desc.add_options()("help,h", "show this help")(
      "parts", po::value(&opt->expect_parts),
      "N: the PART_DIRs are parts 0..N-1 in this order; first check that each finished, "
      "else name every missing or unfinished part (exit 1) and write nothing")(
      "strict", "refuse parts that skipped source entries (exit 3)")(
      "force", "replace an existing cache at OUTPUT / discard an interrupted merge")(
      "resume", "continue an interrupted merge of OUTPUT")("quiet,q", "no summary line");
  std::vector<std::string> paths;
  po::options_description hidden;
  hidden.add_options()("path", po::value(&paths));
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description pos;
  pos.add("path", -1);
  po::variables_map vm;
  parse_command_line(argc, argv, all, pos, &vm);
  if (vm.count("help")) {
    std::cout << desc << "\n" << remote_options_description() << "\n";
    return false;
  }
  if (vm.count("parts") && opt->expect_parts == 0) {
    throw UsageError("--parts 0: expected the number of parts, at least 1");
  }
  if (paths.size() < 2) {
    throw UsageError("expected PART_DIR... OUTPUT (see dscache merge --help)");
  }
  opt->output = paths.back();
  if (is_remote_location(opt->output)) {
    throw UsageError("OUTPUT " + opt->output +
                     ": merge writes a local directory (the parts may "
                     "be remote); build to s3:// from a local source to upload a cache");
  }
  paths.pop_back();
  opt->parts = paths;
  opt->force = vm.count("force") > 0;
  opt->resume = vm.count("resume") > 0;
  opt->strict = vm.count("strict") > 0;
  *quiet = vm.count("quiet") > 0;
  opt->command = command_line("dscache", argc, argv);
  return true;
}

void print_summary(const MergeSummary& s) {
  std::printf(
      "merged %llu parts: %llu samples (%llu skipped%s) in %llu shards (%llu "
      "hard-linked, %llu copied) -> %s\n",
      static_cast<unsigned long long>(s.parts), static_cast<unsigned long long>(s.count),
      static_cast<unsigned long long>(s.skipped), s.skipped ? ", see skipped.jsonl" : "",
      static_cast<unsigned long long>(s.shards), static_cast<unsigned long long>(s.linked),
      static_cast<unsigned long long>(s.copied), s.output.c_str());
}

}  // namespace

int cmd_merge(int argc, char** argv) {
  MergeOptions opt;
  return run_command(
      "dscache merge",
      [&] {
        bool quiet = false;
        if (!parse_merge_command_line(argc, argv, &opt, &quiet)) return to_int(ExitCode::kOk);
        const MergeSummary s = run_merge(opt);
        if (!quiet) print_summary(s);
        return to_int(ExitCode::kOk);
      },
      [&](const std::exception&, ExitCode code) {
        if (code == ExitCode::kNoSpace) advise_out_of_space("merge", opt.output);
      });
}

}  // namespace dscache
