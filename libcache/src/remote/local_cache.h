// The local cache's files, for remote/mirror.cpp: the open file description locks on a copy's
// lock file, downloads' temporary names, the bytes a directory holds, and the eviction that
// makes room under the budget (the rules are remote/mirror.h's).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace dscache {
namespace remote {
struct MirrorStats;
namespace local {

constexpr const char* kLockSuffix = ".lock";

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

// Takes (or, !wait, tries: false when another holds it) the lock `type` (F_RDLCK, F_WRLCK,
// F_UNLCK) on byte `byte` of `fd`; any other failure throws naming `path`.
bool ofd_lock(int fd, short type, bool wait, const std::string& path, off_t byte = kUseByte);
// Opens and locks `path` (created when missing), making sure the lock is on the file that is
// at `path` now; -1 when !wait and another holds it.
int open_locked(const std::string& path, short type, bool wait);
// `path` is a regular file (not followed); its size in *size.
bool exists(const std::string& path, uint64_t* size = nullptr);
// A download's temporary name: ".<file>.part-<pid>-<n>-<bytes>", so that whoever counts the
// local cache's bytes counts what it will hold once complete.
std::string part_name(const std::string& file, uint64_t bytes);
// Removes the temporary files in `dir` whose writer is gone (killed downloads): never trusted.
void remove_dead_parts(const std::string& dir);
// Bytes of the regular files directly in `dir`; a download counts at its final size.
uint64_t dir_bytes(const std::string& dir);
// Creates `dir` and its parents; throws when it is not a directory.
void make_dirs(const std::string& dir);
// Makes room for `need` more bytes under `budget` in `local`, evicting the least recently used
// copies and streamed shard files nobody holds (see local_cache.cpp). Called under the budget
// lock; false when the need does not fit even so, *held_bytes then says how much others hold.
bool make_room(const std::string& local, const std::string& whole_self, uint64_t budget,
               uint64_t need, uint64_t self_bytes, MirrorStats* stats, uint64_t* held_bytes);
// The error text of a budget that cannot hold `need` bytes of `what` beside `held` bytes.
std::string no_room(const std::string& what, uint64_t budget, uint64_t need, uint64_t held);

}  // namespace local
}  // namespace remote
}  // namespace dscache
