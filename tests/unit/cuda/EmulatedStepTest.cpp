//===- EmulatedStepTest.cpp - whole train steps on the CUDA path, emulated ===//
//
// The MNIST train step compiled as the CUDA pipeline compiles it (GEMM
// epilogues, fused elementwise kernels) and run the way the CUDA backend
// runs it, on the host emulation (tests/emulation): the backend's launch
// groups, its multi-tensor update, convert and classification-head launches,
// every generated kernel, and its GEMM steps with their epilogues on the
// host model of cuBLASLt. Compared with the CPU backend's run of the same
// plan over several steps, with DESIGN's tolerances.
//
//===----------------------------------------------------------------------===//

#include "CompileExample.h"
#include "CudaResNetStep.h"
#include "EmulatedCudaPlan.h"
#include "GpuTestUtil.h"

#include "ampjit/runtime/CpuBackend.h"
#include "cuda/DeviceStep.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace ampjit::emulation {
namespace {

namespace rt = ampjit::runtime;
using namespace ampjit::testing::mnist_step;
using ampjit::testing::initialArguments;

rt::Plan cudaPipelineMnistStep(const std::string& ampOptions) {
  return ampjit::testing::compileExample("mnist_train_step.mlir", ampOptions,
                                         {.fuseElementwise = true, .fuseGemmEpilogues = true});
}

struct BothSteps {
  std::unique_ptr<rt::Executable> cpu, emulated;
  std::vector<rt::Tensor> cpuArguments, emulatedArguments;
};

BothSteps prepareBoth(const rt::Plan& plan, rt::Backend& cpu, EmulatedCudaBackend& emulated) {
  BothSteps both;
  rt::Expected<std::unique_ptr<rt::Executable>> cpuExecutable = cpu.prepare(plan);
  EXPECT_TRUE(cpuExecutable.ok()) << cpuExecutable.message();
  rt::Expected<std::unique_ptr<rt::Executable>> emulatedExecutable = emulated.prepare(plan);
  EXPECT_TRUE(emulatedExecutable.ok()) << emulatedExecutable.message();
  if (!cpuExecutable || !emulatedExecutable)
    return both;
  both.cpu = std::move(*cpuExecutable);
  both.emulated = std::move(*emulatedExecutable);
  both.cpuArguments = initialArguments(plan);
  for (const rt::Tensor& argument : both.cpuArguments)
    both.emulatedArguments.push_back(*argument.clone());
  return both;
}

/// Every result and every piece of state within `slack` times DESIGN's
/// tolerance of the CPU's (a GEMM's K of 784 and the steps the difference
/// has to grow over set the slack), for the precision the step computes in:
/// the GEMMs sum in another order than the CPU's, so a low-precision
/// gradient may round to the neighbouring value, and the f32 state it
/// updates differs by that much.
void expectStateAgrees(const BothSteps& both, const std::vector<rt::Tensor>& cpuResults,
                       const std::vector<rt::Tensor>& emulatedResults, double slack, rt::DType computedIn,
                       const std::string& what) {
  ASSERT_EQ(cpuResults.size(), emulatedResults.size()) << what;
  for (size_t k = 0; k < cpuResults.size(); ++k)
    EXPECT_TRUE(rt::gputest::allClose(cpuResults[k], emulatedResults[k], slack, computedIn))
        << what << ", result " << k;
  for (size_t k = 0; k < both.cpuArguments.size(); ++k)
    EXPECT_TRUE(rt::gputest::allClose(both.cpuArguments[k], both.emulatedArguments[k], slack, computedIn))
        << what << ", argument " << k;
}

TEST(EmulatedStep, TheMnistStepOnTheCudaPathMatchesTheCpuAtEveryLevel) {
  std::unique_ptr<rt::Backend> cpu = rt::createCpuBackend();
  EmulatedCudaBackend emulated;
  struct Setting {
    const char* options;
    rt::DType computedIn;
  };
  for (auto [options, computedIn] :
       {Setting{"level=O0", rt::DType::F32}, Setting{"level=O1 dtype=f16", rt::DType::F16},
        Setting{"level=O1 dtype=bf16", rt::DType::BF16}, Setting{"level=O2 dtype=f16", rt::DType::F16},
        Setting{"level=O2 dtype=bf16", rt::DType::BF16}}) {
    SCOPED_TRACE(options);
    rt::Plan plan = cudaPipelineMnistStep(options);
    ASSERT_FALSE(plan.steps.empty());
    BothSteps both = prepareBoth(plan, *cpu, emulated);
    ASSERT_TRUE(both.cpu && both.emulated);
    size_t gemms = 0;
    for (const rt::Step& step : plan.steps)
      gemms += step.kind == rt::StepKind::Gemm;
    for (int step = 0; step < 3; ++step) {
      rt::Expected<std::vector<rt::Tensor>> cpuResults = both.cpu->run(both.cpuArguments);
      ASSERT_TRUE(cpuResults.ok()) << cpuResults.message();
      rt::Expected<std::vector<rt::Tensor>> emulatedResults = both.emulated->run(both.emulatedArguments);
      ASSERT_TRUE(emulatedResults.ok()) << emulatedResults.message();
      expectStateAgrees(both, *cpuResults, *emulatedResults, 16.0, computedIn,
                        std::string(options) + ", step " + std::to_string(step));
    }
    // Everything ran on the emulated device path, the GEMMs through the
    // backend's GemmStep on the cuBLASLt model.
    const EmulationCounts& counts = EmulatedCudaBackend::countsOf(*both.emulated);
    EXPECT_EQ(counts.cudnnSteps, 0);
    EXPECT_EQ(size_t(counts.gemmSteps), gemms);
    EXPECT_GT(counts.generatedLaunches, 0);
    EXPECT_GT(counts.handwrittenLaunches, 0);
    EXPECT_EQ(size_t(counts.handwrittenLaunches + counts.generatedLaunches + counts.gemmSteps),
              rt::cuda::launchGroups(plan).size());
    EXPECT_EQ(both.emulatedArguments[kSkippedSteps].at(0), 0.0);
  }
}

TEST(EmulatedStep, AnInjectedInfSkipsTheStepOnTheCudaPath) {
  std::unique_ptr<rt::Backend> cpu = rt::createCpuBackend();
  EmulatedCudaBackend emulated;
  for (const char* options : {"level=O1 dtype=f16", "level=O2 dtype=f16"}) {
    SCOPED_TRACE(options);
    rt::Plan plan = cudaPipelineMnistStep(options);
    BothSteps both = prepareBoth(plan, *cpu, emulated);
    ASSERT_TRUE(both.emulated);
    ASSERT_TRUE(both.emulated->run(both.emulatedArguments).ok());
    std::vector<std::vector<std::byte>> before = ampjit::testing::snapshot(both.emulatedArguments);
    both.emulatedArguments[kImages].set(0, std::numeric_limits<double>::infinity());
    rt::Expected<std::vector<rt::Tensor>> skipped = both.emulated->run(both.emulatedArguments);
    ASSERT_TRUE(skipped.ok()) << skipped.message();
    std::vector<std::vector<std::byte>> after = ampjit::testing::snapshot(both.emulatedArguments);
    for (size_t index = kFirstParam; index < kLearningRate; ++index)
      EXPECT_EQ(before[index], after[index]) << "argument " << index << " changed on a skipped step";
    EXPECT_EQ(both.emulatedArguments[kScale].at(0), 32768.0);
    EXPECT_EQ(both.emulatedArguments[kGoodSteps].at(0), 0.0);
    EXPECT_EQ(both.emulatedArguments[kSkippedSteps].at(0), 1.0);
  }
}

/// A ResNet step's arguments in the ranges a training run has them, so that
/// the step is no worse conditioned than training makes it: weights
/// uniform with variance 2 / fan-in, per-channel parameters and running
/// statistics 1 +- 0.1 (a running variance must be positive), small
/// momentum, the loss scale 2^10 with its counters at 0; inputs uniform in
/// [-1, 1). (Uniform [-1, 1) weights of fan-in 576 made every activation
/// tens of times its input.)
std::vector<rt::Tensor> trainingRangeArguments(const rt::Plan& plan, uint32_t seed) {
  std::vector<rt::Tensor> arguments = rt::gputest::randomArguments(plan, seed);
  for (size_t k = 0; k < arguments.size(); ++k) {
    const rt::BufferDesc& buffer = plan.buffers[plan.argumentBuffer(k)];
    rt::Tensor& tensor = arguments[k];
    bool floating = rt::isFloating(tensor.dtype());
    int64_t fanIn = buffer.type.shape.size() >= 2 ? tensor.elementCount() / buffer.type.shape[0] : 1;
    for (int64_t i = 0; i < tensor.elementCount(); ++i) {
      double u = tensor.at(i);
      switch (buffer.role) {
      case rt::BufferRole::Param:
        tensor.set(i, buffer.type.shape.size() >= 2 ? u * std::sqrt(6.0 / double(fanIn)) : 1.0 + 0.1 * u);
        break;
      case rt::BufferRole::OptState: tensor.set(i, 0.01 * u); break;
      case rt::BufferRole::Hyper: tensor.set(i, 1.0 + 0.1 * u); break;
      case rt::BufferRole::ScalerState: tensor.set(i, floating ? 1024.0 : 0.0); break;
      default: break;
      }
    }
  }
  return arguments;
}

/// ||actual - expected|| / ||expected|| (0 when both are 0).
double relativeDistance(const rt::Tensor& actual, const rt::Tensor& expected) {
  double difference = 0, magnitude = 0;
  for (int64_t i = 0; i < expected.elementCount(); ++i) {
    double a = actual.at(i), e = expected.at(i);
    difference += (a - e) * (a - e);
    magnitude += e * e;
  }
  return magnitude == 0 ? std::sqrt(difference) : std::sqrt(difference / magnitude);
}

TEST(EmulatedStep, AResNetStepOnTheCudaPathMatchesTheCpu) {
  // torchvision's ResNet-18 (ImageNet stem: its max pool; widths 16-128) on
  // 128x128 images, traced and compiled as jit::trace compiles for CUDA at
  // O1-f16 (kept parameter casts, NHWC, fused batch-norm tails), the update
  // not deferred (the emulation runs no side stream). Convolutions and batch
  // norms run the backend's cuDNN steps on the cuDNN model (cuDNN's fused
  // batch norm for the f16 NHWC tails); the classifier's GEMMs run on the
  // cuBLASLt model; the layout moves, the pooling, the loss, the scaler and
  // the updates are emulated.
  //
  // A whole f16 step is compared in norm, against how far the CPU's own step
  // moves when its input moves by an f16 rounding: the device path rounds
  // differently at every layer (cuDNN's fused tails round once, the CPU's
  // twice; other summation orders), and a gradient after ~20 batch norms is
  // as sensitive as the step is. With 32x32 images the last stage's batch
  // norms saw 2 values each, whose input gradient is 0 up to rounding: the
  // CPU's kernels standing in for cuDNN agreed with the CPU only because
  // they were its kernels; the cuDNN model showed the noise.
  jit::Generator generator(3);
  auto model = jit::nn::resnet18({.num_classes = 10, .base_width = 16, .init = {.generator = &generator}});
  rt::Plan plan = ampjit::testing::cudaResNetStepPlan(model, generator, /*deferUpdates=*/false, /*imageSize=*/128);
  ASSERT_FALSE(plan.steps.empty());
  size_t pools = 0, gemms = 0, library = 0;
  for (const rt::Step& s : plan.steps) {
    pools += s.kind == rt::StepKind::MaxPool2d || s.kind == rt::StepKind::MaxPool2dGrad;
    gemms += s.kind == rt::StepKind::Gemm;
    library += s.kind == rt::StepKind::Conv2d || s.kind == rt::StepKind::Conv2dGradInput ||
               s.kind == rt::StepKind::Conv2dGradWeight || s.kind == rt::StepKind::BatchNorm ||
               s.kind == rt::StepKind::BatchNormGrad;
  }
  ASSERT_EQ(pools, 2u) << "the stem's max pool and its gradient";

  std::unique_ptr<rt::Backend> cpu = rt::createCpuBackend();
  EmulatedCudaBackend emulated;
  rt::Expected<std::unique_ptr<rt::Executable>> cpuStep = cpu->prepare(plan);
  ASSERT_TRUE(cpuStep.ok()) << cpuStep.message();
  rt::Expected<std::unique_ptr<rt::Executable>> emulatedStep = emulated.prepare(plan);
  ASSERT_TRUE(emulatedStep.ok()) << emulatedStep.message();
  // The f16 parameter copies derived from the f32 state.
  std::vector<rt::Tensor> cpuArguments = trainingRangeArguments(plan, 7), emulatedArguments, initialArguments;
  ASSERT_TRUE(rt::rederiveArguments(plan, cpuArguments).ok());
  for (const rt::Tensor& argument : cpuArguments) {
    emulatedArguments.push_back(*argument.clone());
    initialArguments.push_back(*argument.clone());
  }
  rt::Expected<std::vector<rt::Tensor>> cpuResults = (*cpuStep)->run(cpuArguments);
  ASSERT_TRUE(cpuResults.ok()) << cpuResults.message();
  rt::Expected<std::vector<rt::Tensor>> emulatedResults = (*emulatedStep)->run(emulatedArguments);
  ASSERT_TRUE(emulatedResults.ok()) << emulatedResults.message();

  // How far the CPU's own step moves when its input images move by about an
  // f16 rounding: the largest over three perturbations (all up, all down,
  // alternating), since one perturbation can happen to move a sensitive
  // gradient little. One was not enough: on an AVX-512 machine the last
  // stage's batch-norm gradients landed just past a bound taken from the
  // all-up perturbation alone (the same build passed under valgrind, which
  // hides AVX-512, so something the CPU selects moves them).
  std::vector<double> resultSensitivity(cpuResults->size(), 0.0), argumentSensitivity(cpuArguments.size(), 0.0);
  for (int perturbation = 0; perturbation < 3; ++perturbation) {
    std::vector<rt::Tensor> perturbedArguments;
    for (size_t k = 0; k < cpuArguments.size(); ++k) {
      perturbedArguments.push_back(*initialArguments[k].clone());
      rt::Tensor& perturbed = perturbedArguments.back();
      if (plan.buffers[plan.argumentBuffer(k)].role != rt::BufferRole::Input || !rt::isFloating(perturbed.dtype()))
        continue;
      for (int64_t i = 0; i < perturbed.elementCount(); ++i) {
        double sign = perturbation == 0 ? 1.0 : perturbation == 1 ? -1.0 : (i % 2 ? 1.0 : -1.0);
        perturbed.set(i, perturbed.at(i) * (1.0 + sign * std::ldexp(1.0, -10)));
      }
    }
    rt::Expected<std::vector<rt::Tensor>> perturbedResults = (*cpuStep)->run(perturbedArguments);
    ASSERT_TRUE(perturbedResults.ok()) << perturbedResults.message();
    for (size_t k = 0; k < cpuResults->size(); ++k)
      if (rt::isFloating((*cpuResults)[k].dtype()))
        resultSensitivity[k] =
            std::max(resultSensitivity[k], relativeDistance((*perturbedResults)[k], (*cpuResults)[k]));
    for (size_t k = 0; k < cpuArguments.size(); ++k)
      if (rt::isFloating(cpuArguments[k].dtype()))
        argumentSensitivity[k] =
            std::max(argumentSensitivity[k], relativeDistance(perturbedArguments[k], cpuArguments[k]));
  }

  // Within 4x the perturbation's distance, plus 8 f16 roundings.
  double floor = 8.0 * ampjit::testing::toleranceFor(rt::DType::F16).rtol;
  auto expectWithinSensitivity = [&](const rt::Tensor& cpuValue, double sensitivity,
                                     const rt::Tensor& emulatedValue, const std::string& what) {
    ASSERT_EQ(cpuValue.type(), emulatedValue.type()) << what;
    if (!rt::isFloating(cpuValue.dtype())) {
      EXPECT_TRUE(rt::gputest::allClose(cpuValue, emulatedValue)) << what;
      return;
    }
    EXPECT_LE(relativeDistance(emulatedValue, cpuValue), 4.0 * sensitivity + floor)
        << what << " (the CPU step moves by " << sensitivity << " under the perturbation)";
  };
  ASSERT_EQ(cpuResults->size(), emulatedResults->size());
  for (size_t k = 0; k < cpuResults->size(); ++k)
    expectWithinSensitivity((*cpuResults)[k], resultSensitivity[k], (*emulatedResults)[k],
                            "result " + std::to_string(k));
  for (size_t k = 0; k < cpuArguments.size(); ++k)
    expectWithinSensitivity(cpuArguments[k], argumentSensitivity[k], emulatedArguments[k],
                            "argument " + std::to_string(k) + " (" + plan.buffers[plan.argumentBuffer(k)].name + ")");
  // The loss itself is well conditioned: within f16's tolerance.
  EXPECT_TRUE(rt::gputest::allClose((*cpuResults)[0], (*emulatedResults)[0], 8.0, rt::DType::F16));

  const EmulationCounts& counts = EmulatedCudaBackend::countsOf(**emulatedStep);
  EXPECT_EQ(size_t(counts.cudnnSteps), library);
  EXPECT_GT(gemms, 0u);
  EXPECT_EQ(size_t(counts.gemmSteps), gemms);
  EXPECT_GT(counts.generatedLaunches, 0);
  EXPECT_GT(counts.handwrittenLaunches, int64_t(pools));
}

TEST(EmulatedStep, AGeneratedKernelTakesMisalignedOperandsElementByElementWithTheCpusBits) {
  // Plans' buffers start aligned, so only a direct launch can give a
  // generated kernel an operand one or three elements off: the kernel must
  // then go element by element (a chunk's whole access there faults on the
  // device, and traps in the emulation's build of the kernel), with the bits
  // an aligned launch gives.
  rt::test::PlanBuilder b("misaligned");
  const int64_t count = 67; // eight chunks and a partial one
  rt::BufferId wide = b.argument(rt::test::tt(rt::DType::F32, {count}), rt::BufferRole::Input, "wide");
  rt::BufferId narrow = b.output(rt::test::tt(rt::DType::F16, {count}));
  b.op("jit.convert", {wide}, {narrow});
  b.result(narrow);
  rt::Plan plan = b.finish();
  std::vector<double> values;
  for (int64_t i = 0; i < count; ++i)
    values.push_back(std::ldexp(double(i % 13) - 6.1, -int(i % 5)));
  std::vector<rt::Tensor> arguments = {*rt::Tensor::fromDoubles(rt::DType::F32, {count}, values)};
  rt::Expected<std::unique_ptr<rt::Executable>> reference = rt::createCpuBackend()->prepare(plan);
  ASSERT_TRUE(reference.ok()) << reference.message();
  rt::Expected<std::vector<rt::Tensor>> expected = (*reference)->run(arguments);
  ASSERT_TRUE(expected.ok()) << expected.message();

  rt::Expected<rt::cuda::ElementwiseKernel> kernel = rt::cuda::emitElementwiseKernel(plan, plan.steps[0]);
  ASSERT_TRUE(kernel.ok()) << kernel.message();
  ASSERT_NE(kernel->source.find("ampjit_load_chunk(in"), std::string::npos) << "a kernel that takes chunks";
  rt::cuda::DeviceContext context;
  context.multiprocessorCount = 132;
  rt::Expected<std::unique_ptr<rt::cuda::DeviceStep>> step = rt::cuda::makeGeneratedElementwiseStep(context, *kernel);
  ASSERT_TRUE(step.ok()) << step.message();

  // Each operand in a 64-byte aligned block of its own, `shift` elements in.
  for (auto [inShift, outShift] : std::vector<std::pair<std::size_t, std::size_t>>{{0, 0}, {1, 0}, {0, 1}, {3, 3}}) {
    SCOPED_TRACE("elements in: input " + std::to_string(inShift) + ", output " + std::to_string(outShift));
    std::unique_ptr<std::byte, decltype(&std::free)> inBlock(static_cast<std::byte*>(std::aligned_alloc(64, 512)),
                                                             &std::free),
        outBlock(static_cast<std::byte*>(std::aligned_alloc(64, 512)), &std::free);
    std::byte* in = inBlock.get() + inShift * sizeof(float);
    std::byte* out = outBlock.get() + outShift * sizeof(uint16_t);
    std::memcpy(in, arguments[0].bytes(), arguments[0].byteSize());
    void* inputs[1] = {in};
    void* outputs[1] = {out};
    ASSERT_TRUE((*step)->enqueue(rt::cuda::StepPointers{inputs, outputs}, nullptr).ok());
    EXPECT_EQ(std::memcmp(out, (*expected)[0].bytes(), (*expected)[0].byteSize()), 0);
  }

  // Rows of 8 floats inside rows of `pitch` (a view the launch's strides
  // describe): at a pitch of 12 (48 bytes) every row starts aligned; at 10
  // (40 bytes) every other row does not, and the kernel must not chunk.
  for (int64_t pitch : {12, 10}) {
    SCOPED_TRACE("rows " + std::to_string(pitch) + " floats apart");
    const int64_t rows = 8, columns = 8;
    rt::cuda::ElementwiseKernel strided = *kernel;
    strided.launch.elementCount = rows * columns;
    strided.launch.dims = {rows, columns};
    strided.launch.inputStrides = {{pitch, 1}};
    rt::Expected<std::unique_ptr<rt::cuda::DeviceStep>> stridedStep =
        rt::cuda::makeGeneratedElementwiseStep(context, strided);
    ASSERT_TRUE(stridedStep.ok()) << stridedStep.message();
    std::vector<float> in(std::size_t(rows * pitch), std::nanf(""));
    std::vector<double> gathered;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < columns; ++c)
        gathered.push_back(in[std::size_t(r * pitch + c)] = float(values[std::size_t(r * columns + c)]));
    rt::Tensor expectedRows = *rt::Tensor::fromDoubles(rt::DType::F16, {rows * columns}, gathered);
    std::vector<uint16_t> out(std::size_t(rows * columns), 0xffff);
    void* inputs[1] = {in.data()};
    void* outputs[1] = {out.data()};
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(in.data()) % 16, 0u);
    ASSERT_TRUE((*stridedStep)->enqueue(rt::cuda::StepPointers{inputs, outputs}, nullptr).ok());
    EXPECT_EQ(std::memcmp(out.data(), expectedRows.bytes(), expectedRows.byteSize()), 0);
  }
}

TEST(EmulatedStep, AWidenedColumnSumOfAMisalignedInputLoadsElementByElementWithTheAlignedBits) {
  // The column kernel loads two f16 columns of a row at once where every
  // such pair is aligned; an input one element off must go column by column
  // (the vector load would fault on the device, and traps in the
  // emulation's build of the kernel), with the bits of the aligned launch
  // and of the same sum over the f32 copy, which loads one column at a time.
  const int64_t rows = 600, columns = 130; // three tiles of paired columns, the last partial; two parts
  rt::test::PlanBuilder b("widened_column_sum");
  rt::BufferId narrow = b.argument(rt::test::tt(rt::DType::F16, {rows, columns}), rt::BufferRole::Input, "narrow");
  rt::BufferId wide = b.temporary(rt::test::tt(rt::DType::F32, {rows, columns}));
  rt::BufferId sums = b.output(rt::test::tt(rt::DType::F32, {columns}));
  b.op("amp.cast", {narrow}, {wide});
  b.op("jit.sum", {wide}, {sums}, {{"axes", std::vector<int64_t>{0}}});
  b.result(sums);
  rt::Plan plan = b.finish();
  ASSERT_TRUE(rt::cuda::widenedReductionAt(plan, 0)) << rt::printPlan(plan);

  std::vector<double> values;
  for (int64_t i = 0; i < rows * columns; ++i)
    values.push_back(std::ldexp(double(i % 23) - 11.3, -int(i % 7)));
  rt::Tensor narrowValues = *rt::Tensor::fromDoubles(rt::DType::F16, {rows, columns}, values);
  rt::Tensor wideValues = *rt::Tensor::fromDoubles(rt::DType::F32, {rows, columns}, narrowValues.toDoubles());

  rt::cuda::DeviceContext context;
  context.multiprocessorCount = 132;
  const rt::Step* group[2] = {&plan.steps[0], &plan.steps[1]};
  rt::Expected<std::unique_ptr<rt::cuda::DeviceStep>> widened = rt::cuda::makeWidenedReductionStep(plan, group);
  ASSERT_TRUE(widened.ok()) << widened.message();
  rt::Expected<std::unique_ptr<rt::cuda::DeviceStep>> overF32 = rt::cuda::makeNumericStep(context, plan, plan.steps[1]);
  ASSERT_TRUE(overF32.ok()) << overF32.message();
  ASSERT_GT((*widened)->workspaceBytes(), 0u) << "two parts, combined from partials";

  auto sumOf = [&](rt::cuda::DeviceStep& step, const rt::Tensor& input, std::size_t shift, bool isGroup) {
    std::size_t bytes = std::size_t(input.byteSize());
    std::unique_ptr<std::byte, decltype(&std::free)> block(
        static_cast<std::byte*>(std::aligned_alloc(64, (bytes + 64 + 63) / 64 * 64)), &std::free);
    std::byte* at = block.get() + shift * rt::dtypeSize(input.dtype());
    std::memcpy(at, input.bytes(), bytes);
    std::vector<float> out(std::size_t(columns), std::nanf(""));
    std::vector<std::byte> workspace(step.workspaceBytes());
    void* groupInputs[2] = {at, nullptr};
    void* groupOutputs[2] = {nullptr, out.data()};
    void* inputs[1] = {at};
    void* outputs[1] = {out.data()};
    rt::cuda::StepPointers pointers = isGroup ? rt::cuda::StepPointers{groupInputs, groupOutputs, workspace.data()}
                                              : rt::cuda::StepPointers{inputs, outputs, workspace.data()};
    EXPECT_TRUE(step.enqueue(pointers, nullptr).ok());
    return out;
  };
  std::vector<float> reference = sumOf(**overF32, wideValues, 0, false);
  for (std::size_t shift : {0, 1, 3}) {
    SCOPED_TRACE("input " + std::to_string(shift) + " elements in");
    std::vector<float> summed = sumOf(**widened, narrowValues, shift, true);
    EXPECT_EQ(std::memcmp(summed.data(), reference.data(), reference.size() * sizeof(float)), 0);
  }
  // And against the CPU's sequential sums of the same values, within a sum's bound.
  for (int64_t c = 0; c < columns; ++c) {
    double exact = 0, magnitude = 0;
    for (int64_t r = 0; r < rows; ++r) {
      exact += narrowValues.at(r * columns + c);
      magnitude += std::fabs(narrowValues.at(r * columns + c));
    }
    EXPECT_NEAR(reference[std::size_t(c)], exact, magnitude * double(rows) * 0x1p-24 + 1e-30) << "column " << c;
  }
}

} // namespace
} // namespace ampjit::emulation
