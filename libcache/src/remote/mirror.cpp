// The local cache of remote caches (remote/mirror.h): download once, verify, share, evict.
#include "remote/mirror.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
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
constexpr off_t kUseByte = 0;
constexpr off_t kFetchByte = 1;

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

// Bytes of the regular files directly in `dir` (a copy is flat: manifest names are plain).
uint64_t dir_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const std::string& name : entries(dir)) {
    uint64_t size = 0;
    if (exists(dir + "/" + name, &size)) total += size;
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

struct Copy {
  std::string name;
  uint64_t bytes = 0;
  int64_t used = 0;  // when it was last opened (its lock file's mtime), seconds
};

// Makes room for `need` more bytes under `budget` in `local`, evicting the least recently opened
// copies nobody holds (all but `self`). Called under the budget lock.
void make_room(const std::string& local, const std::string& self, uint64_t budget, uint64_t need,
               uint64_t self_bytes, MirrorStats* stats) {
  std::vector<Copy> copies;
  uint64_t used = self_bytes;
  for (const std::string& name : entries(local)) {
    if (!is_copy_name(name) || name == self) continue;
    Copy c;
    c.name = name;
    c.bytes = dir_bytes(local + "/" + name);
    struct stat st {};
    if (::stat((local + "/" + name + kLockSuffix).c_str(), &st) == 0) c.used = st.st_mtime;
    used += c.bytes;
    copies.push_back(c);
  }
  if (used + need <= budget) return;
  std::sort(copies.begin(), copies.end(),
            [](const Copy& a, const Copy& b) { return a.used < b.used; });
  // Which copies could go (no process holds them), taking their locks without waiting; a copy
  // locked here stays locked until it is removed or we give up, so nobody opens it meanwhile.
  std::vector<std::pair<Copy, int>> free;
  uint64_t freeable = 0;
  for (const Copy& c : copies) {
    if (used - freeable + need <= budget) break;
    const std::string lock = local + "/" + c.name + kLockSuffix;
    const int fd = open_locked(lock, F_WRLCK, false);
    if (fd < 0) continue;  // held by a reader or a downloader
    free.emplace_back(c, fd);
    freeable += c.bytes;
  }
  if (used - freeable + need > budget) {
    for (auto& f : free) ::close(f.second);
    throw Error(ErrorKind::kInvalidArgument, local,
                "the local cache's budget of " + std::to_string(budget) +
                    " bytes cannot hold this cache (" + std::to_string(self_bytes + need) +
                    " bytes) beside the " + std::to_string(used - freeable - self_bytes) +
                    " bytes of copies other processes hold open; raise --local-cache-size "
                    "(DSCACHE_LOCAL_CACHE_SIZE) or use another --local-cache directory");
  }
  for (auto& f : free) {
    remove_dir(local + "/" + f.first.name);
    ::unlink((local + "/" + f.first.name + kLockSuffix).c_str());
    ::close(f.second);
    if (stats != nullptr) {
      ++stats->caches_evicted;
      stats->bytes_evicted += f.first.bytes;
    }
  }
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

// Downloads one named file into `dir`: a temporary name, checked, then renamed into place.
void fetch_file(ObjectStore& store, const std::string& dir, const FileEntry& f, bool sync,
                std::atomic<uint64_t>* bytes) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      dir + "/." + f.file + kPartTag + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno(tmp, "create");
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
    ::close(fd);
    fd = -1;
    if (::rename(tmp.c_str(), (dir + "/" + f.file).c_str()) != 0) {
      throw_errno(dir + "/" + f.file, "rename");
    }
    *bytes += size;
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
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
                                   MirrorStats* stats) {
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

  // The files of a copy were checked in the boot its .boot file names: the same boot means
  // they are as checked (downloads are not synced), another means they are checked again.
  const std::string boot = boot_id();
  const std::string bpath = dir + "/" + kBootFile;
  auto same_boot = [&] {
    if (boot.empty()) return true;  // every file was synced before it was renamed
    const std::string at = small_file(bpath);
    return at == boot;
  };
  // In use from here on: no evictor removes the copy while this process holds it.
  const int fd = open_locked(lock, F_RDLCK, true);
  if (!same_manifest(mpath, text) || !same_boot()) {  // complete: its manifest is written last
    // Download, one process at a time: the others wait here, then find it complete.
    try {
      ofd_lock(fd, F_WRLCK, true, lock, kFetchByte);
      if (!same_manifest(mpath, text) || !same_boot()) {
        for (const std::string& e : entries(dir)) {  // killed downloads: never trusted
          if (e.find(kPartTag) != std::string::npos) ::unlink((dir + "/" + e).c_str());
        }
        const bool trusted = same_boot();
        std::vector<FileEntry> missing;
        uint64_t need = text.size();
        for (const FileEntry& f : named_files(m)) {
          const std::string path = dir + "/" + f.file;
          uint64_t size = 0;
          if (exists(path, &size) && size == f.bytes) {
            if (trusted) continue;  // checked in this boot before it was renamed into place
            const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            const bool good = in >= 0 && hash_file(in, path) == f.xxh64;
            if (in >= 0) ::close(in);
            if (good) continue;
            ::unlink(path.c_str());
          }
          missing.push_back(f);
          need += f.bytes;
        }
        // One downloader at a time makes room and fills it, so two copies being made at once
        // cannot both count the same free bytes.
        const int budget_fd = open_locked(local + "/.budget.lock", F_WRLCK, true);
        try {
          make_room(local, name, local_cache_budget(options), need, dir_bytes(dir), stats);
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
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  ::futimens(fd, nullptr);  // opened now: the least recently opened copies are evicted first
  return std::make_shared<HeldMirror>(where, dir, fd);
}

}  // namespace remote
}  // namespace dscache
