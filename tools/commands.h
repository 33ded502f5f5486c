// The dscache subcommands; each parses its flags, calls the library and returns an exit code of
// the one table of both programs (dscache/exit_codes.h, docs/OPERATIONS.md "Exit codes").
#pragma once

#include "dscache/exit_codes.h"

namespace dscache {

int cmd_build(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_merge(int argc, char** argv);

}  // namespace dscache
