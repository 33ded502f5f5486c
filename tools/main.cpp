// dscache: build, inspect and verify pre-decoded image dataset caches. main() only dispatches.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "commands.h"

namespace {

using dscache::ExitCode;
using dscache::to_int;

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: dscache <command> [options]\n\n"
      "commands:\n"
      "  build SOURCE OUTPUT   decode a dataset once into npy/HDF5 shards\n"
      "  merge PART... OUTPUT  join the parts of a partitioned build (build --part) into one\n"
      "  inspect CACHE         summarize a cache; show or export samples\n"
      "  verify CACHE          check every file and sample checksum\n"
      "  bench CACHE           measure serving speed against memcpy and per-sample decode\n\n"
      "'dscache <command> --help' shows a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  // Past the file size limit (ulimit -f) a write then fails with EFBIG, which build and merge
  // report as out of space and leave resumable, instead of the process dying with no message.
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    usage(stderr);
    return to_int(ExitCode::kUsage);
  }
  std::string cmd = argv[1];
  if (cmd == "build" || cmd == "merge") {
    const int rc = cmd == "build" ? dscache::cmd_build(argc - 1, argv + 1)
                                  : dscache::cmd_merge(argc - 1, argv + 1);
    if (rc != to_int(ExitCode::kOk)) {
      // Everything was cleaned up when the error unwound. Skip the exit handlers: HDF5 1.10's
      // closes the files still open at exit, and one whose flush failed (disk full) makes it
      // crash (SIGSEGV in H5F__close_cb) after the error was reported.
      std::fflush(nullptr);
      std::_Exit(rc);
    }
    return rc;
  }
  if (cmd == "inspect") return dscache::cmd_inspect(argc - 1, argv + 1);
  if (cmd == "verify") return dscache::cmd_verify(argc - 1, argv + 1);
  if (cmd == "bench") return dscache::cmd_bench(argc - 1, argv + 1);
  if (cmd == "--version" || cmd == "version") {
    std::printf("dscache %s\n", DSCACHE_VERSION);
    return to_int(ExitCode::kOk);
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(stdout);
    return to_int(ExitCode::kOk);
  }
  std::fprintf(stderr, "dscache: unknown command '%s'\n\n", cmd.c_str());
  usage(stderr);
  return to_int(ExitCode::kUsage);
}
