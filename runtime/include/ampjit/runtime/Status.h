#ifndef AMPJIT_RUNTIME_STATUS_H
#define AMPJIT_RUNTIME_STATUS_H

// Error reporting for the runtime. The library never throws: it is linked into
// code built with -fno-exceptions (MLIR's) and into the CUDA backend, and a
// corrupt plan file or a wrong argument is an everyday event, not an
// exceptional one. Every fallible function returns a Status or an Expected<T>
// whose message says what went wrong and where (file, section, step, buffer).

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ampjit::runtime {

/// Success, or an error with a message for a person to read.
class [[nodiscard]] Status {
public:
  static Status success() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  explicit operator bool() const { return ok(); }
  /// The error message; empty on success.
  const std::string& message() const {
    static const std::string empty;
    return message_ ? *message_ : empty;
  }

  /// The same error with `context` in front ("while loading plan.bin: ...").
  Status withContext(const std::string& context) const {
    if (ok())
      return *this;
    return Status(context + ": " + *message_);
  }

private:
  Status() = default;
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

/// A value, or the error that prevented computing it.
template <typename T>
class [[nodiscard]] Expected {
public:
  Expected(T value) : storage_(std::move(value)) {}
  /// Only an error Status converts; a successful Status carries no value.
  Expected(Status error) : storage_(std::move(error)) { assert(!std::get<Status>(storage_).ok()); }

  bool ok() const { return std::holds_alternative<T>(storage_); }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<T>(storage_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(storage_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(storage_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  /// The error (success when this holds a value).
  Status status() const { return ok() ? Status::success() : std::get<Status>(storage_); }
  const std::string& message() const {
    static const std::string empty;
    return ok() ? empty : std::get<Status>(storage_).message();
  }

private:
  std::variant<T, Status> storage_;
};

} // namespace ampjit::runtime

/// Returns the error of a Status-valued expression from the enclosing
/// function (which returns Status or Expected<...>).
#define AMPJIT_RETURN_IF_ERROR(expr)                                                               \
  do {                                                                                             \
    ::ampjit::runtime::Status ampjitStatus_ = (expr);                                              \
    if (!ampjitStatus_.ok())                                                                       \
      return ampjitStatus_;                                                                        \
  } while (false)

#endif // AMPJIT_RUNTIME_STATUS_H
