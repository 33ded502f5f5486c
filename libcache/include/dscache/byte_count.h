// parse_byte_count: the one grammar for byte counts a user types (--shard-size, --window-bytes).
#pragma once

#include <cstdint>
#include <string_view>

namespace dscache {

// A positive decimal count with an optional unit, powers of 1024, case as written:
//   "" or "B" (bytes), "K", "k" or "KiB", "M" or "MiB", "G" or "GiB", "T" or "TiB".
// "65536", "512M", "1G" and "64KiB" are byte counts; "0", "1.5G", "1 G", "1GB", "-1", "+1", "1m"
// and anything past 2^64 - 1 bytes are not. Throws Error(kInvalidArgument, "", reason) whose
// reason names `field`: "--shard-size '1.5G': expected a positive byte count such as ...".
uint64_t parse_byte_count(std::string_view text, std::string_view field);

}  // namespace dscache
