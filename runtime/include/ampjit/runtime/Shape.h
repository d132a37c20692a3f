#ifndef AMPJIT_RUNTIME_SHAPE_H
#define AMPJIT_RUNTIME_SHAPE_H

// Shapes, strides and numpy broadcasting, shared by the plan verifier, the
// StepBuilder and the kernels so that all three agree on what broadcasts.

#include "ampjit/runtime/DType.h"
#include "ampjit/runtime/ElementCount.h"
#include "ampjit/runtime/Status.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ampjit::runtime {

/// Dimension sizes, outermost first. Rank 0 (empty) is a scalar.
using Shape = std::vector<int64_t>;

/// Element count of a shape already known to be valid.
int64_t elementCount(std::span<const int64_t> shape);

/// Row-major contiguous strides in elements (the last dimension has stride 1).
std::vector<int64_t> contiguousStrides(std::span<const int64_t> shape);

/// `[64x784]`, `[]` for a scalar.
std::string shapeToString(std::span<const int64_t> shape);

/// A dtype and a shape: what an operand or a buffer holds.
struct TensorType {
  DType dtype = DType::F32;
  Shape shape{};

  int64_t elementCount() const { return runtime::elementCount(shape); }
  int64_t byteSize() const { return elementCount() * int64_t(dtypeSize(dtype)); }
  friend bool operator==(const TensorType&, const TensorType&) = default;
};

/// `f32[64x784]`.
std::string typeToString(const TensorType& type);

/// True when `from` broadcasts to `to` by numpy rules (dimensions aligned from
/// the right, each 1 or equal; `from` may have lower rank).
bool broadcastsTo(std::span<const int64_t> from, std::span<const int64_t> to);

/// The numpy broadcast of several shapes, or an error naming the two
/// dimensions that disagree.
Expected<Shape> broadcastShapes(std::span<const Shape> shapes);

/// Strides (in elements) for reading a contiguous tensor of shape `from` as if
/// it had the broadcast shape `to`: 0 along broadcast dimensions, and one
/// entry per dimension of `to`. Requires broadcastsTo(from, to).
std::vector<int64_t> broadcastStrides(std::span<const int64_t> from, std::span<const int64_t> to);

/// For each index of `to` in row-major order, the row-major linear index of
/// the element of `from` it reads when `from` is broadcast to `to` (the batch
/// entries of a broadcast GEMM operand). Requires broadcastsTo(from, to).
std::vector<int64_t> broadcastOffsets(const Shape& from, const Shape& to);

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_SHAPE_H
