// usable_cpus: the thread default of build, bench and the trainer (affinity, cgroup quota, Slurm).
#include <doctest/doctest.h>
#include <sched.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "dscache/cpus.h"
#include "temp_dir.h"

namespace {

using dscache::cgroup_cpu_quota;
using dscache::cpus_of_quota;

void put(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text << "\n";
}

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("cpus: a CPU quota is ceil(quota / period); max, -1 and junk are no limit") {
    struct Case {
      const char* quota;
      const char* period;
      unsigned cpus;  // 0: no limit
    };
    const Case cases[] = {{"200000", "100000", 2},
                          {"150000", "100000", 2},
                          {"50000", "100000", 1},
                          {"1000", "100000", 1},
                          {"max", "100000", 0},
                          {"-1", "100000", 0},
                          {"", "", 0},
                          {"12x", "100000", 0},
                          {"100000", "0", 0}};
    for (const Case& c : cases) {
      CAPTURE(c.quota);
      const auto q = cpus_of_quota(c.quota, c.period);
      CHECK(q.value_or(0) == c.cpus);
    }
  }

  TEST_CASE("cpus: the smallest quota of a cgroup and its ancestors, v2 and v1") {
    dscache::test::TempDir tmp;
    const std::string v2 = tmp.path() + "/v2", v1 = tmp.path() + "/v1";
    put(v2 + "/cpu.max", "max 100000");
    put(v2 + "/job/cpu.max", "300000 100000");  // the parent: 3 CPUs
    put(v2 + "/job/step/cpu.max", "max 100000");
    auto q = cgroup_cpu_quota(v2, "/job/step", "", "");
    REQUIRE(q.has_value());
    CHECK(q->first == 3);
    CHECK(q->second == v2 + "/job/cpu.max");
    put(v1 + "/pod/cpu.cfs_quota_us", "150000");
    put(v1 + "/pod/cpu.cfs_period_us", "100000");
    q = cgroup_cpu_quota(v2, "/job/step", v1, "/pod");  // v1 says 2: the smaller wins
    REQUIRE(q.has_value());
    CHECK(q->first == 2);
    CHECK(q->second == v1 + "/pod/cpu.cfs_quota_us");
    CHECK_FALSE(cgroup_cpu_quota(v2, "/", v1 + "/nothing", "/").has_value());
  }

  TEST_CASE("cpus: the affinity mask and SLURM_CPUS_PER_TASK cut the default") {
    cpu_set_t saved;
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    const char* slurm = std::getenv("SLURM_CPUS_PER_TASK");
    const std::string slurm_saved = slurm ? slurm : "";
    ::unsetenv("SLURM_CPUS_PER_TASK");
    const dscache::CpuBudget all = dscache::usable_cpus();
    CHECK(all.cpus >= 1);
    // One CPU of the mask (the first allowed one): taskset's view.
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &saved)) {
        CPU_SET(c, &one);
        break;
      }
    }
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    const dscache::CpuBudget pinned = dscache::usable_cpus();
    REQUIRE(sched_setaffinity(0, sizeof saved, &saved) == 0);
    CHECK(pinned.cpus == 1);
    if (all.cpus > 1) CHECK(pinned.source == "affinity mask");
    ::setenv("SLURM_CPUS_PER_TASK", "1", 1);
    const dscache::CpuBudget slurm_one = dscache::usable_cpus();
    ::setenv("SLURM_CPUS_PER_TASK", "100000", 1);  // more than the mask: the mask wins
    const dscache::CpuBudget slurm_many = dscache::usable_cpus();
    if (slurm_saved.empty()) {
      ::unsetenv("SLURM_CPUS_PER_TASK");
    } else {
      ::setenv("SLURM_CPUS_PER_TASK", slurm_saved.c_str(), 1);
    }
    CHECK(slurm_one.cpus == 1);
    if (all.cpus > 1) CHECK(slurm_one.source == "SLURM_CPUS_PER_TASK");
    CHECK(slurm_many.cpus == all.cpus);
  }
}
