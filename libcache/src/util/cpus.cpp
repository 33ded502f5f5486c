// usable_cpus: affinity, cgroup quota, Slurm.
#include "dscache/cpus.h"

#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace dscache {

namespace {

// The file's first line; "" when it cannot be read (a controller that is not there).
std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// One quota file pair at `dir`: v2 "QUOTA PERIOD" in cpu.max, v1 two files.
std::optional<unsigned> quota_at(const std::string& dir, bool v2) {
  if (v2) {
    std::istringstream s(first_line(dir + "/cpu.max"));
    std::string quota, period;
    if (!(s >> quota >> period)) return std::nullopt;
    return cpus_of_quota(quota, period);
  }
  return cpus_of_quota(first_line(dir + "/cpu.cfs_quota_us"),
                       first_line(dir + "/cpu.cfs_period_us"));
}

// The smallest quota of `rel` and its ancestors under `root`.
std::optional<std::pair<unsigned, std::string>> smallest_quota(const std::string& root,
                                                               std::string rel, bool v2) {
  std::optional<std::pair<unsigned, std::string>> best;
  if (root.empty()) return best;
  while (true) {
    const std::string dir = root + (rel == "/" ? "" : rel);
    if (const auto q = quota_at(dir, v2); q && (!best || *q < best->first)) {
      best = std::make_pair(*q, dir + (v2 ? "/cpu.max" : "/cpu.cfs_quota_us"));
    }
    if (rel.empty() || rel == "/") break;
    const size_t slash = rel.rfind('/');
    rel = slash == 0 || slash == std::string::npos ? "/" : rel.substr(0, slash);
  }
  return best;
}

// This process's cgroup paths from /proc/self/cgroup: the v2 one ("0::PATH") and the v1 cpu
// controller's ("N:...cpu...:PATH").
void own_cgroups(std::string* v2, std::string* v1) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) *v2 = path;
    std::istringstream cs(controllers);
    for (std::string c; std::getline(cs, c, ',');) {
      if (c == "cpu") *v1 = path;
    }
  }
}

}  // namespace

std::optional<unsigned> cpus_of_quota(const std::string& quota, const std::string& period) {
  if (quota.empty() || quota == "max" || quota == "-1") return std::nullopt;
  char* end = nullptr;
  const double q = std::strtod(quota.c_str(), &end);
  if (*end != '\0' || !(q > 0)) return std::nullopt;
  const double p = std::strtod(period.c_str(), &end);
  if (*end != '\0' || !(p > 0)) return std::nullopt;
  return static_cast<unsigned>(std::max(1.0, std::ceil(q / p)));
}

std::optional<std::pair<unsigned, std::string>> cgroup_cpu_quota(const std::string& v2_root,
                                                                 const std::string& v2_rel,
                                                                 const std::string& v1_root,
                                                                 const std::string& v1_rel) {
  auto v2 = v2_rel.empty() ? std::nullopt : smallest_quota(v2_root, v2_rel, true);
  auto v1 = v1_rel.empty() ? std::nullopt : smallest_quota(v1_root, v1_rel, false);
  if (v2 && (!v1 || v2->first <= v1->first)) return v2;
  return v1;
}

CpuBudget usable_cpus() {
  CpuBudget b;
  b.cpus = std::max(1u, std::thread::hardware_concurrency());
  b.source = "hardware_concurrency";
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0 && static_cast<unsigned>(n) <= b.cpus) {
      b.cpus = static_cast<unsigned>(n);
      b.source = "affinity mask";
    }
  }
  std::string v2, v1;
  own_cgroups(&v2, &v1);
  if (const auto q = cgroup_cpu_quota("/sys/fs/cgroup", v2, "/sys/fs/cgroup/cpu", v1);
      q && q->first < b.cpus) {
    b.cpus = q->first;
    b.source = "cgroup CPU quota (" + q->second + ")";
  }
  if (const char* s = std::getenv("SLURM_CPUS_PER_TASK"); s && *s) {
    char* end = nullptr;
    const long n = std::strtol(s, &end, 10);
    if (*end == '\0' && n > 0 && static_cast<unsigned long>(n) < b.cpus) {
      b.cpus = static_cast<unsigned>(n);
      b.source = "SLURM_CPUS_PER_TASK";
    }
  }
  return b;
}

}  // namespace dscache
