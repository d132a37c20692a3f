#ifndef AMPJIT_RUNTIME_NPY_H
#define AMPJIT_RUNTIME_NPY_H

// NumPy .npy files: the one reader and writer behind ampjit-run's --arg and
// --save-results and nn::Module::load_npy. Reads format versions 1 to 3,
// little-endian, C order; writes version 1.0, as np.save does.

#include "ampjit/runtime/Status.h"
#include "ampjit/runtime/Tensor.h"

#include <cstdint>
#include <span>
#include <string>

namespace ampjit::runtime {

/// A host tensor from the bytes of a .npy file. Element types: '<f2', '<f4',
/// '<f8', '<i8', '|b1', and '<i4' (widened to i64: NumPy's int32 labels).
/// Every error names `source` and says what is wrong (magic, version, header,
/// dtype, order, shape, truncation, trailing bytes).
Expected<Tensor> parseNpy(std::span<const uint8_t> bytes, const std::string& source);

/// parseNpy on the file at `path`; a missing file is an error naming it.
Expected<Tensor> readNpy(const std::string& path);

/// Writes `tensor` (host) to `path` as .npy version 1.0. bf16 has no NumPy
/// dtype: it is written widened to f32 (exactly).
Status writeNpy(const std::string& path, const Tensor& tensor);

} // namespace ampjit::runtime

#endif // AMPJIT_RUNTIME_NPY_H
