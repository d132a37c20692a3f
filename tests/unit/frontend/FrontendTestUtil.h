#ifndef AMPJIT_TESTS_FRONTEND_TESTUTIL_H
#define AMPJIT_TESTS_FRONTEND_TESTUTIL_H

#include "jit/jit.h"

#include "Tolerance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

/// `x` with element `index` (in row-major order) made +inf: a batch whose
/// f16 gradients overflow, so a loss scaler skips the step.
inline Tensor withInfAt(const Tensor& x, size_t index) {
  std::vector<double> values = x.to_vector();
  values.at(index) = std::numeric_limits<double>::infinity();
  return tensor(values, x.shape());
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

/// Level `level` in `dtype` (O0 has no low type).
inline amp::Policy policyAt(amp::Level level, DType dtype = f16) {
  return level == amp::O0 ? amp::Policy{.level = amp::O0} : amp::Policy{.level = level, .dtype = dtype};
}

/// Traces `traced(x, y)` on the CPU at `level` with autocast semantics and
/// calls it beside `eager(x, y)` on `calls` batches from `batchAt(i)`, both
/// inside a `dtype` autocast scope above O0, as a user runs eager AMP code:
/// every loss must be bit for bit the eager one, with one trace. The callers
/// compare the state afterwards.
template <typename Eager, typename Traced, typename BatchAt>
void expectTracedLossesEqualEager(amp::Level level, Eager eager, Traced traced, BatchAt batchAt, int calls,
                                  DType dtype = f16) {
  auto step = trace([&](const Tensor& x, const Tensor& y) { return traced(x, y); },
                    {.amp = policyAt(level, dtype), .semantics = amp::Semantics::autocast, .backend = Backend::cpu});
  for (int i = 0; i < calls; ++i) {
    auto [x, y] = batchAt(uint64_t(i));
    std::optional<amp::autocast> scope;
    if (level != amp::O0)
      scope.emplace(amp::AutocastOptions{.dtype = dtype});
    EXPECT_EQ(step(x, y).item(), eager(x, y).item()) << "call " << i;
  }
  EXPECT_EQ(step.stats().traces, 1u);
}

/// Every entry of two state_dicts, bit for bit, named.
inline void expectSameState(const std::vector<NamedTensor>& actual, const std::vector<NamedTensor>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(actual[k].first, expected[k].first);
    EXPECT_EQ(actual[k].second.to_vector(), expected[k].second.to_vector()) << expected[k].first;
  }
}

} // namespace jit::testing

#endif // AMPJIT_TESTS_FRONTEND_TESTUTIL_H
