#include "build_part.h"

#include <cerrno>
#include <cstdlib>

#include "cli_util.h"

namespace dscache {
namespace {

constexpr uint64_t kMaxParts = 1000000;  // far above any scheduler's array size

// A decimal integer in [0, kMaxParts]; throws UsageError naming `what` otherwise.
uint64_t parse_count(const std::string& text, const std::string& what) {
  if (text.empty() || text.size() > 7 ||
      text.find_first_not_of("0123456789") != std::string::npos || std::stoull(text) > kMaxParts) {
    throw UsageError(what + " '" + text + "': expected an integer 0.." + std::to_string(kMaxParts));
  }
  return std::stoull(text);
}

PartSpec checked(uint64_t index, uint64_t count, const std::string& origin) {
  if (count < 1) throw UsageError(origin + ": the number of parts must be at least 1");
  if (index >= count) {
    throw UsageError(origin + ": part index " + std::to_string(index) + " is not below the " +
                     "number of parts " + std::to_string(count));
  }
  return PartSpec{static_cast<uint32_t>(index), static_cast<uint32_t>(count), origin};
}

}  // namespace

uint64_t part_first(uint64_t n, uint32_t index, uint32_t count) {
  // index * n / count without overflowing: n = q * count + r.
  const uint64_t q = n / count, r = n % count;
  return q * index + r * index / count;
}

PartSpec resolve_part(const std::string& text, uint32_t parts,
                      const std::function<const char*(const char*)>& getenv) {
  if (text != "auto") {
    if (parts != 0) throw UsageError("--parts applies to --part auto only");
    const size_t slash = text.find('/');
    if (slash == std::string::npos) {
      throw UsageError("--part '" + text + "': expected I/N (0 <= I < N) or auto");
    }
    return checked(parse_count(text.substr(0, slash), "--part index"),
                   parse_count(text.substr(slash + 1), "--part count"), "--part " + text);
  }
  if (parts > kMaxParts) {
    throw UsageError("--parts " + std::to_string(parts) + ": expected an integer 1.." +
                     std::to_string(kMaxParts));
  }
  const char* slurm_id = getenv("SLURM_ARRAY_TASK_ID");
  if (slurm_id != nullptr) {
    // Slurm sets, for `--array=MIN-MAX:STEP`, ID (this task's id), COUNT (the number of tasks),
    // MIN, MAX and STEP. Task ids MIN, MIN+STEP, ..., MAX are parts 0, 1, ..., COUNT-1.
    const char* slurm_count = getenv("SLURM_ARRAY_TASK_COUNT");
    const char* slurm_min = getenv("SLURM_ARRAY_TASK_MIN");
    const char* slurm_max = getenv("SLURM_ARRAY_TASK_MAX");
    const char* slurm_step = getenv("SLURM_ARRAY_TASK_STEP");
    if (slurm_count == nullptr) {
      throw UsageError("--part auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not");
    }
    const uint64_t id = parse_count(slurm_id, "SLURM_ARRAY_TASK_ID");
    const uint64_t count = parse_count(slurm_count, "SLURM_ARRAY_TASK_COUNT");
    const uint64_t min = slurm_min ? parse_count(slurm_min, "SLURM_ARRAY_TASK_MIN") : 0;
    const uint64_t step = slurm_step ? parse_count(slurm_step, "SLURM_ARRAY_TASK_STEP") : 1;
    std::string origin =
        "SLURM_ARRAY_TASK_ID=" + std::string(slurm_id) + ", SLURM_ARRAY_TASK_COUNT=" + slurm_count;
    if (slurm_min) origin += ", SLURM_ARRAY_TASK_MIN=" + std::string(slurm_min);
    if (slurm_max) origin += ", SLURM_ARRAY_TASK_MAX=" + std::string(slurm_max);
    if (slurm_step) origin += ", SLURM_ARRAY_TASK_STEP=" + std::string(slurm_step);
    if (step == 0) throw UsageError("--part auto: " + origin + ": the step must be at least 1");
    if (id < min) throw UsageError("--part auto: " + origin + ": the task id is below the minimum");
    if ((id - min) % step != 0) {
      throw UsageError("--part auto: " + origin +
                       ": the task id is not MIN + k * STEP (an array given as a list, such as "
                       "--array=1,3,7, cannot be numbered; use a range MIN-MAX[:STEP])");
    }
    if (slurm_max) {
      const uint64_t max = parse_count(slurm_max, "SLURM_ARRAY_TASK_MAX");
      if (max < min || (max - min) % step != 0 || (max - min) / step + 1 != count) {
        throw UsageError("--part auto: " + origin +
                         ": the task ids are not the range MIN, MIN + STEP, ..., MAX of COUNT "
                         "ids (an array given as a list, such as --array=1,3,7, cannot be "
                         "numbered; use a range MIN-MAX[:STEP])");
      }
    }
    if (parts != 0 && parts != count) {
      throw UsageError("--part auto: --parts " + std::to_string(parts) + " disagrees with " +
                       origin);
    }
    PartSpec spec = checked((id - min) / step, count, "--part auto: " + origin);
    spec.origin = origin;
    return spec;
  }
  const char* k8s_index = getenv("JOB_COMPLETION_INDEX");
  if (k8s_index != nullptr) {
    if (parts == 0) {
      throw UsageError(
          "--part auto: JOB_COMPLETION_INDEX is set; pass --parts N (the Job's "
          "completions) too");
    }
    const std::string origin =
        "JOB_COMPLETION_INDEX=" + std::string(k8s_index) + ", --parts " + std::to_string(parts);
    PartSpec spec =
        checked(parse_count(k8s_index, "JOB_COMPLETION_INDEX"), parts, "--part auto: " + origin);
    spec.origin = origin;
    return spec;
  }
  throw UsageError(
      "--part auto: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor JOB_COMPLETION_INDEX (a "
      "Kubernetes Indexed Job) is set; pass --part I/N instead");
}

}  // namespace dscache
