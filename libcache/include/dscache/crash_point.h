// Test hooks: named points in the cache writer, build and merge where a test can kill or stop
// the process, so fault-injection tests (tests/cli/test_faults.py) hit each window
// deterministically. Not for use outside tests; costs one branch when no hook is set.
#pragma once

namespace dscache {

// A point where a crash must leave something `--resume` completes. Does nothing unless the
// environment asks for it (read once, at the first call):
//   DSCACHE_TEST_CRASH_TRACE=FILE  appends "<n> <name>" for every point passed (n from 1);
//   DSCACHE_TEST_CRASH_AT=N        SIGKILLs this process at the N-th point;
//   DSCACHE_TEST_KILL_AT=NAME:K    SIGKILLs this process at the K-th point called NAME
//                                  (e.g. shard-committed:3: just after the third shard);
//   DSCACHE_TEST_PAUSE_AT=NAME     SIGSTOPs this process at the first point called NAME
//                                  (the test sends SIGCONT).
// Called from one thread at a time (the writer's thread, the finishing code).
void crash_point(const char* name);

}  // namespace dscache
