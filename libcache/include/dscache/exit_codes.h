// The exit codes of dscache and dscache-train: one table for both programs (docs/OPERATIONS.md,
// "Exit codes"), the error -> code mapping, and the wrapper each command runs its body in.
#pragma once

#include <exception>
#include <functional>
#include <stdexcept>
#include <string>

namespace dscache {

// What a program's exit status says. Scripts and schedulers test these: never renumber; a new
// meaning takes a new number. A process stopped by signal N exits 128 + N (dscache-train).
enum class ExitCode : int {
  kOk = 0,            // success (a build that skipped files is a success)
  kError = 1,         // anything else: I/O, missing input, unsupported, unexpected
  kUsage = 2,         // a bad command line: flag, value, or a request impossible as asked
  kBadSource = 3,     // build/merge --strict: a source file did not decode, a part skipped some
  kOutputExists = 4,  // the output holds a cache, an interrupted build or a run: --force/--resume
  kCorruption = 5,    // a file's bytes disagree with its format or manifest (cache, checkpoint)
  kLocked = 6,        // another process holds the output's lock
  kNoSpace = 7,       // disk full, quota or file size limit; finished work kept for --resume
  kDistributed = 8,   // dscache-train: the data-parallel group could not form or broke
  kDiverged = 9,      // dscache-train: the loss stayed inf/NaN (5 steps in a row, no scaler)
  kRemote = 10,       // object storage refused a request or failed after its retries
};

constexpr int to_int(ExitCode code) { return static_cast<int>(code); }

// Implemented by the programs' own error types, which no ErrorKind describes, to give their row
// of the table. Mix it in through ExitsWith.
class HasExitCode {
 public:
  virtual ~HasExitCode() = default;
  virtual ExitCode exit_code() const noexcept = 0;
};

// `class OutputExistsError : public Error, public ExitsWith<ExitCode::kOutputExists>`.
template <ExitCode kCode>
class ExitsWith : public HasExitCode {
 public:
  ExitCode exit_code() const noexcept override { return kCode; }
};

// A bad command line or option value, in either program; the message names the option. Thrown by
// option parsing and by any check that finds the request impossible as given.
class UsageError : public std::runtime_error, public ExitsWith<ExitCode::kUsage> {
 public:
  using std::runtime_error::runtime_error;
};

// An error whose code was decided elsewhere (e.g. rank 0 of a data-parallel run, for the
// others). Copyable; immutable.
class ExitCodeError : public std::runtime_error, public HasExitCode {
 public:
  ExitCodeError(ExitCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ExitCode exit_code() const noexcept override { return code_; }

 private:
  ExitCode code_;
};

// True when `e` reports a write that failed for lack of room: ENOSPC (disk full), EDQUOT
// (quota) or EFBIG (past the file size limit, `ulimit -f`, with SIGXFSZ ignored), as a
// std::system_error (std::filesystem_error included) or an Error(kIOError) from throw_errno().
bool is_out_of_space(const std::exception& e);

// The row of the table for `e`, first match:
//   HasExitCode                   its own code (UsageError: kUsage, ExitCodeError...)
//   out of space                  kNoSpace (is_out_of_space)
//   Error kCorruption / kBusy     kCorruption / kLocked
//   Error kRemote                 kRemote
//   Error of another kind         kError (kNotFound, kInvalidArgument, kIOError, kUnsupported)
//   anything else                 kError (std::bad_alloc, std::system_error, ...)
ExitCode exit_code_for(const std::exception& e);

// The text run_command prints for `e`: what(), except "out of memory" for std::bad_alloc and
// "PATH: reason" for a std::filesystem_error (whose what() is the standard library's phrasing).
std::string error_message(const std::exception& e);

// Called by run_command after the message line, with what was thrown and its code, to add a
// line of advice (build: how to resume after running out of space). May be empty.
using ErrorAdvice = std::function<void(const std::exception&, ExitCode)>;

// Runs a command's `body` and returns its value. When it throws, prints "<who>: <message>" on
// stderr (error_message; "unknown error" for what is not a std::exception), calls `advice`, and
// returns exit_code_for() of it. `who` is the program and command: "dscache build".
int run_command(const std::string& who, const std::function<int()>& body,
                const ErrorAdvice& advice = {});

// run_command's reporting of one failure, for a command that catches for itself: prints as
// run_command does and returns the code.
int report_failure(const std::string& who, const std::exception& e, const ErrorAdvice& advice = {});

}  // namespace dscache
