// The local cache of remote caches (remote/mirror.h): download once, verify, share. Its files'
// locks, sizes and eviction: local_cache.cpp.
#include "remote/mirror.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "dscache/atomic_file.h"
#include "dscache/byte_count.h"
#include "dscache/checksum.h"
#include "dscache/error.h"
#include "dscache/manifest.h"
#include "remote/local_cache.h"
#include "remote/object_store.h"
#include "remote/parallel.h"

namespace dscache {
namespace remote {

using local::dir_bytes;
using local::exists;
using local::kFetchByte;
using local::kLockSuffix;
using local::kShardFetchByte;
using local::kWholeByte;
using local::make_dirs;
using local::make_room;
using local::no_room;
using local::ofd_lock;
using local::open_locked;
using local::part_name;
using local::remove_dead_parts;

namespace {

constexpr uint64_t kDefaultBudget = uint64_t{20} << 30;  // 20 GiB
constexpr unsigned kDefaultInFlight = 8;
constexpr const char* kBootFile = ".boot";  // the boot in which the copy's files were checked

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
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

// The files of the copy in `dir` to download, their bytes added to *need: those not there at
// their size, and (not `trusted`: checked in another boot) those whose XXH64 is not the
// manifest's, removed. Streamed (the first `shards` files are shards): shards are fetched one
// by one when read, so a shard from another boot is removed, not fetched.
std::vector<FileEntry> missing_files(const std::string& dir, const std::vector<FileEntry>& files,
                                     size_t shards, bool streamed, bool trusted, uint64_t* need) {
  std::vector<FileEntry> missing;
  for (size_t i = 0; i < files.size(); ++i) {
    const FileEntry& f = files[i];
    const std::string path = dir + "/" + f.file;
    const bool shard = i < shards;
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
    *need += f.bytes;
  }
  return missing;
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
        uint64_t need = text.size();
        const std::vector<FileEntry> missing =
            missing_files(dir, files, m.shards.size(), streamed, same_boot(), &need);
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
