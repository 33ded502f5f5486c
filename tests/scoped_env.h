// ScopedEnv: an environment variable set (or unset) for one scope, then put back.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace dscache {
namespace test {

// Not thread-safe (setenv): use where no other thread reads the environment.
class ScopedEnv {
 public:
  // `value` null: unset for the scope.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace test
}  // namespace dscache
