// The local cache of remote caches: a verified copy of a remote cache (s3://, http(s)://) in a
// directory of the local cache, shared by every process on the node, that CacheDir opens like
// any cache directory (so every reader — Cache::open, verify, inspect, merge, bench, Python,
// the trainer — serves a remote cache the same way as a local one).
//
// Layout: <local cache>/<XXH64 of the location>-<XXH64 of its manifest.json>/ holds the copies,
// and the file of the same name + ".lock" beside it is the directory's lock. A rebuilt remote
// cache (another manifest) gets another directory; the old one is evicted when room is needed.
//
// Rules (docs/OPERATIONS.md, "Caches on object storage"):
//  - Copies only: each file is downloaded to a temporary name, checked against the manifest's
//    size and XXH64, then renamed into place; manifest.json is written last, so a directory
//    with a manifest is complete. A killed download leaves a temporary file that the next
//    downloader removes, never a file a reader trusts. Downloads are not forced to disk: the
//    copy's .boot names the boot of the machine its files were checked in, and a copy from an
//    earlier boot (a machine crash may have lost unwritten pages) is hashed again before use.
//  - Shared through the kernel's locks (open file description locks: they die with their
//    process): every process holds a shared lock on the copy while it is open (an evictor needs
//    the exclusive one), and a downloader also holds a second, exclusive lock. N processes
//    opening the same remote cache download each file once; the others wait for the first and
//    then read its copies.
//  - A budget (RemoteOptions::local_cache_size) that is checked: room is made by evicting the
//    least recently used copies, and shard files of streamed copies, that no process holds; a
//    cache that cannot fit beside the held ones is an error naming both numbers, before
//    anything is downloaded. A cache larger than the whole budget may be streamed instead
//    (mirror's allow_streaming): its shards come one by one (acquire_shard), each locked while
//    a reader holds it; temporary files count at their final size.
//  - A remote file whose size or XXH64 disagrees with the manifest is refused (Corruption naming
//    its URL), never served.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dscache/manifest.h"
#include "dscache/remote.h"

namespace dscache {
namespace remote {

class ObjectStore;
struct MirrorStats;

// A remote cache's local copy, held (read lock) for as long as this object lives. A streamed
// copy (see mirror()) holds every named file but the shards, which acquire_shard() brings in
// one at a time under the local cache's budget.
class HeldMirror {
 public:
  HeldMirror(std::string location, std::string dir, int lock_fd);
  ~HeldMirror();
  HeldMirror(const HeldMirror&) = delete;
  HeldMirror& operator=(const HeldMirror&) = delete;

  const std::string& location() const { return location_; }  // s3://... as given
  const std::string& dir() const { return dir_; }            // the local copy
  bool streamed() const { return store_ != nullptr; }

  // Streamed copies: shard k (manifest order) in the copy, complete and checked against the
  // manifest's size and XXH64, downloaded first when it is not there (one process or thread at
  // a time per shard; the others wait and use its copy). Returns a read-only descriptor that
  // holds the shard's shared lock: no evictor removes the file until it is closed (close() is
  // the release). Making room evicts the least recently used shard files and copies that
  // nobody holds; when the budget is held by others, waits for them (a while), then fails with
  // Error(kInvalidArgument) naming the budget and what is held. Thread-safe.
  int acquire_shard(size_t k);
  // Called (on the acquiring thread) when there is no room: the owner should close the shards
  // it holds but is not reading, and return whether it closed any.
  void set_release_hook(std::function<bool()> hook) { release_hook_ = std::move(hook); }
  uint64_t budget() const { return budget_; }
  // What the shards may take of the budget: the budget less this copy's other files.
  uint64_t shard_room() const { return shard_room_; }
  unsigned requests_in_flight() const { return in_flight_; }
  // Shards this object downloaded (its own requests, not other processes').
  uint64_t shards_downloaded() const { return shards_downloaded_; }

 private:
  friend std::shared_ptr<HeldMirror> mirror(const std::string&, const RemoteOptions&, MirrorStats*,
                                            bool);
  int open_present(size_t k);
  std::string location_;
  std::string dir_;
  int lock_fd_;
  // Streaming (null store_: a whole copy).
  std::shared_ptr<ObjectStore> store_;
  std::vector<FileEntry> shards_;
  std::string local_;  // the local cache directory
  uint64_t budget_ = 0;
  uint64_t shard_room_ = 0;
  unsigned in_flight_ = 0;
  bool sync_ = false;  // fdatasync each download (no boot id to tell a crash by)
  std::function<bool()> release_hook_;
  std::atomic<uint64_t> shards_downloaded_{0};
};

// What mirror() did, for tests and progress lines.
struct MirrorStats {
  uint64_t files_downloaded = 0;
  uint64_t bytes_downloaded = 0;
  uint64_t caches_evicted = 0;
  uint64_t bytes_evicted = 0;
};

// The local copy of the cache at `location`, complete and verified, held for reading. Options:
// remote_options(). With `allow_streaming` and a cache larger than the whole budget, the copy
// is streamed instead: everything but the shards, which the reader acquires one by one
// (HeldMirror::acquire_shard). Throws Error: kNotFound (no manifest.json there), kRemote
// (requests refused or failed), kCorruption (a remote file that disagrees with its manifest),
// kInvalidArgument (the budget cannot hold it), kIOError (the local disk).
std::shared_ptr<HeldMirror> mirror(const std::string& location, MirrorStats* stats = nullptr);
std::shared_ptr<HeldMirror> mirror(const std::string& location, const RemoteOptions& options,
                                   MirrorStats* stats = nullptr, bool allow_streaming = false);

// The local cache directory and budget the options resolve to (RemoteOptions' comments).
std::string local_cache_dir(const RemoteOptions& options);
uint64_t local_cache_budget(const RemoteOptions& options);

}  // namespace remote
}  // namespace dscache
