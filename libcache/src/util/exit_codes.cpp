// The one error -> exit-code table of dscache and dscache-train (docs/OPERATIONS.md, "Exit codes").
#include "dscache/exit_codes.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <system_error>

#include "dscache/error.h"

namespace dscache {

namespace {

constexpr int kNoSpaceErrnos[] = {ENOSPC, EDQUOT, EFBIG};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

bool is_out_of_space(const std::exception& e) {
  if (const auto* se = dynamic_cast<const std::system_error*>(&e)) {
    for (int err : kNoSpaceErrnos) {
      if (se->code() == std::error_code(err, std::generic_category()) ||
          se->code() == std::error_code(err, std::system_category())) {
        return true;
      }
    }
    return false;
  }
  const auto* de = dynamic_cast<const Error*>(&e);
  if (de == nullptr || de->kind() != ErrorKind::kIOError) return false;
  // throw_errno() ends the reason with strerror(errno); Error carries no errno of its own.
  for (int err : kNoSpaceErrnos) {
    if (ends_with(de->reason(), std::strerror(err))) return true;
  }
  return false;
}

ExitCode exit_code_for(const std::exception& e) {
  if (const auto* coded = dynamic_cast<const HasExitCode*>(&e)) return coded->exit_code();
  if (is_out_of_space(e)) return ExitCode::kNoSpace;
  if (const auto* de = dynamic_cast<const Error*>(&e)) {
    switch (de->kind()) {
      case ErrorKind::kCorruption:
        return ExitCode::kCorruption;
      case ErrorKind::kBusy:
        return ExitCode::kLocked;
      case ErrorKind::kRemote:
        return ExitCode::kRemote;
      case ErrorKind::kNotFound:
      case ErrorKind::kInvalidArgument:
      case ErrorKind::kIOError:
      case ErrorKind::kUnsupported:
        return ExitCode::kError;
    }
  }
  return ExitCode::kError;
}

std::string error_message(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return "out of memory";
  if (const auto* fe = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    // libstdc++ says "filesystem error: cannot copy file: Input/output error [a] [b]".
    if (!fe->path1().empty()) {
      std::string msg = fe->path1().string();
      if (!fe->path2().empty()) msg += " -> " + fe->path2().string();
      return msg + ": " + fe->code().message();
    }
  }
  return e.what();
}

int report_failure(const std::string& who, const std::exception& e, const ErrorAdvice& advice) {
  const ExitCode code = exit_code_for(e);
  std::fprintf(stderr, "%s: %s\n", who.c_str(), error_message(e).c_str());
  if (advice) advice(e, code);
  return to_int(code);
}

int run_command(const std::string& who, const std::function<int()>& body,
                const ErrorAdvice& advice) {
  try {
    return body();
  } catch (const std::exception& e) {
    return report_failure(who, e, advice);
  } catch (...) {
    std::fprintf(stderr, "%s: unknown error\n", who.c_str());
    return to_int(ExitCode::kError);
  }
}

}  // namespace dscache
