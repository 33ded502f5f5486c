// Free space and the space check's arithmetic (dscache/disk_space.h).
#include "dscache/disk_space.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "dscache/error.h"

namespace dscache {
namespace {

namespace fs = std::filesystem;

// The highest ancestor of `p` (an existing absolute path) on the same device.
std::string mount_point_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return p.string();
  fs::path top = p;
  while (top.has_parent_path() && top.parent_path() != top) {
    struct stat up {};
    if (::stat(top.parent_path().c_str(), &up) != 0 || up.st_dev != st.st_dev) break;
    top = top.parent_path();
  }
  return top.string();
}

}  // namespace

FreeSpace free_space_for(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec).lexically_normal();
  if (ec) throw Error(ErrorKind::kIOError, path, "cannot make the path absolute: " + ec.message());
  if (p.has_filename() == false && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  struct statvfs vfs {};
  while (::statvfs(p.c_str(), &vfs) != 0) {
    // A missing path (or one under a file, ENOTDIR) is asked about through its parent.
    if ((errno != ENOENT && errno != ENOTDIR) || p == p.root_path()) {
      throw Error(ErrorKind::kIOError, path,
                  "cannot read the free space of " + p.string() + ": " + std::strerror(errno));
    }
    p = p.parent_path();
  }
  FreeSpace out;
  out.probed = p.string();
  out.mount_point = mount_point_of(p);
  out.available = static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
  out.block = static_cast<uint64_t>(vfs.f_frsize);
  return out;
}

SpaceDecision decide_space(uint64_t estimate, uint64_t existing, uint64_t available) {
  SpaceDecision d;
  d.needed = estimate > existing ? estimate - existing : 0;
  d.fits = d.needed <= available;
  return d;
}

uint64_t bytes_under(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return 0;
  uint64_t total = 0;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

}  // namespace dscache
