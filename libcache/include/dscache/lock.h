// An exclusive lock on a path (a cache being built, a training run's output directory) that
// one process holds at a time, so two writers never work on the same output.
#pragma once

#include <memory>
#include <string>

#include "dscache/error.h"

namespace dscache {

// The lock file of `target`: `<parent>/.<name>.lock`, beside `target` and not inside it, so a
// directory swapped into place or removed does not take the lock with it.
std::string lock_path_for(const std::string& target);

// Another process holds the lock. kind() is kBusy, path() the lock file; holder() is what the
// holder wrote into it (JSON: pid, host, started_utc, command), or "" if it has not yet.
class LockedError : public Error {
 public:
  LockedError(std::string lock_path, std::string holder, std::string reason);
  const std::string& holder() const { return holder_; }

 private:
  std::string holder_;
};

// Holds `flock(LOCK_EX)` on lock_path_for(target) for its lifetime. The lock dies with the
// process (even on SIGKILL), so a lock file left behind by a killed holder never blocks: only
// a live holder does. The file names the holder for the message another process gets.
// Not copyable; one object per acquisition; not thread-safe (the lock is per process anyway).
class PathLock {
 public:
  // Takes the lock without waiting and writes {pid, host, started_utc, command} into the lock
  // file. Throws LockedError naming the holder when another process has it, IOError when the
  // lock file cannot be created (e.g. the parent directory is missing or read-only).
  static std::unique_ptr<PathLock> acquire(const std::string& target, const std::string& command);

  // Removes the lock file, then releases the lock.
  ~PathLock();
  PathLock(const PathLock&) = delete;
  PathLock& operator=(const PathLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  PathLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

}  // namespace dscache
