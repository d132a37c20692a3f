#ifndef AMPJIT_RUNTIME_CUDA_KERNELSOURCE_H
#define AMPJIT_RUNTIME_CUDA_KERNELSOURCE_H

// CUDA C++ source for the plan's Elementwise and FusedElementwise steps.
//
// Plain C++: this header and its implementation include no CUDA header and
// are built with CUDA on or off, so codegen tests and plan tools can look at
// the kernels on any machine (NVRTC compiles them in the CUDA build only).
//
// One generator serves both step kinds: an Elementwise step is the program
// "load every input, apply the op". The generated code mirrors the CPU
// evaluator (runtime/lib/cpu/Elementwise.cpp) operation by operation: f16/bf16
// registers are floats rounded to nearest even after every instruction, f64
// registers compute in double, i64/i1 registers are 64-bit integers, and
// the expressions are written in the CPU's order. Compiled without FMA
// contraction (Nvrtc.cpp always passes --fmad=false), the results agree with
// the CPU bit for bit except for last-ulp differences of the device's
// transcendental functions (tanh, exp, log, erf, pow).
//
// Shapes are kernel arguments, not part of the source: identical programs
// over differently shaped buffers share one kernel, whose name is a hash of
// its source body.

#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/cuda/ColumnTile.h"
#include "ampjit/runtime/Status.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ampjit::runtime::cuda {

/// Most dimensions a generated kernel indexes, after collapsing dimensions
/// that every operand traverses contiguously (see ElementwiseLaunch::dims).
inline constexpr int kMaxKernelRank = 8;

/// Threads per block the generated kernels are written for (grid-stride loop,
/// so any grid size is correct).
inline constexpr int kElementwiseBlockSize = 256;
/// Elements a thread loads before it computes and stores any of them, a
/// grid apart, in each pass of a generated kernel's grid-stride loop.
inline constexpr int kSlotsPerPass = 4;
/// Consecutive elements a thread of a generated kernel takes in one chunk
/// where every operand is contiguous or broadcast along the innermost
/// dimension: each input and output in 16-byte accesses (8-byte for 1-byte
/// elements).
inline constexpr int kChunkElements = 8;

static_assert(kColumnTileColumns * kColumnTileLanes == kElementwiseBlockSize);

/// The kernel's `AmpjitDims` argument type, byte for byte: dimension sizes or
/// element strides, unused entries 0.
struct KernelDims {
  int64_t values[kMaxKernelRank] = {};
};
static_assert(sizeof(KernelDims) == 8 * kMaxKernelRank);

/// Everything a backend needs to launch the kernel for one step. The kernel's
/// parameters, in order:
///
///   long long count,              // elementCount
///   int rank,                     // dims.size()
///   AmpjitDims dims,              // dims, as KernelDims
///   then per input k:  const T_k* in_k, AmpjitDims stride_k   (inputStrides[k])
///   then per output k: T_k* out_k
///
/// where T is float, double, __half, __nv_bfloat16, long long or unsigned
/// char (i1, one byte) by the buffer's dtype. Outputs are contiguous. A
/// column-summed kernel (summedRows > 0) ends with `long long rows` after
/// its outputs, the last of which is the f32 column sums.
struct ElementwiseLaunch {
  /// step.inputs and step.outputs, in kernel parameter order (a
  /// column-summed kernel: the outputs it stores, then the sums).
  std::vector<BufferId> inputs{};
  std::vector<BufferId> outputs{};
  /// A column-summed kernel's rows (the summed output's first dimension);
  /// 0 for a plain elementwise kernel.
  int64_t summedRows = 0;
  /// Where a launch group's slots hold the kernel's parameters: the group's
  /// input and output slot counts, and per kernel output its output slot.
  /// Empty: the slots are the kernel's own, in order (one step).
  std::size_t groupInputs = 0, groupOutputs = 0;
  std::vector<std::size_t> outputSlots{};
  /// Elements of each output (the broadcast shape's element count).
  int64_t elementCount = 0;
  /// The output shape with size-1 dimensions dropped and neighbouring
  /// dimensions merged where every input steps through them contiguously
  /// (or not at all), so a same-shape operand indexes with rank 1.
  std::vector<int64_t> dims{};
  /// Per input, its element stride along each of `dims`: 0 where it is
  /// broadcast.
  std::vector<std::vector<int64_t>> inputStrides{};

  /// The kernel's `dims` and `stride_k` arguments.
  KernelDims packedDims() const;
  KernelDims packedStrides(size_t input) const;
  /// Blocks of kElementwiseBlockSize threads for one thread per element
  /// (a column-summed kernel: one block per tile of kColumnTileColumns),
  /// capped at `maxBlocks` (the grid-stride loop covers the rest); at least 1.
  int64_t gridSize(int64_t maxBlocks) const;
  /// gridSize on a device of `multiprocessors` SMs: enough blocks to fill it
  /// several times over.
  int64_t gridSizeOn(int multiprocessors) const { return gridSize(int64_t(multiprocessors < 1 ? 1 : multiprocessors) * 16); }
};

/// A generated kernel's parameters for one launch, in the order above, as
/// cudaLaunchKernel takes them: the address of each. One definition of the
/// signature's order for the device launch and for the host emulation
/// (tests/emulation) alike.
class ElementwiseKernelArguments {
public:
  explicit ElementwiseKernelArguments(const ElementwiseLaunch& launch);

  /// The parameter addresses for a launch over `inputs` and `outputs` (the
  /// step's, or the launch group's, buffers in slot order); valid until the
  /// next call. An error when the counts are not the step's (group's).
  Expected<std::span<void*>> bind(std::span<void* const> inputs, std::span<void* const> outputs);

  int64_t elementCount() const { return count_; }

private:
  long long count_;
  int rank_;
  KernelDims dims_;
  std::vector<KernelDims> strides_;
  std::size_t groupInputs_, groupOutputs_;
  std::vector<std::size_t> outputSlots_;
  long long summedRows_;
  std::vector<void*> inputPointers_{}, outputPointers_{}, addresses_{};
};

struct ElementwiseKernel {
  /// `ampjit_elementwise_<16 hex digits>`: a hash of the source without its
  /// step comment, so identical programs on identical dtypes share a name.
  std::string name{};
  /// The whole translation unit (includes cuda_fp16.h and cuda_bf16.h); the
  /// first lines say which plan step it was generated for.
  std::string source{};
  ElementwiseLaunch launch{};
};

/// The kernel for `step`, an Elementwise or FusedElementwise step whose
/// buffer ids refer to `plan.buffers`. The step is checked against those
/// buffers' types first, so a malformed step is an error message, not bad
/// code. When `step` is one of `plan.steps` the source's comment quotes it
/// as the printed plan does; otherwise the comment gives its origin only.
Expected<ElementwiseKernel> emitElementwiseKernel(const Plan& plan, const Step& step);

/// The kernel for an Elementwise or FusedElementwise step `step` and the
/// f32 sum over the first dimension (`sum`, the Reduction step after it) of
/// one of its f32 outputs, in one launch (see columnSummedElementwiseAt in
/// the backend): each block evaluates the program on a tile of
/// kColumnTileColumns columns, kColumnTileLanes lanes striding over the
/// rows, stores every other output, and adds the summed output in
/// registers, never storing it; the lanes combine in lane order. That is
/// the order of NumericKernels.cu's one-pass column reduction, so the sums
/// have the bits the two steps have apart. The launch's slots are the
/// group's: both steps' inputs, then both steps' outputs.
Expected<ElementwiseKernel> emitColumnSummedKernel(const Plan& plan, const Step& step, const Step& sum);

/// The launch geometry alone (dimension collapsing and broadcast strides) of
/// inputs of these shapes over an output of shape `outputShape`.
Expected<ElementwiseLaunch> describeElementwiseLaunch(const std::vector<Shape>& inputShapes,
                                                      const Shape& outputShape);

/// T above: a buffer element of `dtype` in device code (i1 is one byte).
const char* deviceElementTypeName(DType dtype);

} // namespace ampjit::runtime::cuda

#endif // AMPJIT_RUNTIME_CUDA_KERNELSOURCE_H
