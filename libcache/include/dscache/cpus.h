// How many CPUs this process may use, for the default thread counts of `dscache build`,
// `dscache bench` and `dscache-train`: std::thread::hardware_concurrency() counts the machine's,
// which a Slurm allocation, a container's CPU quota or taskset may cut to a few.
#pragma once

#include <optional>
#include <string>

namespace dscache {

struct CpuBudget {
  unsigned cpus = 1;   // >= 1
  std::string source;  // what set it: "affinity mask", "cgroup CPU quota (PATH)",
                       // "SLURM_CPUS_PER_TASK", or "hardware_concurrency"
};

// The fewest of: the CPUs in the affinity mask (sched_getaffinity), the cgroup CPU quota of this
// process's cgroup and its ancestors (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us,
// rounded up), and SLURM_CPUS_PER_TASK when set to a positive integer.
CpuBudget usable_cpus();

// The pieces, for tests. `quota` and `period` as cpu.max or the v1 files hold them: "max" / "-1"
// is no limit; otherwise ceil(quota / period), at least 1.
std::optional<unsigned> cpus_of_quota(const std::string& quota, const std::string& period);
// The quota of cgroup `rel` (a /proc/self/cgroup path such as "/a/b") and its ancestors under
// the v2 mount `v2_root` or the v1 cpu controller mount `v1_root` (either may not exist): the
// smallest, and the file that set it.
std::optional<std::pair<unsigned, std::string>> cgroup_cpu_quota(const std::string& v2_root,
                                                                 const std::string& v2_rel,
                                                                 const std::string& v1_root,
                                                                 const std::string& v1_rel);

}  // namespace dscache
