// free_space_for and decide_space: the numbers behind `dscache build`'s space check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "dscache/disk_space.h"
#include "temp_dir.h"

namespace {

using dscache::decide_space;

constexpr uint64_t kMiB = uint64_t{1} << 20;

}  // namespace

TEST_SUITE("unit") {
  TEST_CASE("decide_space: what is left to write against what is free") {
    struct Case {
      uint64_t estimate, existing, available;
      uint64_t needed;
      bool fits;
    };
    const Case cases[] = {
        {10 * kMiB, 0, 10 * kMiB, 10 * kMiB, true},       // exactly enough
        {10 * kMiB, 0, 10 * kMiB - 1, 10 * kMiB, false},  // one byte short
        {10 * kMiB, 4 * kMiB, 6 * kMiB, 6 * kMiB, true},  // a resume counts what is left
        {10 * kMiB, 4 * kMiB, 5 * kMiB, 6 * kMiB, false},
        {10 * kMiB, 12 * kMiB, 0, 0, true},  // more on disk than estimated: nothing left
        {0, 0, 0, 0, true},
        {UINT64_MAX, 0, UINT64_MAX - 1, UINT64_MAX, false},
    };
    for (const Case& c : cases) {
      CAPTURE(c.estimate);
      CAPTURE(c.existing);
      CAPTURE(c.available);
      const auto d = decide_space(c.estimate, c.existing, c.available);
      CHECK(d.needed == c.needed);
      CHECK(d.fits == c.fits);
    }
  }

  TEST_CASE("free_space_for: a missing path is asked about through its nearest ancestor") {
    dscache::test::TempDir tmp;
    const std::string dir = tmp.path();
    const auto here = dscache::free_space_for(dir);
    CHECK(here.probed == dir);
    CHECK(here.available > 0);
    CHECK(!here.mount_point.empty());
    CHECK(dir.rfind(here.mount_point, 0) == 0);  // the mount point is an ancestor (or itself)
    const auto missing = dscache::free_space_for(dir + "/not/yet/out");
    CHECK(missing.probed == dir);
    CHECK(missing.mount_point == here.mount_point);
    std::ofstream(dir + "/file") << "x";
    CHECK(dscache::free_space_for(dir + "/file/out").probed == dir + "/file");  // ENOTDIR
  }

  TEST_CASE("bytes_under: the blocks of regular files, recursively; 0 for a missing directory") {
    dscache::test::TempDir tmp;
    const std::string dir = tmp.path();
    CHECK(dscache::bytes_under(dir + "/missing") == 0);
    std::filesystem::create_directories(dir + "/a/b");
    std::ofstream(dir + "/one") << std::string(100, 'x');
    std::ofstream(dir + "/a/b/two") << std::string(23, 'y');
    std::filesystem::create_symlink(dir + "/one", dir + "/link");
    const uint64_t block = dscache::free_space_for(dir).block;
    CHECK(block > 0);
    const uint64_t got = dscache::bytes_under(dir);
    CHECK(got >= 123);  // two files of 100 and 23 bytes (the link not counted twice)
    CHECK(got <= 2 * std::max<uint64_t>(block, 4096));
  }
}
