// Small helpers shared by the subcommands: option parsing of sizes, byte counts and names.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "dscache/enum_table.h"

namespace dscache {

// A bad command line; the message names the offending option. Maps to exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses a subcommand that takes one positional CACHE plus the options in `desc`. Returns
// false when --help was asked for (the help is then printed). Throws po::error or UsageError
// (no CACHE, naming `command`).
bool parse_cache_args(int argc, char** argv,
                      const boost::program_options::options_description& desc,
                      const std::string& command, std::string* cache,
                      boost::program_options::variables_map* vm);

// Parses and stores the command line into `vm` (po::store): as po::store would, but a negative
// value for an unsigned option (`--parts -1`, `--batch=-2`), which Boost reads as a huge number,
// throws UsageError naming the option. Throws po::error on other bad input.
void store_command_line(int argc, char** argv,
                        const boost::program_options::options_description& options,
                        const boost::program_options::positional_options_description& positional,
                        boost::program_options::variables_map* vm);

// "224" -> 224x224, "256x192" -> H=256, W=192. Throws UsageError naming `option`.
void parse_size(const std::string& text, const std::string& option, uint32_t* height,
                uint32_t* width);

// "1073741824", "512M", "1G", "64KiB": dscache/byte_count.h's grammar. Throws UsageError naming
// `option`.
uint64_t parse_bytes(const std::string& text, const std::string& option);

// The value `table` names `text`; otherwise UsageError naming `option` and listing the names.
template <typename E>
E parse_choice(const EnumTable<E>& table, const std::string& text, const std::string& option) {
  if (std::optional<E> v = table.find(text)) return *v;
  throw UsageError(table.unknown(text, option));
}

// Human form of a byte count: "1.50 GiB".
std::string format_bytes(uint64_t bytes);

// True when `e` reports a write that failed for lack of room: ENOSPC (disk full), EDQUOT
// (quota) or EFBIG (the file size limit, `ulimit -f`; main() ignores SIGXFSZ so a write past it
// fails instead of killing the process).
bool is_out_of_space(const std::exception& e);

// Says on stderr that `command` (build or merge) ran out of room and that its finished work is
// kept for --resume; returns kExitNoSpace.
int out_of_space(const char* command, const std::string& output);

// The `dscache` command line as typed, for the lock file ("dscache build src out --force").
std::string command_line(const char* command, int argc, char** argv);

}  // namespace dscache
