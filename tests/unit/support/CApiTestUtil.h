//===- CApiTestUtil.h - the C API's handles and reads, for its tests ------===//
//
// tests/unit/codegen/CApiTest.cpp (the C API on the CPU) and
// tests/gpu/CApiTest.cpp (its sessions on CUDA) share these.
//
//===----------------------------------------------------------------------===//

#ifndef AMPJIT_TESTS_UNIT_SUPPORT_CAPITESTUTIL_H
#define AMPJIT_TESTS_UNIT_SUPPORT_CAPITESTUTIL_H

#include "ampjit-c/Ampjit.h"

#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <memory>
#include <vector>

namespace ampjit::testing {

struct PlanDeleter {
  void operator()(ampjit_plan* plan) const { ampjit_plan_destroy(plan); }
};
struct SessionDeleter {
  void operator()(ampjit_session* session) const { ampjit_session_destroy(session); }
};
struct HostCopyDeleter {
  void operator()(ampjit_host_copy* copy) const { ampjit_host_copy_destroy(copy); }
};
using PlanHandle = std::unique_ptr<ampjit_plan, PlanDeleter>;
using SessionHandle = std::unique_ptr<ampjit_session, SessionDeleter>;
using HostCopyHandle = std::unique_ptr<ampjit_host_copy, HostCopyDeleter>;

/// What `copy` holds, `bytes` of it, waited for.
inline std::vector<std::byte> waitFor(ampjit_host_copy* copy, size_t bytes) {
  std::vector<std::byte> value(bytes);
  EXPECT_EQ(ampjit_host_copy_wait(copy, value.data(), value.size()), AMPJIT_OK) << ampjit_last_error();
  return value;
}

/// Writes every argument of `plan` a caller writes: derived ones follow
/// their sources.
inline void writeState(ampjit_session* session, const runtime::Plan& plan,
                       const std::vector<runtime::Tensor>& arguments) {
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (plan.buffers[plan.argumentBuffer(i)].derivedFrom >= 0)
      continue;
    ASSERT_EQ(ampjit_session_write(session, i, arguments[i].bytes(), arguments[i].byteSize()), AMPJIT_OK)
        << ampjit_last_error();
  }
}

/// Argument `index`'s bytes as the session holds them.
inline std::vector<std::byte> readArgument(ampjit_session* session, size_t index) {
  ampjit_value_info info;
  EXPECT_EQ(ampjit_plan_argument(ampjit_session_plan(session), index, &info), AMPJIT_OK) << ampjit_last_error();
  std::vector<std::byte> bytes(info.byte_size);
  EXPECT_EQ(ampjit_session_read(session, index, bytes.data(), bytes.size()), AMPJIT_OK) << ampjit_last_error();
  return bytes;
}

/// The last step's result 0, an f32 loss.
inline float readLoss(ampjit_session* session) {
  float loss = NAN;
  EXPECT_EQ(ampjit_session_read_result(session, 0, &loss, sizeof loss), AMPJIT_OK) << ampjit_last_error();
  return loss;
}

} // namespace ampjit::testing

#endif // AMPJIT_TESTS_UNIT_SUPPORT_CAPITESTUTIL_H
