// Small helpers shared by the subcommands: option parsing of sizes and byte counts.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace dscache {

// A bad command line; the message names the offending option. Maps to exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "224" -> 224x224, "256x192" -> H=256, W=192. Throws UsageError naming `option`.
void parse_size(const std::string& text, const std::string& option, uint32_t* height,
                uint32_t* width);

// "1073741824", "512M", "1G", "64KiB" (powers of 1024). Throws UsageError naming `option`.
uint64_t parse_bytes(const std::string& text, const std::string& option);

// Human form of a byte count: "1.50 GiB".
std::string format_bytes(uint64_t bytes);

}  // namespace dscache
