// `dscache merge PART_DIR... OUTPUT [--force] [--resume] [--strict]`
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "build_pipeline.h"
#include "cli_util.h"
#include "commands.h"
#include "dscache/lock.h"
#include "merge.h"

namespace dscache {
namespace po = boost::program_options;

int cmd_merge(int argc, char** argv) {
  po::options_description desc(
      "Usage: dscache merge PART_DIR... OUTPUT [options]\n\n"
      "Join the parts of a partitioned build (dscache build --part I/N, one per part 0..N-1, in\n"
      "any order) into the cache a single build with the same options makes. Shards are\n"
      "hard-linked (copied across filesystems) and renumbered, never decoded again.\n\n"
      "Options");
  desc.add_options()("help,h", "show this help")(
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

  MergeOptions opt;
  bool quiet = false;
  try {
    po::variables_map vm;
    store_command_line(argc, argv, all, pos, &vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return kExitOk;
    }
    if (paths.size() < 2) {
      throw UsageError("expected PART_DIR... OUTPUT (see dscache merge --help)");
    }
    opt.output = paths.back();
    paths.pop_back();
    opt.parts = paths;
    opt.force = vm.count("force") > 0;
    opt.resume = vm.count("resume") > 0;
    opt.strict = vm.count("strict") > 0;
    quiet = vm.count("quiet") > 0;
    opt.command = command_line("dscache", argc, argv);
  } catch (const po::error& e) {
    std::fprintf(stderr, "dscache merge: %s\n", e.what());
    return kExitUsage;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "dscache merge: %s\n", e.what());
    return kExitUsage;
  }

  try {
    const MergeSummary s = run_merge(opt);
    if (!quiet) {
      std::printf(
          "merged %llu parts: %llu samples (%llu skipped%s) in %llu shards (%llu "
          "hard-linked, %llu copied) -> %s\n",
          static_cast<unsigned long long>(s.parts), static_cast<unsigned long long>(s.count),
          static_cast<unsigned long long>(s.skipped), s.skipped ? ", see skipped.jsonl" : "",
          static_cast<unsigned long long>(s.shards), static_cast<unsigned long long>(s.linked),
          static_cast<unsigned long long>(s.copied), s.output.c_str());
    }
    return kExitOk;
  } catch (const PartsMismatchError& e) {
    std::fprintf(stderr, "dscache merge: %s\n", e.what());
    return kExitUsage;
  } catch (const BadSourceError& e) {
    std::fprintf(stderr, "dscache merge: %s\n", e.what());
    return kExitBadSource;
  } catch (const OutputExistsError& e) {
    std::fprintf(stderr, "dscache merge: %s\n", e.what());
    return kExitOutputExists;
  } catch (const LockedError& e) {
    std::fprintf(stderr, "dscache merge: %s\n", e.what());
    return kExitLocked;
  } catch (const Error& e) {
    std::fprintf(stderr, "dscache merge: %s\n", e.what());
    if (is_out_of_space(e)) return out_of_space("merge", opt.output);
    return e.kind() == ErrorKind::kCorruption ? kExitCorrupt : kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dscache merge: %s\n", e.what());
    if (is_out_of_space(e)) return out_of_space("merge", opt.output);
    return kExitError;
  }
}

}  // namespace dscache
