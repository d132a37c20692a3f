#ifndef AMPJIT_TESTS_FRONTEND_TESTUTIL_H
#define AMPJIT_TESTS_FRONTEND_TESTUTIL_H

#include "jit/jit.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace jit::testing {

/// Runs `body` and returns the jit::Error's message ("" if nothing threw).
inline std::string errorOf(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

/// DESIGN's tolerances for comparing with a double reference computed from
/// the rounded inputs: |actual - expected| <= atol + rtol * |expected|.
struct Tolerance {
  double rtol;
  double atol;
};
inline Tolerance toleranceFor(DType dtype) {
  switch (dtype) {
  case DType::F16: return {1e-3, 1e-5};
  case DType::BF16: return {1.6e-2, 1e-5};
  case DType::F32: return {1.3e-6, 1e-5};
  default: return {1e-12, 1e-12};
  }
}

inline void expectClose(const std::vector<double>& actual, const std::vector<double>& expected, Tolerance tolerance,
                        const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_LE(std::fabs(actual[i] - expected[i]), tolerance.atol + tolerance.rtol * std::fabs(expected[i]))
        << what << " element " << i << ": got " << actual[i] << ", expected " << expected[i];
}

} // namespace jit::testing

#endif // AMPJIT_TESTS_FRONTEND_TESTUTIL_H
