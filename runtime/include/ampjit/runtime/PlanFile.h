#ifndef AMPJIT_RUNTIME_PLANFILE_H
#define AMPJIT_RUNTIME_PLANFILE_H

// The binary plan file (docs/plan-format.md): magic "AMPJPLAN", a format
// version, little-endian length-checked sections and a checksum. Reading
// validates everything (the bytes, then verifyPlan), so a truncated,
// corrupted, foreign or inconsistent file is a clear error naming the file,
// the section, step or buffer, and what is wrong.

#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Status.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ampjit::runtime {

/// The version this library writes and the only one it reads. Bump it for
/// any change to the encoding or to the meaning of a stored field.
// 2: GemmParams::epilogue. 3: the GELU, GELU-gradient and bias-gradient
// epilogues (their extra slots change what a gemm step reads and writes), and
// BatchNormParams::activation, with BatchNormGrad carrying BatchNormGradParams
// (axis, activation) instead of AxisParams. 4: Plan::deferredSteps and the
// carried buffer role. 6: adam's max_exp_avg_sq slots (AMSGrad) move step,
// lr, inv_scale, predicate and param_copy one input later. 7: Plan::sideSteps,
// and conv2d_grad_input's optional 'accumulate' input (added to in place).
inline constexpr uint32_t kPlanFormatVersion = 8;

/// The file's bytes. Does not verify the plan (tests encode broken plans on
/// purpose; savePlan verifies first).
std::vector<uint8_t> encodePlan(const Plan& plan);

/// Parses and verifies a plan from bytes; `sourceName` (a path, or a
/// description) starts every error message.
Expected<Plan> decodePlan(std::span<const uint8_t> bytes, std::string_view sourceName);

/// Verifies the plan and writes it to `path`.
Status savePlan(const Plan& plan, const std::string& path);
/// Reads, parses and verifies the plan in `path`.
Expected<Plan> loadPlan(const std::string& path);

/// The checksum stored in the last 8 bytes of a file, computed over `bytes`
/// (everything before it): 64-bit FNV-1a. Exposed so that tests can corrupt a
/// field and still get past the checksum to the check they mean to exercise.
uint64_t planChecksum(std::span<const uint8_t> bytes);

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_PLANFILE_H
