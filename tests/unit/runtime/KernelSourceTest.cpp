// CUDA source generation for elementwise steps (runtime/cuda/KernelSource.h):
// the structure of the emitted code, stable and shared kernel names, and the
// broadcast geometry passed as kernel arguments. Built with CUDA on or off;
// tests/unit/cuda compiles the sources with NVRTC when CUDA is on.

#include "ampjit/runtime/LowPrecision.h"
#include "ampjit/runtime/cuda/KernelSource.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <regex>

namespace rt = ampjit::runtime;
namespace cuda = ampjit::runtime::cuda;

namespace {

/// f64 when any buffer or register of the step is f64, as verifyPlan requires.
rt::DType computeTypeOf(const rt::StepParams& params, const std::vector<rt::DType>& dtypes) {
  bool anyDouble = std::find(dtypes.begin(), dtypes.end(), rt::DType::F64) != dtypes.end();
  if (const auto* fused = std::get_if<rt::FusedElementwiseParams>(&params))
    for (const rt::FusedInstruction& instruction : fused->program)
      anyDouble |= instruction.type == rt::DType::F64;
  return anyDouble ? rt::DType::F64 : rt::DType::F32;
}

/// A plan whose buffers are `inputs` then `outputs` and whose one step reads
/// and writes them in order.
rt::Plan planWithStep(rt::StepKind kind, rt::StepParams params, const std::vector<rt::TensorType>& inputs,
                      const std::vector<rt::TensorType>& outputs, std::string origin = "test") {
  rt::Plan plan;
  plan.name = "kernel_source_test";
  rt::Step step;
  step.kind = kind;
  step.params = std::move(params);
  step.origin = std::move(origin);
  for (const rt::TensorType& type : inputs) {
    step.inputs.push_back(rt::BufferId(plan.buffers.size()));
    plan.buffers.push_back(rt::BufferDesc{.type = type, .role = rt::BufferRole::Input});
  }
  for (const rt::TensorType& type : outputs) {
    step.outputs.push_back(rt::BufferId(plan.buffers.size()));
    plan.buffers.push_back(rt::BufferDesc{.type = type, .role = rt::BufferRole::Output});
  }
  std::vector<rt::DType> dtypes;
  for (const rt::BufferDesc& buffer : plan.buffers)
    dtypes.push_back(buffer.type.dtype);
  step.computeType = computeTypeOf(step.params, dtypes);
  plan.steps.push_back(std::move(step));
  return plan;
}

rt::Plan binaryPlan(rt::ElementwiseOp op, rt::DType dtype, rt::Shape lhs, rt::Shape rhs, rt::Shape out) {
  return planWithStep(rt::StepKind::Elementwise, rt::ElementwiseParams{op, 0.0},
                      {{dtype, std::move(lhs)}, {dtype, std::move(rhs)}}, {{dtype, std::move(out)}});
}

cuda::ElementwiseKernel emit(const rt::Plan& plan, size_t step = 0) {
  rt::Expected<cuda::ElementwiseKernel> kernel = cuda::emitElementwiseKernel(plan, plan.steps.at(step));
  EXPECT_TRUE(kernel) << kernel.message();
  return kernel ? *kernel : cuda::ElementwiseKernel{};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// The source without its leading step comment (everything before the first
/// blank line), i.e. the part the kernel name is a hash of.
std::string withoutStepComment(const std::string& source) { return source.substr(source.find("\n\n") + 2); }

std::string floatLiteral(float value) {
  char text[64];
  std::snprintf(text, sizeof text, "(%af)", double(value));
  return text;
}

} // namespace

TEST(KernelSource, ElementwiseStepIsALoadLoadOpProgram) {
  rt::Plan plan = binaryPlan(rt::ElementwiseOp::Add, rt::DType::F16, {4, 8}, {8}, {4, 8});
  cuda::ElementwiseKernel kernel = emit(plan);
  EXPECT_TRUE(std::regex_match(kernel.name, std::regex("ampjit_elementwise_[0-9a-f]{16}"))) << kernel.name;
  const std::string& source = kernel.source;
  EXPECT_TRUE(contains(source, "#include <cuda_fp16.h>"));
  EXPECT_TRUE(contains(source, "#include <cuda_bf16.h>"));
  EXPECT_TRUE(contains(source, "extern \"C\" __global__ void __launch_bounds__(256)\n" + kernel.name +
                                   "(long long count, int rank, AmpjitDims dims"));
  EXPECT_TRUE(contains(source, "const __half* in0, AmpjitDims stride0"));
  EXPECT_TRUE(contains(source, "const __half* in1, AmpjitDims stride1"));
  EXPECT_TRUE(contains(source, "__half* out0)"));
  // Grid-stride loop over the output, four elements a pass, all loaded
  // before any is computed.
  EXPECT_TRUE(contains(source, "first < count; first += 4 * step)"));
  EXPECT_TRUE(contains(source, "float loaded0[4];\n    float loaded1[4];"));
  // Widened on load, rounded to f16 after the op, stored with round-to-nearest-even.
  EXPECT_TRUE(contains(source, "loaded0[slot] = __half2float(in0[offset0]);"));
  EXPECT_TRUE(contains(source, "loaded1[slot] = __half2float(in1[offset1]);"));
  EXPECT_LT(source.find("loaded1[slot] = "), source.find("out0[i] = ", source.find("first < count")));
  EXPECT_TRUE(contains(source, "const float r0 = loaded0[slot];"));
  EXPECT_TRUE(contains(source, "const float r1 = loaded1[slot];"));
  EXPECT_TRUE(contains(source, "const float r2 = ampjit_round_f16(r0 + r1);"));
  EXPECT_TRUE(contains(source, "out0[i] = __float2half_rn(r2);"));
  // The comment names the plan step it was generated for.
  EXPECT_EQ(source.rfind("// Generated by ampjit for plan 'kernel_source_test':\n//   step 0: elementwise add", 0), 0u)
      << source.substr(0, 200);
}

TEST(KernelSource, MemoryBoundProgramsTakeChunksInWholeAccessesBeforeTheGridStrideLoop) {
  rt::Plan plan = binaryPlan(rt::ElementwiseOp::Add, rt::DType::F16, {4, 8}, {8}, {4, 8});
  const std::string source = emit(plan).source;
  // Only where every input is contiguous or broadcast along the innermost
  // dimension, chunks stay in rows, and every chunk of every operand starts
  // aligned (the pointers, and outer strides of whole chunks): decided once,
  // so the chunks' loop has no test of its own.
  EXPECT_TRUE(contains(source, "if (rank >= 1 && (rank == 1 || dims.v[inner] % 8 == 0)\n"
                               "      && (stride0.v[inner] == 0 || (stride0.v[inner] == 1 && "
                               "ampjit_chunks_aligned(in0, stride0, rank)))\n"
                               "      && (stride1.v[inner] == 0 || (stride1.v[inner] == 1 && "
                               "ampjit_chunks_aligned(in1, stride1, rank)))\n"
                               "      && ampjit_chunk_aligned(out0)) {"));
  EXPECT_TRUE(contains(source, "for (long long chunk = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
                               "chunk < chunks; chunk += step) {\n      const long long i = chunk * 8;"));
  // Every input's chunk is loaded (a broadcast one splat) before any lane
  // computes.
  EXPECT_TRUE(contains(source, "const AmpjitChunk<__half> chunk0 = stride0.v[inner] == 0 ? "
                               "ampjit_splat_chunk(in0[offset0]) : ampjit_load_chunk(in0 + offset0);"));
  EXPECT_LT(source.find("chunk1 = "), source.find("for (int lane = 0; lane < 8; ++lane)"));
  EXPECT_TRUE(contains(source, "const float r2 = ampjit_round_f16(r0 + r1);\n        stored0.v[lane] = "
                               "__float2half_rn(r2);"));
  EXPECT_TRUE(contains(source, "ampjit_store_chunk(out0 + i, stored0);"));
  // What the chunks leave (a vector's last elements), and the whole of a
  // kernel whose operands are not chunk-aligned, goes to the grid-stride
  // loop, which starts where the chunks stopped.
  EXPECT_LT(source.find("start = chunks * 8;"), source.find("for (long long first = start + "));
  EXPECT_FALSE(contains(source, "#pragma unroll 1")) << "no loop of its own for the last chunk";

  // A program with a transcendental function or in f64 computes more than
  // it moves: it keeps the grid-stride loop alone (and NVRTC's time).
  for (rt::Plan computing :
       {planWithStep(rt::StepKind::Elementwise, rt::ElementwiseParams{rt::ElementwiseOp::Tanh, 0.0},
                     {{rt::DType::F16, {4, 8}}}, {{rt::DType::F16, {4, 8}}}),
        binaryPlan(rt::ElementwiseOp::Add, rt::DType::F64, {4, 8}, {8}, {4, 8})}) {
    const std::string text = emit(computing).source;
    EXPECT_FALSE(contains(text, "ampjit_load_chunk(in")) << text;
    EXPECT_TRUE(contains(text, "first < count; first += 4 * step)"));
  }
}

TEST(KernelSource, BroadcastStridesAreKernelArguments) {
  rt::Plan plan = binaryPlan(rt::ElementwiseOp::Mul, rt::DType::F32, {4, 8}, {8}, {4, 8});
  cuda::ElementwiseLaunch launch = emit(plan).launch;
  EXPECT_EQ(launch.inputs, (std::vector<rt::BufferId>{0, 1}));
  EXPECT_EQ(launch.outputs, (std::vector<rt::BufferId>{2}));
  EXPECT_EQ(launch.elementCount, 32);
  EXPECT_EQ(launch.dims, (std::vector<int64_t>{4, 8}));
  ASSERT_EQ(launch.inputStrides.size(), 2u);
  EXPECT_EQ(launch.inputStrides[0], (std::vector<int64_t>{8, 1}));
  EXPECT_EQ(launch.inputStrides[1], (std::vector<int64_t>{0, 1}));
  cuda::KernelDims dims = launch.packedDims(), bias = launch.packedStrides(1);
  EXPECT_EQ(dims.values[0], 4);
  EXPECT_EQ(dims.values[1], 8);
  EXPECT_EQ(dims.values[2], 0);
  EXPECT_EQ(bias.values[0], 0);
  EXPECT_EQ(bias.values[1], 1);
  EXPECT_EQ(launch.gridSize(1024), 1);
}

TEST(KernelSource, ContiguousDimensionsCollapse) {
  // Same shapes: one dimension, stride 1.
  rt::Expected<cuda::ElementwiseLaunch> same = cuda::describeElementwiseLaunch({{2, 3, 4}, {2, 3, 4}}, {2, 3, 4});
  ASSERT_TRUE(same) << same.message();
  EXPECT_EQ(same->dims, (std::vector<int64_t>{24}));
  EXPECT_EQ(same->inputStrides[0], (std::vector<int64_t>{1}));
  EXPECT_EQ(same->inputStrides[1], (std::vector<int64_t>{1}));

  // A row vector over [2, 3, 4]: the two outer dimensions merge (both stride 0 for it).
  rt::Expected<cuda::ElementwiseLaunch> row = cuda::describeElementwiseLaunch({{2, 3, 4}, {4}}, {2, 3, 4});
  ASSERT_TRUE(row) << row.message();
  EXPECT_EQ(row->dims, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(row->inputStrides[0], (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(row->inputStrides[1], (std::vector<int64_t>{0, 1}));

  // Outer-product-like broadcasts keep every dimension; size-1 ones vanish.
  rt::Expected<cuda::ElementwiseLaunch> mixed =
      cuda::describeElementwiseLaunch({{3, 1, 5}, {1, 4, 1}}, {1, 3, 4, 5});
  ASSERT_TRUE(mixed) << mixed.message();
  EXPECT_EQ(mixed->elementCount, 60);
  EXPECT_EQ(mixed->dims, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(mixed->inputStrides[0], (std::vector<int64_t>{5, 0, 1}));
  EXPECT_EQ(mixed->inputStrides[1], (std::vector<int64_t>{0, 1, 0}));

  // A rank-0 output: no dimensions, one element, every offset 0.
  rt::Expected<cuda::ElementwiseLaunch> scalar = cuda::describeElementwiseLaunch({{}, {}}, {});
  ASSERT_TRUE(scalar) << scalar.message();
  EXPECT_EQ(scalar->elementCount, 1);
  EXPECT_TRUE(scalar->dims.empty());
  EXPECT_EQ(scalar->gridSize(1024), 1);
}

TEST(KernelSource, TooManyDimensionsAfterCollapsingIsAnError) {
  // Alternating broadcasts cannot merge: ten dimensions.
  rt::Shape out(10, 2), lhs, rhs;
  for (int d = 0; d < 10; ++d) {
    lhs.push_back(d % 2 ? 2 : 1);
    rhs.push_back(d % 2 ? 1 : 2);
  }
  rt::Expected<cuda::ElementwiseLaunch> launch = cuda::describeElementwiseLaunch({lhs, rhs}, out);
  ASSERT_FALSE(launch);
  EXPECT_TRUE(contains(launch.message(), "10 dimensions")) << launch.message();
}

TEST(KernelSource, IdenticalProgramsShareAStableName) {
  rt::Plan small = binaryPlan(rt::ElementwiseOp::Add, rt::DType::BF16, {4}, {4}, {4});
  rt::Plan large = binaryPlan(rt::ElementwiseOp::Add, rt::DType::BF16, {64, 128}, {128}, {64, 128});
  cuda::ElementwiseKernel first = emit(small), again = emit(small), other = emit(large);
  EXPECT_EQ(first.name, again.name);
  EXPECT_EQ(first.source, again.source);
  // Shapes are arguments: the same program on other shapes is the same kernel.
  EXPECT_EQ(first.name, other.name);
  EXPECT_EQ(withoutStepComment(first.source), withoutStepComment(other.source));

  // Another dtype or another op is another kernel.
  EXPECT_NE(first.name, emit(binaryPlan(rt::ElementwiseOp::Add, rt::DType::F16, {4}, {4}, {4})).name);
  EXPECT_NE(first.name, emit(binaryPlan(rt::ElementwiseOp::Sub, rt::DType::BF16, {4}, {4}, {4})).name);
  EXPECT_NE(first.name, emit(binaryPlan(rt::ElementwiseOp::Add, rt::DType::F32, {4}, {4}, {4})).name);
}

TEST(KernelSource, TwoStepsOfOnePlanWithOneProgramShareTheKernel) {
  rt::Plan plan = binaryPlan(rt::ElementwiseOp::Div, rt::DType::F32, {16}, {16}, {16});
  rt::Step second = plan.steps[0];
  second.inputs = {2, 0};
  second.outputs = {1};
  second.origin = "jit.div #2";
  plan.steps.push_back(second);
  cuda::ElementwiseKernel a = emit(plan, 0), b = emit(plan, 1);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(withoutStepComment(a.source), withoutStepComment(b.source));
  EXPECT_TRUE(contains(b.source, "step 1: elementwise div")) << b.source.substr(0, 200);
  EXPECT_TRUE(contains(b.source, "jit.div #2"));
  EXPECT_EQ(b.launch.inputs, (std::vector<rt::BufferId>{2, 0}));
}

TEST(KernelSource, FusedProgramIsOneStatementPerInstruction) {
  // relu(x + b) in f16 stored, and its f32 widening: two outputs.
  rt::FusedElementwiseParams params;
  using rt::ElementwiseOp;
  params.program = {
      {ElementwiseOp::Load, rt::DType::F16, {0, 0, 0}, 0.0},
      {ElementwiseOp::Load, rt::DType::F16, {1, 0, 0}, 0.0},
      {ElementwiseOp::Add, rt::DType::F16, {0, 1, 0}, 0.0},
      {ElementwiseOp::Relu, rt::DType::F16, {2, 0, 0}, 0.0},
      {ElementwiseOp::Constant, rt::DType::F16, {0, 0, 0}, 0.1},
      {ElementwiseOp::Mul, rt::DType::F16, {3, 4, 0}, 0.0},
      {ElementwiseOp::Convert, rt::DType::F32, {5, 0, 0}, 0.0},
      {ElementwiseOp::CmpGt, rt::DType::I1, {3, 4, 0}, 0.0},
  };
  params.outputs = {5, 6, 7};
  rt::Plan plan = planWithStep(rt::StepKind::FusedElementwise, params,
                               {{rt::DType::F16, {32, 10}}, {rt::DType::F16, {10}}},
                               {{rt::DType::F16, {32, 10}}, {rt::DType::F32, {32, 10}}, {rt::DType::I1, {32, 10}}},
                               "fused: jit.add #1, jit.relu #2");
  cuda::ElementwiseKernel kernel = emit(plan);
  const std::string& source = kernel.source;
  EXPECT_TRUE(contains(source, "fused: jit.add #1, jit.relu #2"));
  EXPECT_TRUE(contains(source, "// r2: add f16 r0, r1\n      const float r2 = ampjit_round_f16(r0 + r1);"));
  EXPECT_TRUE(contains(source, "const float r3 = ampjit_round_f16((r2 < 0.0f ? 0.0f : r2));"));
  // The constant is rounded to f16 on the host, as the CPU rounds it, and printed exactly.
  float tenth = rt::halfToFloat(rt::doubleToHalf(0.1));
  EXPECT_TRUE(contains(source, "const float r4 = " + floatLiteral(tenth) + ";")) << source;
  EXPECT_TRUE(contains(source, "const float r6 = r5;")); // f16 -> f32 is exact
  EXPECT_TRUE(contains(source, "const long long r7 = (r3 > r4 ? 1LL : 0LL);"));
  EXPECT_TRUE(contains(source, "__half* out0,\n    float* out1,\n    unsigned char* out2)"));
  EXPECT_TRUE(contains(source, "out0[i] = __float2half_rn(r5);"));
  EXPECT_TRUE(contains(source, "out1[i] = r6;"));
  EXPECT_TRUE(contains(source, "out2[i] = (unsigned char)(r7 != 0 ? 1 : 0);"));
  EXPECT_EQ(kernel.launch.outputs.size(), 3u);
  EXPECT_EQ(kernel.launch.dims, (std::vector<int64_t>{32, 10}));
}

TEST(KernelSource, ConversionsFollowTheCpuEvaluator) {
  auto convert = [](rt::DType from, rt::DType to) {
    rt::Plan plan = planWithStep(rt::StepKind::Elementwise, rt::ElementwiseParams{rt::ElementwiseOp::Convert, 0.0},
                                 {{from, {3}}}, {{to, {3}}});
    return emit(plan).source;
  };
  EXPECT_TRUE(contains(convert(rt::DType::F32, rt::DType::I64), "= ampjit_truncate_i64((double)r0);"));
  EXPECT_TRUE(contains(convert(rt::DType::BF16, rt::DType::I1), "= (r0 != 0.0f ? 1LL : 0LL);"));
  EXPECT_TRUE(contains(convert(rt::DType::F64, rt::DType::F16), "= ampjit_f16_from_double(r0);"));
  EXPECT_TRUE(contains(convert(rt::DType::I64, rt::DType::BF16), "= ampjit_bf16_from_double((double)r0);"));
  // i64 -> f32 rounds through double, as the CPU's does.
  EXPECT_TRUE(contains(convert(rt::DType::I64, rt::DType::F32), "= (float)(double)r0;"));
  EXPECT_TRUE(contains(convert(rt::DType::F32, rt::DType::BF16), "= ampjit_round_bf16(r0);"));
  EXPECT_TRUE(contains(convert(rt::DType::I1, rt::DType::F64), "loaded0[slot] = (long long)in0[offset0];"));
}

TEST(KernelSource, ConstantsArePrintedExactly) {
  rt::FusedElementwiseParams params;
  using rt::ElementwiseOp;
  double infinity = std::numeric_limits<double>::infinity();
  params.program = {
      {ElementwiseOp::Constant, rt::DType::F32, {}, infinity},
      {ElementwiseOp::Constant, rt::DType::F64, {}, -0.0},
      {ElementwiseOp::Constant, rt::DType::I64, {}, -1e300},
      {ElementwiseOp::Constant, rt::DType::I64, {}, std::nan("")},
      {ElementwiseOp::Constant, rt::DType::BF16, {}, 3.0},
      {ElementwiseOp::Constant, rt::DType::F64, {}, -infinity},
  };
  params.outputs = {0, 1, 2, 3, 4, 5};
  rt::Plan plan = planWithStep(rt::StepKind::FusedElementwise, params, {},
                               {{rt::DType::F32, {}}, {rt::DType::F64, {}}, {rt::DType::I64, {}},
                                {rt::DType::I64, {}}, {rt::DType::BF16, {}}, {rt::DType::F64, {}}});
  const std::string source = emit(plan).source;
  EXPECT_TRUE(contains(source, "const float r0 = __int_as_float(0x7f800000);")) << source;
  EXPECT_TRUE(contains(source, "const double r1 = (-0x0p+0);")) << source;
  EXPECT_TRUE(contains(source, "const long long r2 = (-9223372036854775807LL - 1);")) << source;
  EXPECT_TRUE(contains(source, "const long long r3 = (0LL);")) << source;
  EXPECT_TRUE(contains(source, "const float r4 = (0x1.8p+1f);")) << source;
  EXPECT_TRUE(contains(source, "const double r5 = __longlong_as_double(0xfff0000000000000LL);")) << source;
}

/// A relu gradient of f32 [rows, columns] and a Reduction after it over
/// `axes` of the gradient (buffer 2) into buffer 3, f32.
rt::Plan reluGradientThenSum(int64_t rows, int64_t columns, std::vector<int64_t> axes, rt::DType summedType) {
  rt::Plan plan = planWithStep(rt::StepKind::Elementwise, rt::ElementwiseParams{rt::ElementwiseOp::ReluGrad, 0.0},
                               {{summedType, {rows, columns}}, {summedType, {rows, columns}}},
                               {{summedType, {rows, columns}}});
  plan.buffers[2].role = rt::BufferRole::Temporary;
  rt::Step sum;
  sum.kind = rt::StepKind::Reduction;
  sum.params = rt::ReductionParams{rt::ReduceOp::Sum, axes, false};
  sum.computeType = rt::DType::F32;
  sum.inputs = {2};
  sum.outputs = {3};
  sum.origin = "test sum";
  plan.buffers.push_back(rt::BufferDesc{.type = {rt::DType::F32, {axes == std::vector<int64_t>{0} ? columns : rows}},
                                        .role = rt::BufferRole::Output});
  plan.steps.push_back(std::move(sum));
  return plan;
}

TEST(KernelSource, AColumnSummedKernelAddsTheSummedOutputInsteadOfStoringIt) {
  rt::Plan plan = reluGradientThenSum(64, 512, {0}, rt::DType::F32);
  rt::Expected<cuda::ElementwiseKernel> kernel = cuda::emitColumnSummedKernel(plan, plan.steps[0], plan.steps[1]);
  ASSERT_TRUE(kernel) << kernel.message();
  const std::string& source = kernel->source;
  // Both steps are quoted; the gradient is never stored, the sums are.
  EXPECT_TRUE(contains(source, "relu_grad")) << source;
  EXPECT_TRUE(contains(source, "test sum")) << source;
  EXPECT_TRUE(contains(source, "float* column_sums, long long rows")) << source;
  EXPECT_FALSE(contains(source, "out0[i]")) << source;
  EXPECT_TRUE(contains(source, "sum = sum + r2;")) << source;
  // A lane's rows four at a time, all four loaded before the first is
  // added, in row order.
  EXPECT_TRUE(contains(source, "for (long long first = lane; first < rows; first += 4 * 8) {")) << source;
  EXPECT_TRUE(contains(source, "const long long row = first + slot * 8;")) << source;
  EXPECT_LT(source.find("loaded1[slot] = "), source.find("sum = sum + r2;")) << source;
  EXPECT_TRUE(contains(source, "__shared__ float lane_sums[8][32];")) << source;
  EXPECT_TRUE(contains(source, "total = total + lane_sums[l][column];")) << source;
  EXPECT_EQ(kernel->launch.summedRows, 64);
  EXPECT_EQ(kernel->launch.outputs, (std::vector<rt::BufferId>{3}));
  // Its name differs from the plain kernel's of the same step.
  EXPECT_NE(kernel->name, emit(plan).name);
  // The group's slots bind: inputs {dy, y, gradient}, outputs {gradient, sums}.
  cuda::ElementwiseKernelArguments arguments(kernel->launch);
  float dy = 0, y = 0, gradient = 0, sums = 0;
  std::vector<void*> inputs = {&dy, &y, &gradient}, outputs = {&gradient, &sums};
  rt::Expected<std::span<void*>> bound = arguments.bind(inputs, outputs);
  ASSERT_TRUE(bound) << bound.message();
  // count, rank, dims, (in0, stride0), (in1, stride1), sums, rows.
  ASSERT_EQ(bound->size(), 9u);
  EXPECT_EQ(*static_cast<void**>((*bound)[7]), &sums);
  EXPECT_EQ(*static_cast<long long*>((*bound)[8]), 64);
  EXPECT_FALSE(arguments.bind(std::vector<void*>{&dy, &y}, outputs)) << "the elementwise step's slots alone";
}

TEST(KernelSource, AColumnSumOfAnythingButAnF32OutputOverTheFirstDimensionIsRefused) {
  auto refusal = [](const rt::Plan& plan) {
    rt::Expected<cuda::ElementwiseKernel> kernel = cuda::emitColumnSummedKernel(plan, plan.steps[0], plan.steps[1]);
    return kernel ? std::string("accepted") : kernel.message();
  };
  EXPECT_TRUE(contains(refusal(reluGradientThenSum(64, 512, {1}, rt::DType::F32)), "first dimension"));
  EXPECT_TRUE(contains(refusal(reluGradientThenSum(64, 512, {0}, rt::DType::F16)), "f32 output"));
  rt::Plan other = reluGradientThenSum(64, 512, {0}, rt::DType::F32);
  other.steps[1].inputs[0] = 0;
  EXPECT_TRUE(contains(refusal(other), "reads none of its outputs"));
}

TEST(KernelSource, MalformedOrForeignStepsAreErrors) {
  rt::Plan plan = binaryPlan(rt::ElementwiseOp::Add, rt::DType::F32, {4}, {4}, {4});
  plan.buffers[1].type.dtype = rt::DType::F16; // operands of two dtypes
  rt::Expected<cuda::ElementwiseKernel> mixed = cuda::emitElementwiseKernel(plan, plan.steps[0]);
  ASSERT_FALSE(mixed);
  EXPECT_TRUE(contains(mixed.message(), "malformed elementwise step")) << mixed.message();

  rt::Plan gemm = planWithStep(rt::StepKind::Gemm, rt::GemmParams{}, {{rt::DType::F32, {2, 2}}, {rt::DType::F32, {2, 2}}},
                               {{rt::DType::F32, {2, 2}}});
  EXPECT_FALSE(cuda::emitElementwiseKernel(gemm, gemm.steps[0]));

  rt::Plan dangling = binaryPlan(rt::ElementwiseOp::Add, rt::DType::F32, {4}, {4}, {4});
  dangling.steps[0].inputs[1] = 17;
  rt::Expected<cuda::ElementwiseKernel> missing = cuda::emitElementwiseKernel(dangling, dangling.steps[0]);
  ASSERT_FALSE(missing);
  EXPECT_TRUE(contains(missing.message(), "%17")) << missing.message();
}
