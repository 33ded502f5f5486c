// exit_code_for and run_command: the one error -> exit-code table of dscache and dscache-train.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "dscache/error.h"
#include "dscache/exit_codes.h"
#include "dscache/lock.h"

namespace {

using dscache::Error;
using dscache::ErrorKind;
using dscache::ExitCode;

// A program's own error type, as the trainer's DistributedError or build's BadSourceError.
class TestDistributedError : public std::runtime_error,
                             public dscache::ExitsWith<ExitCode::kDistributed> {
 public:
  using std::runtime_error::runtime_error;
};

// An Error subtype with its own row (as OutputExistsError): the row wins over the kind.
class TestOutputExistsError : public Error, public dscache::ExitsWith<ExitCode::kOutputExists> {
 public:
  using Error::Error;
};

std::string errno_text(int err) { return std::strerror(err); }

struct Row {
  const char* what;             // the case, for the failure message
  std::function<void()> raise;  // throws the error of this row
  ExitCode code;                // its exit code
  bool out_of_space;            // is_out_of_space
};

const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      {"UsageError", [] { throw dscache::UsageError("--size '0': expected N"); }, ExitCode::kUsage,
       false},
      {"Error kNotFound", [] { throw Error(ErrorKind::kNotFound, "/c", "no such file"); },
       ExitCode::kError, false},
      {"Error kCorruption", [] { throw Error(ErrorKind::kCorruption, "/c/x.npy", "short"); },
       ExitCode::kCorruption, false},
      // Not a usage error, whatever the path looks like: usage errors are thrown as UsageError.
      {"Error kInvalidArgument", [] { throw Error(ErrorKind::kInvalidArgument, "--size", "x"); },
       ExitCode::kError, false},
      {"Error kIOError", [] { throw Error(ErrorKind::kIOError, "/c", "read: " + errno_text(EIO)); },
       ExitCode::kError, false},
      {"Error kUnsupported", [] { throw Error(ErrorKind::kUnsupported, "/c", "no HDF5"); },
       ExitCode::kError, false},
      {"Error kBusy", [] { throw Error(ErrorKind::kBusy, "/.c.lock", "held"); }, ExitCode::kLocked,
       false},
      {"Error kRemote", [] { throw Error(ErrorKind::kRemote, "s3://b/c/x.npy", "HTTP 503"); },
       ExitCode::kRemote, false},
      {"LockedError", [] { throw dscache::LockedError("/.c.lock", "{\"pid\": 1}", "held"); },
       ExitCode::kLocked, false},
      {"IOError ENOSPC",
       [] { throw Error(ErrorKind::kIOError, "/c", "write: " + errno_text(ENOSPC)); },
       ExitCode::kNoSpace, true},
      {"IOError EDQUOT",
       [] { throw Error(ErrorKind::kIOError, "/c", "write: " + errno_text(EDQUOT)); },
       ExitCode::kNoSpace, true},
      {"IOError EFBIG",
       [] { throw Error(ErrorKind::kIOError, "/c", "write: " + errno_text(EFBIG)); },
       ExitCode::kNoSpace, true},
      // Only an I/O error says it ran out of room; a corrupt file's reason never does.
      {"Corruption naming ENOSPC",
       [] { throw Error(ErrorKind::kCorruption, "/c", "write: " + errno_text(ENOSPC)); },
       ExitCode::kCorruption, false},
      {"filesystem_error ENOSPC",
       [] {
         throw std::filesystem::filesystem_error(
             "copy", "/a", "/b", std::make_error_code(std::errc::no_space_on_device));
       },
       ExitCode::kNoSpace, true},
      {"filesystem_error EACCES",
       [] {
         throw std::filesystem::filesystem_error(
             "mkdir", "/a", std::make_error_code(std::errc::permission_denied));
       },
       ExitCode::kError, false},
      {"system_error EFBIG",
       [] { throw std::system_error(EFBIG, std::generic_category(), "write"); }, ExitCode::kNoSpace,
       true},
      {"system_error EDQUOT (system category)",
       [] { throw std::system_error(EDQUOT, std::system_category(), "write"); }, ExitCode::kNoSpace,
       true},
      {"own row", [] { throw TestDistributedError("rendezvous: 1 of 2 ranks joined"); },
       ExitCode::kDistributed, false},
      {"own row beats the kind",
       [] { throw TestOutputExistsError(ErrorKind::kInvalidArgument, "/c", "exists"); },
       ExitCode::kOutputExists, false},
      {"ExitCodeError", [] { throw dscache::ExitCodeError(ExitCode::kLocked, "rank 0: locked"); },
       ExitCode::kLocked, false},
      {"bad_alloc", [] { throw std::bad_alloc(); }, ExitCode::kError, false},
      {"runtime_error", [] { throw std::runtime_error("LibTorch failed: ..."); }, ExitCode::kError,
       false},
      {"logic_error", [] { throw std::logic_error("invariant"); }, ExitCode::kError, false},
  };
  return table;
}

}  // namespace

TEST_CASE("the table's numbers are the documented ones (never renumbered)") {
  const std::pair<ExitCode, int> numbers[] = {
      {ExitCode::kOk, 0},        {ExitCode::kError, 1},        {ExitCode::kUsage, 2},
      {ExitCode::kBadSource, 3}, {ExitCode::kOutputExists, 4}, {ExitCode::kCorruption, 5},
      {ExitCode::kLocked, 6},    {ExitCode::kNoSpace, 7},      {ExitCode::kDistributed, 8},
      {ExitCode::kDiverged, 9},
  };
  for (const auto& [code, number] : numbers) CHECK(dscache::to_int(code) == number);
}

TEST_CASE("exit_code_for and is_out_of_space: one row per error kind") {
  for (const Row& r : rows()) {
    CAPTURE(r.what);
    bool thrown = false;
    try {
      r.raise();
    } catch (const std::exception& e) {
      thrown = true;
      CHECK(dscache::exit_code_for(e) == r.code);
      CHECK(dscache::is_out_of_space(e) == r.out_of_space);
    }
    CHECK(thrown);
  }
}

TEST_CASE("run_command: the body's code, or the table's for what it throws, with advice") {
  CHECK(dscache::run_command("test", [] { return 0; }) == 0);
  CHECK(dscache::run_command("test", [] { return 130; }) == 130);  // 128 + SIGINT, as returned
  for (const Row& r : rows()) {
    CAPTURE(r.what);
    std::vector<ExitCode> advised;
    const int rc = dscache::run_command(
        "test",
        [&]() -> int {
          r.raise();
          return 0;
        },
        [&](const std::exception&, ExitCode code) { advised.push_back(code); });
    CHECK(rc == dscache::to_int(r.code));
    REQUIRE(advised.size() == 1);
    CHECK(advised[0] == r.code);
  }
  // What is not a std::exception is still an error, not a crash.
  CHECK(dscache::run_command("test", []() -> int { throw 42; }) == 1);
}

TEST_CASE("error_message: what(), but readable for bad_alloc and filesystem_error") {
  CHECK(dscache::error_message(Error(ErrorKind::kCorruption, "/c/x.npy", "short")) ==
        "Corruption: /c/x.npy: short");
  CHECK(dscache::error_message(std::bad_alloc()) == "out of memory");
  const std::string denied = std::make_error_code(std::errc::permission_denied).message();
  CHECK(dscache::error_message(std::filesystem::filesystem_error(
            "cannot create directories", "/run/x",
            std::make_error_code(std::errc::permission_denied))) == "/run/x: " + denied);
  const std::string full = std::make_error_code(std::errc::no_space_on_device).message();
  CHECK(dscache::error_message(std::filesystem::filesystem_error(
            "cannot copy file", "/a", "/b", std::make_error_code(std::errc::no_space_on_device))) ==
        "/a -> /b: " + full);
}
