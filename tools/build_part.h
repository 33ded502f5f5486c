// `dscache build --part`: which slice of the listing a partitioned build makes, from the command
// line or from the scheduler's environment (Slurm job arrays, Kubernetes Indexed Jobs).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace dscache {

// Part `index` of `count`; count 0 = the whole listing (no --part).
struct PartSpec {
  uint32_t index = 0;  // 0-based, < count
  uint32_t count = 0;  // parts; 0 = not partitioned
  std::string origin;  // how it was chosen, for the stderr line ("SLURM_ARRAY_TASK_ID=2, ...")
};

// Positions [first, end) of an n-entry cache order that part `index` of `count` covers:
// first = index * n / count, end = (index + 1) * n / count (integer division, no overflow).
uint64_t part_first(uint64_t n, uint32_t index, uint32_t count);

// Parses `--part I/N` or `--part auto` (with `parts` = --parts, 0 when absent). `getenv` reads
// the environment (injectable for tests). Throws UsageError naming the option or variable.
PartSpec resolve_part(const std::string& text, uint32_t parts,
                      const std::function<const char*(const char*)>& getenv);

}  // namespace dscache
