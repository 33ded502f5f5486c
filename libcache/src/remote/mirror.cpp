// The local cache of remote caches (remote/mirror.h): download once, verify, share, evict.
#include "remote/mirror.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/byte_count.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/manifest.h"
#include "remote/object_store.h"
#include "remote/parallel.h"

namespace dscache {
namespace remote {

namespace {

constexpr uint64_t kDefaultBudget = uint64_t{20} << 30;  // 20 GiB
constexpr unsigned kDefaultInFlight = 8;
constexpr const char* kLockSuffix = ".lock";
constexpr const char* kPartTag = ".part-";
constexpr const char* kBootFile = ".boot";  // the boot in which the copy's files were checked

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// Open file description locks (F_OFD_*): like flock they belong to the open file and die with
// it (a killed holder never blocks anyone), and unlike flock they lock byte ranges, so one lock
// file holds two locks. Byte kUseByte: readers (and downloaders) hold it shared while the copy
// is open, an evictor takes it exclusive without waiting. Byte kFetchByte: one downloader at a
// time holds it exclusive. A process waiting to download therefore never waits on the readers:
// two ranks that open a copy at once, one downloading while the other waits, must not end with
// the second waiting for the first to close the copy (it would not: the ranks wait on each other).
// Byte kWholeByte: a process that reads the copy whole (every shard where the manifest says)
// holds it shared; an evictor removing single shard files of a copy in use takes it exclusive,
// without waiting, so it never takes a shard from under a whole reader. Bytes kShardFetchByte
// + k: one downloader at a time of a streamed copy's shard k, exclusive.
constexpr off_t kUseByte = 0;
constexpr off_t kFetchByte = 1;
constexpr off_t kWholeByte = 2;
constexpr off_t kShardFetchByte = 16;

bool ofd_lock(int fd, short type, bool wait, const std::string& path, off_t byte = kUseByte) {
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

bool exists(const std::string& path, uint64_t* size = nullptr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  return true;
}

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

uint64_t hash_file(int fd, const std::string& path) {
  Xxh64 h;
  std::vector<char> buf(1 << 20);
  uint64_t off = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno(path, "read");
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
  }
  return h.digest();
}

// Downloads one named file into `dir` through the temporary file `tmp` (open as `fd`): checked
// against the manifest's size and XXH64, then renamed into place. With `keep`, the file's
// shared lock is taken before the rename and the descriptor returned (so that no evictor
// removes it between the rename and its use); else it is closed and -1 returned. Removes the
// temporary file on failure.
int fetch_into(ObjectStore& store, const std::string& dir, const FileEntry& f, bool sync,
               const std::string& tmp, int fd, bool keep) {
  try {
    const ObjectInfo got = store.get_to_fd(f.file, fd, tmp);
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno(tmp, "stat");
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    const uint64_t sum = size == f.bytes ? hash_file(fd, tmp) : 0;
    if (size != f.bytes || sum != f.xxh64) {
      throw Error(ErrorKind::kCorruption, store.url(f.file),
                  "the remote file changed under its manifest: it holds " + std::to_string(size) +
                      " bytes" + (size == f.bytes ? " with XXH64 " + hex64(sum) : "") +
                      ", the manifest says " + std::to_string(f.bytes) + " bytes with XXH64 " +
                      hex64(f.xxh64) + " (etag " + got.etag + "); refusing to serve it");
    }
    // Not forced to disk where the boot can be told (see boot_id): a kill leaves the page
    // cache intact, and a crash of the machine shows as a new boot, after which the copy is
    // checked again before it is trusted. Without a boot id, every file is synced.
    if (sync && ::fdatasync(fd) != 0) throw_errno(tmp, "fdatasync");
    if (keep) ofd_lock(fd, F_RDLCK, true, tmp);
    if (::rename(tmp.c_str(), (dir + "/" + f.file).c_str()) != 0) {
      throw_errno(dir + "/" + f.file, "rename");
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (keep) return fd;
  ::close(fd);
  return -1;
}

int create_part(const std::string& tmp) {
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno(tmp, "create");
  return fd;
}

void fetch_file(ObjectStore& store, const std::string& dir, const FileEntry& f, bool sync,
                std::atomic<uint64_t>* bytes) {
  const std::string tmp = dir + "/" + part_name(f.file, f.bytes);
  fetch_into(store, dir, f, sync, tmp, create_part(tmp), false);
  *bytes += f.bytes;
}

// Downloads `files` into `dir` with up to `in_flight` requests at once.
void fetch_all(ObjectStore& store, const std::string& dir, const std::vector<FileEntry>& files,
               bool sync, unsigned in_flight, MirrorStats* stats) {
  std::atomic<uint64_t> bytes{0};
  parallel_for(files.size(), in_flight,
               [&](size_t i) { fetch_file(store, dir, files[i], sync, &bytes); });
  if (stats != nullptr) {
    stats->files_downloaded += files.size();
    stats->bytes_downloaded += bytes;
  }
}

// This boot of the machine (/proc/sys/kernel/random/boot_id), "" where it cannot be read.
std::string boot_id() {
  const int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[64];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return "";
  std::string id(buf, static_cast<size_t>(n));
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

// A small file's bytes, "" when it cannot be read.
std::string small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "";
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool same_manifest(const std::string& path, const std::string& text) {
  uint64_t size = 0;
  if (!exists(path, &size) || size != text.size()) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string have(text.size(), '\0');
  size_t got = 0;
  while (got < have.size()) {
    const ssize_t n = ::read(fd, &have[got], have.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return got == have.size() && have == text;
}

}  // namespace

HeldMirror::HeldMirror(std::string location, std::string dir, int lock_fd)
    : location_(std::move(location)), dir_(std::move(dir)), lock_fd_(lock_fd) {}

HeldMirror::~HeldMirror() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string local_cache_dir(const RemoteOptions& options) {
  if (!options.local_cache.empty()) return options.local_cache;
  std::string dir = env("DSCACHE_LOCAL_CACHE");
  if (!dir.empty()) return dir;
  dir = env("XDG_CACHE_HOME");
  if (!dir.empty()) return dir + "/dscache";
  const std::string home = env("HOME");
  if (home.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--local-cache",
                "no local cache directory: give --local-cache (or DSCACHE_LOCAL_CACHE); neither "
                "XDG_CACHE_HOME nor HOME is set");
  }
  return home + "/.cache/dscache";
}

uint64_t local_cache_budget(const RemoteOptions& options) {
  if (options.local_cache_size != 0) return options.local_cache_size;
  const std::string v = env("DSCACHE_LOCAL_CACHE_SIZE");
  if (!v.empty()) return parse_byte_count(v, "DSCACHE_LOCAL_CACHE_SIZE");
  return kDefaultBudget;
}

std::shared_ptr<HeldMirror> mirror(const std::string& location, MirrorStats* stats) {
  return mirror(location, remote_options(), stats);
}

std::shared_ptr<HeldMirror> mirror(const std::string& location, const RemoteOptions& options,
                                   MirrorStats* stats, bool allow_streaming) {
  std::string where = location;
  while (where.size() > 1 && where.back() == '/') where.pop_back();
  std::unique_ptr<ObjectStore> store = ObjectStore::open(where, options);
  std::string text;
  try {
    text = store->get("manifest.json");
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNotFound) throw;
    throw Error(ErrorKind::kNotFound, store->url("manifest.json"),
                "no manifest.json: not a cache, or its upload has not finished");
  }
  const Manifest m = manifest_from_json(text, store->url("manifest.json"));

  const std::string local = local_cache_dir(options);
  make_dirs(local);
  const std::string name =
      hex64(xxh64(where.data(), where.size())) + "-" + hex64(xxh64(text.data(), text.size()));
  const std::string dir = local + "/" + name;
  const std::string lock = dir + kLockSuffix;
  const std::string mpath = dir + "/manifest.json";

  // Whole, or streamed when the whole cache could never fit the budget: every named file but
  // the shards (named_files lists them first), which acquire_shard brings in one by one.
  const std::vector<FileEntry> files = named_files(m);
  const uint64_t budget = local_cache_budget(options);
  uint64_t total = text.size();
  for (const FileEntry& f : files) total += f.bytes;
  const bool streamed = allow_streaming && total > budget;
  const std::vector<FileEntry> wanted(
      files.begin() + (streamed ? static_cast<long>(m.shards.size()) : 0), files.end());

  // The files of a copy were checked in the boot its .boot file names: the same boot means
  // they are as checked (downloads are not synced), another means they are checked again.
  const std::string boot = boot_id();
  const std::string bpath = dir + "/" + kBootFile;
  auto same_boot = [&] {
    if (boot.empty()) return true;  // every file was synced before it was renamed
    const std::string at = small_file(bpath);
    return at == boot;
  };
  // Complete: its manifest (written last) and every file this reader needs, in place (a
  // streamed reader of the same copy may have evicted shards since).
  auto complete = [&] {
    if (!same_manifest(mpath, text) || !same_boot()) return false;
    for (const FileEntry& f : wanted) {
      uint64_t size = 0;
      if (!exists(dir + "/" + f.file, &size) || size != f.bytes) return false;
    }
    return true;
  };
  // In use from here on: no evictor removes the copy while this process holds it, nor (read
  // whole) a shard of it.
  const int fd = open_locked(lock, F_RDLCK, true);
  try {
    if (!streamed) ofd_lock(fd, F_RDLCK, true, lock, kWholeByte);
    if (!complete()) {
      // Download, one process at a time: the others wait here, then find it complete.
      ofd_lock(fd, F_WRLCK, true, lock, kFetchByte);
      if (!complete()) {
        remove_dead_parts(dir);
        const bool trusted = same_boot();
        std::vector<FileEntry> missing;
        uint64_t need = text.size();
        for (size_t i = 0; i < files.size(); ++i) {
          const FileEntry& f = files[i];
          const std::string path = dir + "/" + f.file;
          const bool shard = i < m.shards.size();
          uint64_t size = 0;
          if (exists(path, &size) && size == f.bytes) {
            if (trusted) continue;    // checked in this boot before it was renamed into place
            if (shard && streamed) {  // from an earlier boot: fetched again when needed
              ::unlink(path.c_str());
              continue;
            }
            const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            const bool good = in >= 0 && hash_file(in, path) == f.xxh64;
            if (in >= 0) ::close(in);
            if (good) continue;
            ::unlink(path.c_str());
          }
          if (shard && streamed) continue;
          missing.push_back(f);
          need += f.bytes;
        }
        // One downloader at a time makes room and fills it, so two copies being made at once
        // cannot both count the same free bytes.
        const int budget_fd = open_locked(local + "/.budget.lock", F_WRLCK, true);
        try {
          uint64_t held = 0;
          if (!make_room(local, streamed ? "" : name, budget, need, streamed ? 0 : dir_bytes(dir),
                         stats, &held)) {
            throw Error(ErrorKind::kInvalidArgument, local,
                        no_room(streamed ? "this cache's files besides its shards" : "this cache",
                                budget, need, held));
          }
          if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw_errno(dir, "mkdir");
          if (!boot.empty()) write_file_atomic(bpath, boot.data(), boot.size());
          fetch_all(*store, dir, missing, boot.empty(),
                    options.requests_in_flight ? options.requests_in_flight : kDefaultInFlight,
                    stats);
          write_file_atomic(mpath, text.data(), text.size());
        } catch (...) {
          ::close(budget_fd);
          throw;
        }
        ::close(budget_fd);
      }
      ofd_lock(fd, F_UNLCK, true, lock, kFetchByte);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::futimens(fd, nullptr);  // opened now: the least recently opened copies are evicted first
  auto held = std::make_shared<HeldMirror>(where, dir, fd);
  if (streamed) {
    held->store_ = std::move(store);
    held->shards_.assign(files.begin(), files.begin() + static_cast<long>(m.shards.size()));
    held->local_ = local;
    held->budget_ = budget;
    uint64_t others = text.size();
    for (const FileEntry& f : wanted) others += f.bytes;
    held->shard_room_ = budget > others ? budget - others : 0;
    held->in_flight_ = options.requests_in_flight ? options.requests_in_flight : kDefaultInFlight;
    held->sync_ = boot.empty();
  }
  return held;
}

int HeldMirror::open_present(size_t k) {
  const FileEntry& f = shards_[k];
  const std::string path = dir_ + "/" + f.file;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return -1;
    throw_errno(path, "open");
  }
  try {
    ofd_lock(fd, F_RDLCK, true, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  // The file at `path` now, locked (an evictor removes a file while holding its write lock),
  // and complete (only checked files are renamed into place).
  struct stat held {
  }, now{};
  if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
      held.st_dev == now.st_dev && S_ISREG(held.st_mode) &&
      static_cast<uint64_t>(held.st_size) == f.bytes) {
    ::futimens(fd, nullptr);  // used now: the least recently used shards are evicted first
    return fd;
  }
  ::close(fd);
  return -1;
}

int HeldMirror::acquire_shard(size_t k) {
  if (!streamed() || k >= shards_.size()) {
    throw Error(ErrorKind::kInvalidArgument, dir_,
                "shard " + std::to_string(k) + " cannot be acquired: the copy is not streamed");
  }
  int fd = open_present(k);
  if (fd >= 0) return fd;
  const FileEntry& f = shards_[k];
  // One downloader of this shard at a time, across processes and threads: a descriptor of its
  // own (the locks of one open file do not exclude each other).
  const std::string lock = dir_ + kLockSuffix;
  const int fetch = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
  if (fetch < 0) throw_errno(lock, "open lock file");
  try {
    ofd_lock(fetch, F_WRLCK, true, lock, kShardFetchByte + static_cast<off_t>(k));
    fd = open_present(k);  // another downloader's, while this one waited
    if (fd < 0) {
      const std::string tmp = dir_ + "/" + part_name(f.file, f.bytes);
      int part = -1;
      // Room under the budget: evict, let the owner close what it holds idle, then wait a
      // while for other readers to move on.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      for (unsigned attempt = 0; part < 0; ++attempt) {
        const int budget_fd = open_locked(local_ + "/.budget.lock", F_WRLCK, true);
        uint64_t held = 0;
        try {
          if (make_room(local_, "", budget_, f.bytes, 0, nullptr, &held)) part = create_part(tmp);
        } catch (...) {
          ::close(budget_fd);
          throw;
        }
        ::close(budget_fd);
        if (part >= 0) break;
        if (release_hook_ && release_hook_()) continue;
        if (std::chrono::steady_clock::now() > deadline) {
          throw Error(ErrorKind::kInvalidArgument, local_,
                      no_room("shard " + f.file + " of " + location_, budget_, f.bytes, held) +
                          " (a streamed cache needs room for the shards being read at once: "
                          "the windowed shuffle's window and the next)");
        }
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::min(50u << std::min(attempt, 4u), 500u)));
      }
      fd = fetch_into(*store_, dir_, f, sync_, tmp, part, true);
      ++shards_downloaded_;
    }
  } catch (...) {
    ::close(fetch);
    throw;
  }
  ::close(fetch);
  return fd;
}

}  // namespace remote
}  // namespace dscache
