// PathLock: one holder at a time, the holder named, released on exit and with a killed holder.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "dscache/lock.h"
#include "test_util.h"

namespace {

using dscache::test::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("lock_path_for: beside the target, never inside it") {
  CHECK(dscache::lock_path_for("/data/out/cache") == "/data/out/.cache.lock");
  CHECK(dscache::lock_path_for("/data/out/cache/") == "/data/out/.cache.lock");
  CHECK(dscache::lock_path_for("cache") == ".cache.lock");
}

TEST_CASE("PathLock: a second acquire fails at once and names the holder") {
  TempDir dir;
  const std::string target = dir.path() + "/cache";
  auto lock = dscache::PathLock::acquire(target, "dscache build src cache");
  CHECK(lock->path() == dir.path() + "/.cache.lock");
  const std::string text = slurp(lock->path());
  CHECK(text.find("\"pid\": " + std::to_string(::getpid())) != std::string::npos);
  CHECK(text.find("dscache build src cache") != std::string::npos);
  try {
    dscache::PathLock::acquire(target, "dscache merge");
    FAIL("a second acquire succeeded");
  } catch (const dscache::LockedError& e) {
    CHECK(e.kind() == dscache::ErrorKind::kBusy);
    CHECK(e.path() == lock->path());
    CHECK(e.holder().find("dscache build src cache") != std::string::npos);
    const std::string what = e.what();
    CHECK(what.find("pid " + std::to_string(::getpid())) != std::string::npos);
    CHECK(what.find("(dscache build src cache)") != std::string::npos);
  }
  const std::string path = lock->path();
  lock.reset();
  CHECK_FALSE(exists(path));
  auto again = dscache::PathLock::acquire(target, "again");  // released: free to take
  CHECK(slurp(again->path()).find("again") != std::string::npos);
}

TEST_CASE("PathLock: a stale lock file does not block; a killed holder releases the lock") {
  TempDir dir;
  const std::string target = dir.path() + "/out";
  { std::ofstream(dscache::lock_path_for(target)) << "{\"pid\": 999999, \"command\": \"gone\"}\n"; }
  auto lock = dscache::PathLock::acquire(target, "new holder");
  CHECK(slurp(lock->path()).find("new holder") != std::string::npos);
  lock.reset();

  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto held = dscache::PathLock::acquire(target, "child");
    (void)!::write(ready[1], "x", 1);
    ::pause();  // killed by the parent, still holding the lock
    ::_exit(0);
  }
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  CHECK_THROWS_AS(dscache::PathLock::acquire(target, "parent"), dscache::LockedError);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(exists(dscache::lock_path_for(target)));  // the killed holder could not remove it...
  auto mine = dscache::PathLock::acquire(target, "parent");  // ... and it does not block
  CHECK(slurp(mine->path()).find("parent") != std::string::npos);
  ::close(ready[0]);
  ::close(ready[1]);
}
