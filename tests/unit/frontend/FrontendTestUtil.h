#ifndef AMPJIT_TESTS_FRONTEND_TESTUTIL_H
#define AMPJIT_TESTS_FRONTEND_TESTUTIL_H

#include "jit/jit.h"

#include "Tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
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

using ampjit::testing::Tolerance;
using ampjit::testing::toleranceFor;

inline void expectClose(const std::vector<double>& actual, const std::vector<double>& expected, Tolerance tolerance,
                        const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_LE(std::fabs(actual[i] - expected[i]), tolerance.atol + tolerance.rtol * std::fabs(expected[i]))
        << what << " element " << i << ": got " << actual[i] << ", expected " << expected[i];
}

/// The same comparison for a whole tensor at once:
/// ||actual - expected||_2 <= atol sqrt(n) + rtol ||expected||_2. For values
/// where a few elements may legitimately move far (a ReLU decided on the
/// other side of zero) while the rest agree.
inline void expectCloseInNorm(const std::vector<double>& actual, const std::vector<double>& expected,
                              Tolerance tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double difference = 0, magnitude = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    difference += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    magnitude += expected[i] * expected[i];
  }
  difference = std::sqrt(difference);
  magnitude = std::sqrt(magnitude);
  EXPECT_LE(difference, tolerance.atol * std::sqrt(double(actual.size())) + tolerance.rtol * magnitude)
      << what << ": |actual - expected| = " << difference << " against |expected| = " << magnitude;
}

} // namespace jit::testing

#endif // AMPJIT_TESTS_FRONTEND_TESTUTIL_H
