#ifndef AMPJIT_RUNTIME_CUDA_COLUMNTILE_H
#define AMPJIT_RUNTIME_CUDA_COLUMNTILE_H

// The tile of a sum over rows: NumericKernels.cu's column reduction and the
// generated column-summed kernels (KernelSource.h) both use it, so both add
// in the same order. Plain C++17: the .cu files include it too.

namespace ampjit::runtime::cuda {

/// Threads of a block across consecutive columns (outputs), each summing one
/// column per lane (NumericKernels.cu's column reduction: two adjacent f16 or
/// bf16 columns, in the same order as one). A column's order depends only on
/// the lanes and on the parts the reduction splits into, which the launcher
/// derives from this tile.
inline constexpr int kColumnTileColumns = 32;
/// Lanes per column, each adding every kColumnTileLanes-th row; the lanes'
/// sums are then added in lane order.
inline constexpr int kColumnTileLanes = 8;

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_CUDA_COLUMNTILE_H
