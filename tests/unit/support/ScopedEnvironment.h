#ifndef AMPJIT_TESTS_UNIT_SUPPORT_SCOPEDENVIRONMENT_H
#define AMPJIT_TESTS_UNIT_SUPPORT_SCOPEDENVIRONMENT_H

// An environment variable set (or, given nullptr, unset) for a scope (the
// runtime's and the backend's knobs, such as AMPJIT_CHECK_NUMERICS or
// AMPJIT_CUDA_FUSED_BN), restored at its end, however the scope ends: a
// failed ASSERT leaves no setting behind for the tests after it.

#include <cstdlib>
#include <optional>
#include <string>

namespace ampjit::testing {

class ScopedEnvironment {
public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* before = std::getenv(name))
      before_ = before;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnvironment() {
    if (before_)
      ::setenv(name_.c_str(), before_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

private:
  std::string name_;
  std::optional<std::string> before_;
};

} // namespace ampjit::testing

#endif // AMPJIT_TESTS_UNIT_SUPPORT_SCOPEDENVIRONMENT_H
