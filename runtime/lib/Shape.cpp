#include "ampjit/runtime/Shape.h"

#include <algorithm>

namespace ampjit::runtime {

int64_t elementCount(std::span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

std::vector<int64_t> contiguousStrides(std::span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

std::string shapeToString(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0)
      text += 'x';
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::string typeToString(const TensorType& type) {
  return std::string(dtypeName(type.dtype)) + shapeToString(type.shape);
}

bool broadcastsTo(std::span<const int64_t> from, std::span<const int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t offset = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[offset + i])
      return false;
  return true;
}

Expected<Shape> broadcastShapes(std::span<const Shape> shapes) {
  size_t rank = 0;
  for (const Shape& shape : shapes)
    rank = std::max(rank, shape.size());
  Shape result(rank, 1);
  // Which operand fixed each result dimension, to name both sides of a conflict.
  std::vector<size_t> decidedBy(rank, 0);
  for (size_t operand = 0; operand < shapes.size(); ++operand) {
    const Shape& shape = shapes[operand];
    size_t offset = rank - shape.size();
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t dim = shape[i];
      int64_t& current = result[offset + i];
      if (dim == current || dim == 1)
        continue;
      if (current == 1) {
        current = dim;
        decidedBy[offset + i] = operand;
        continue;
      }
      return Status::error("operand " + std::to_string(operand) + " of shape " + shapeToString(shape) +
                           " does not broadcast with operand " + std::to_string(decidedBy[offset + i]) +
                           " of shape " + shapeToString(shapes[decidedBy[offset + i]]) +
                           ": result dimension " + std::to_string(offset + i) + " would be both " +
                           std::to_string(current) + " and " + std::to_string(dim));
    }
  }
  return result;
}

std::vector<int64_t> broadcastStrides(std::span<const int64_t> from, std::span<const int64_t> to) {
  std::vector<int64_t> strides(to.size(), 0);
  std::vector<int64_t> own = contiguousStrides(from);
  size_t offset = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    strides[offset + i] = from[i] == 1 ? 0 : own[i];
  return strides;
}

std::vector<int64_t> broadcastOffsets(const Shape& from, const Shape& to) {
  std::vector<int64_t> strides = broadcastStrides(from, to);
  int64_t count = elementCount(to);
  std::vector<int64_t> offsets(size_t(count), 0);
  std::vector<int64_t> index(to.size(), 0);
  int64_t offset = 0;
  for (int64_t b = 0; b < count; ++b) {
    offsets[size_t(b)] = offset;
    for (size_t d = to.size(); d-- > 0;) {
      offset += strides[d];
      if (++index[d] < to[d])
        break;
      offset -= strides[d] * index[d];
      index[d] = 0;
    }
  }
  return offsets;
}

} // namespace ampjit::runtime
