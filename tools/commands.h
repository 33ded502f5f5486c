// The dscache subcommands; each parses its flags, calls the library and returns an exit code.
#pragma once

namespace dscache {

// Exit codes shared by every subcommand (documented in docs/USAGE.md).
constexpr int kExitOk = 0;            // success (a build with skipped files is still a success)
constexpr int kExitError = 1;         // I/O error, missing source, anything unexpected
constexpr int kExitUsage = 2;         // bad flag or value
constexpr int kExitBadSource = 3;     // a source file could not be decoded under --strict
constexpr int kExitOutputExists = 4;  // OUTPUT (or an interrupted build of it) already exists
constexpr int kExitCorrupt = 5;       // the cache is corrupt (verify, inspect)
constexpr int kExitLocked = 6;        // another build/merge holds OUTPUT's lock
constexpr int kExitNoSpace = 7;       // out of disk space or over the file size limit (resumable)

int cmd_build(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_merge(int argc, char** argv);

}  // namespace dscache
