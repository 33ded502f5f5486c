// Small helpers shared by the subcommands: option parsing of sizes, byte counts and names.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>

#include <optional>
#include <stdexcept>
#include <string>

#include "dscache/enum_table.h"
#include "dscache/exit_codes.h"

namespace dscache {

// Parses a subcommand that takes one positional CACHE plus the options in `desc`. Returns
// false when --help was asked for (the help is then printed). Throws UsageError (a bad option,
// or no CACHE, naming `command`).
bool parse_cache_args(int argc, char** argv,
                      const boost::program_options::options_description& desc,
                      const std::string& command, std::string* cache,
                      boost::program_options::variables_map* vm);

// --s3-endpoint, --local-cache, --local-cache-size: every command accepts them
// (parse_command_line adds them and applies them with set_remote_options); shown by --help.
const boost::program_options::options_description& remote_options_description();

// Parses the command line into `vm` (po::store, then po::notify). Throws UsageError for what
// Boost refuses (its message), and for a negative value of an unsigned option (`--parts -1`,
// `--batch=-2`), which Boost would read as a huge number, naming the option. The remote
// options are parsed with the command's and applied.
void parse_command_line(int argc, char** argv,
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

// Advice after build or merge of `output` failed with ExitCode::kNoSpace (main() ignores SIGXFSZ,
// so a write past the file size limit fails instead of killing the process): says on stderr
// that nothing was published and that the finished work is kept for --resume.
void advise_out_of_space(const char* command, const std::string& output);

// The `dscache` command line as typed, for the lock file ("dscache build src out --force").
std::string command_line(const char* command, int argc, char** argv);

}  // namespace dscache
