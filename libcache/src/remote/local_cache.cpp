// The local cache's files (remote/local_cache.h): locks, temporary downloads, sizes, eviction.
#include "remote/local_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <vector>

#include "dscache/error.h"
#include "dscache/manifest.h"
#include "remote/mirror.h"

namespace dscache {
namespace remote {
namespace local {

namespace {

constexpr const char* kPartTag = ".part-";

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

}  // namespace

bool ofd_lock(int fd, short type, bool wait, const std::string& path, off_t byte) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = byte;
  fl.l_len = 1;
  for (;;) {
    if (::fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0) return true;
    if (errno == EINTR) continue;
    if (!wait && (errno == EAGAIN || errno == EACCES)) return false;
    throw_errno(path, "lock");
  }
}

// Opens and locks `path` (created when missing), making sure the lock is on the file that is
// at `path` now: an evictor removes a lock file while holding its write lock, and whoever opened
// the old one before that holds a lock nobody else can see, so it retries.
int open_locked(const std::string& path, short type, bool wait) {
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw_errno(path, "open lock file");
    if (!ofd_lock(fd, type, wait, path)) {
      ::close(fd);
      return -1;
    }
    struct stat held {
    }, now{};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
        held.st_dev == now.st_dev) {
      return fd;
    }
    ::close(fd);  // removed (evicted) between open and lock: take the new one
  }
}

bool exists(const std::string& path, uint64_t* size) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  return true;
}

// A download's temporary name: ".<file>.part-<pid>-<n>-<bytes>", so that whoever counts the
// local cache's bytes counts what it will hold once complete.
std::string part_name(const std::string& file, uint64_t bytes) {
  static std::atomic<uint64_t> counter{0};
  return "." + file + kPartTag + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
         "-" + std::to_string(bytes);
}

// A temporary file's final size (0 when its name does not say) and whether its writer is gone:
// its process no longer exists and it was not written for a while (a killed download).
uint64_t part_bytes(const std::string& name, const struct stat& st, bool* stale) {
  const size_t tag = name.rfind(kPartTag);
  const size_t last = name.rfind('-');
  *stale = false;
  if (tag == std::string::npos || last == std::string::npos || last < tag) return 0;
  const long pid = std::strtol(name.c_str() + tag + std::strlen(kPartTag), nullptr, 10);
  const uint64_t bytes = std::strtoull(name.c_str() + last + 1, nullptr, 10);
  *stale = pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH &&
           st.st_mtime + 10 < ::time(nullptr);
  return bytes;
}

// Removes the temporary files in `dir` whose writer is gone (killed downloads): never trusted.
// A live download's (another process fetching a shard of this copy) is left alone.
void remove_dead_parts(const std::string& dir) {
  for (const std::string& name : entries(dir)) {
    const size_t tag = name.rfind(kPartTag);
    if (tag == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + tag + std::strlen(kPartTag), nullptr, 10);
    if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
      ::unlink((dir + "/" + name).c_str());
    }
  }
}

// Bytes of the regular files directly in `dir` (a copy is flat: manifest names are plain); a
// download counts at its final size, and a killed one is removed.
uint64_t dir_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const std::string& name : entries(dir)) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    uint64_t size = static_cast<uint64_t>(st.st_size);
    if (name.find(kPartTag) != std::string::npos) {
      bool stale = false;
      const uint64_t final_bytes = part_bytes(name, st, &stale);
      if (stale) {
        ::unlink(path.c_str());
        continue;
      }
      size = std::max(size, final_bytes);
    }
    total += size;
  }
  return total;
}

void remove_dir(const std::string& dir) {
  for (const std::string& name : entries(dir)) ::unlink((dir + "/" + name).c_str());
  ::rmdir(dir.c_str());
}

void make_dirs(const std::string& dir) {
  std::string at;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    at = dir.substr(0, pos);
    if (at.empty()) continue;
    if (::mkdir(at.c_str(), 0755) != 0 && errno != EEXIST) throw_errno(at, "mkdir");
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error(ErrorKind::kIOError, dir, "the local cache is not a directory");
  }
}

// A copy directory's name: two 16-digit hex digests joined by '-'.
bool is_copy_name(const std::string& name) {
  if (name.size() != 33 || name[16] != '-') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (i == 16) continue;
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// What make_room may evict: a whole copy nobody holds, or one shard file of a copy whose
// readers take shards one by one (nobody holds it whole), which nobody holds either.
struct Unit {
  std::string copy;  // the copy directory's name
  std::string file;  // a shard file in it; "" for the whole copy
  uint64_t bytes = 0;
  int64_t used = 0;  // last opened (a copy: its lock file's mtime; a shard: its own), seconds
};

int64_t mtime(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_mtime) : 0;
}

// The shard files the copy `name` names (its manifest; names are immutable: the directory is
// named after the manifest's hash, so each is read once per process).
std::vector<std::string> copy_shards(const std::string& local, const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::vector<std::string>> known;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(name);
    if (it != known.end()) return it->second;
  }
  std::vector<std::string> files;
  const std::string mpath = local + "/" + name + "/manifest.json";
  const int fd = ::open(mpath.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return files;  // not written yet: nothing of it to evict but the copy
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  try {
    for (const ShardEntry& e : manifest_from_json(text, mpath).shards) files.push_back(e.file);
  } catch (const Error&) {
    return {};  // a copy being written; its files are never evicted one by one
  }
  std::lock_guard<std::mutex> lock(mu);
  known[name] = files;
  return files;
}

// Makes room for `need` more bytes under `budget` in `local`, evicting the least recently used
// units (Unit) nobody holds. `whole_self`: a whole copy being made, not a candidate, whose
// present files count `self_bytes` ("" and 0 when a streamed shard is fetched: its own copy's
// files count and may go like any other's). Called under the budget lock. Returns false when
// even with everything that may go gone the need does not fit; *held_bytes then says how much
// others hold.
bool make_room(const std::string& local, const std::string& whole_self, uint64_t budget,
               uint64_t need, uint64_t self_bytes, MirrorStats* stats, uint64_t* held_bytes) {
  std::vector<Unit> units;
  uint64_t used = self_bytes;
  for (const std::string& name : entries(local)) {
    if (!is_copy_name(name) || name == whole_self) continue;
    const std::string dir = local + "/" + name;
    Unit c;
    c.copy = name;
    c.bytes = dir_bytes(dir);
    c.used = mtime(dir + kLockSuffix);
    used += c.bytes;
    units.push_back(c);
    for (const std::string& file : copy_shards(local, name)) {
      Unit u;
      u.copy = name;
      u.file = file;
      if (!exists(dir + "/" + file, &u.bytes)) continue;
      u.used = mtime(dir + "/" + file);
      units.push_back(u);
    }
  }
  *held_bytes = used - self_bytes;
  if (used + need <= budget) return true;
  std::stable_sort(units.begin(), units.end(),
                   [](const Unit& a, const Unit& b) { return a.used < b.used; });
  // Each copy's lock, taken without waiting: byte kUseByte exclusive to remove it whole
  // (nobody has it open), else byte kWholeByte exclusive to remove its shards one by one
  // (nobody reads it whole). Held until the pass ends, so nobody opens what is being removed.
  struct Held {
    int fd = -1;
    bool whole = false;   // kUseByte taken: the copy may go whole
    bool shards = false;  // kWholeByte taken: its unheld shard files may go
    bool gone = false;
  };
  std::map<std::string, Held> locks;
  auto lock_of = [&](const std::string& name) -> Held& {
    auto it = locks.find(name);
    if (it != locks.end()) return it->second;
    Held h;
    const std::string path = local + "/" + name + kLockSuffix;
    h.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (h.fd >= 0) {
      h.whole = ofd_lock(h.fd, F_WRLCK, false, path, kUseByte);
      h.shards = h.whole || ofd_lock(h.fd, F_WRLCK, false, path, kWholeByte);
    }
    return locks.emplace(name, h).first->second;
  };
  uint64_t freed = 0;
  for (const Unit& u : units) {
    if (used - freed + need <= budget) break;
    Held& h = lock_of(u.copy);
    if (h.gone) continue;
    const std::string dir = local + "/" + u.copy;
    // A copy nobody holds goes whole, whichever of its units comes first: its shards one by
    // one only while another process reads it.
    if (u.file.empty() || h.whole) {
      if (!h.whole) continue;
      const uint64_t bytes = dir_bytes(dir);
      remove_dir(dir);
      ::unlink((dir + kLockSuffix).c_str());
      h.gone = true;
      freed += bytes;
      if (stats != nullptr) {
        ++stats->caches_evicted;
        stats->bytes_evicted += bytes;
      }
      continue;
    }
    if (!h.shards) continue;
    const std::string path = dir + "/" + u.file;
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat held {
    }, now{};
    if (ofd_lock(fd, F_WRLCK, false, path) && ::fstat(fd, &held) == 0 &&
        ::stat(path.c_str(), &now) == 0 && held.st_ino == now.st_ino) {
      ::unlink(path.c_str());
      freed += static_cast<uint64_t>(held.st_size);
      if (stats != nullptr) stats->bytes_evicted += static_cast<uint64_t>(held.st_size);
    }
    ::close(fd);
  }
  for (auto& l : locks) {
    if (l.second.fd >= 0) ::close(l.second.fd);
  }
  *held_bytes = used - freed - self_bytes;
  return used - freed + need <= budget;
}

std::string no_room(const std::string& what, uint64_t budget, uint64_t need, uint64_t held) {
  return "the local cache's budget of " + std::to_string(budget) + " bytes cannot hold " + what +
         " (" + std::to_string(need) + " bytes) beside the " + std::to_string(held) +
         " bytes that readers hold open; raise --local-cache-size (DSCACHE_LOCAL_CACHE_SIZE) "
         "or use another --local-cache directory";
}

}  // namespace local
}  // namespace remote
}  // namespace dscache
