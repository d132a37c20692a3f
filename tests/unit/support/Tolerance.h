//===- Tolerance.h - DESIGN's numeric tolerances, for every test suite ----===//

#ifndef AMPJIT_TESTS_UNIT_SUPPORT_TOLERANCE_H
#define AMPJIT_TESTS_UNIT_SUPPORT_TOLERANCE_H

#include "ampjit/runtime/DType.h"

namespace ampjit::testing {

/// DESIGN's tolerances for a result rounded once to its dtype, compared with a
/// double reference computed from the already-rounded inputs:
/// |actual - expected| <= atol + rtol * |expected|.
struct Tolerance {
  double rtol;
  double atol;
};

inline Tolerance toleranceFor(runtime::DType dtype) {
  switch (dtype) {
  case runtime::DType::F16: return {1e-3, 1e-5};
  case runtime::DType::BF16: return {1.6e-2, 1e-5};
  case runtime::DType::F32: return {1.3e-6, 1e-5};
  default: return {1e-12, 1e-12};
  }
}

/// `tolerance`, `slack` times wider: for results compared with another
/// computation of the same value (another summation order, another device).
inline Tolerance scaled(Tolerance tolerance, double slack) {
  return {slack * tolerance.rtol, slack * tolerance.atol};
}

} // namespace ampjit::testing

#endif // AMPJIT_TESTS_UNIT_SUPPORT_TOLERANCE_H
