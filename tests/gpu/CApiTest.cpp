//===- CApiTest.cpp - the C API's sessions on the CUDA backend ------------===//
//
// A session on "cuda" runs the plan the C API compiled with the state it was
// written, in device memory: its losses and parameters track a "cpu" session
// of the same plan, derived copies are rounded on the device as on the host,
// and an overflowing step is skipped there too. Skipped without a device;
// built with AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME (tests/unit/cuda), the
// session runs on the emulated runtime in CI.
//
//===----------------------------------------------------------------------===//

#include "ampjit-c/Ampjit.h"

#include "CApiTestUtil.h"
#include "CompileExample.h"
#include "GpuTestUtil.h"
#include "Tolerance.h"

#include "ampjit/Codegen/CompileModule.h"
#include "ampjit/runtime/CudaBackend.h"

#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
#include "EmulatedStreams.h"
#endif

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace rt = ampjit::runtime;
namespace mnist = ampjit::testing::mnist_step;

#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
// Reported apart from the device runs of the same tests.
#define CApiOnGpu CApiOnEmulatedRuntime
#endif
// GpuTest's set-up: skipped without a device, streams shuffled on the emulation.
class CApiOnGpu : public rt::gputest::GpuTest {};

using ampjit::testing::PlanHandle;
using ampjit::testing::readArgument;
using ampjit::testing::readLoss;
using ampjit::testing::HostCopyHandle;
using ampjit::testing::SessionHandle;
using ampjit::testing::waitFor;
using ampjit::testing::writeState;

std::vector<float> asFloats(const std::vector<std::byte>& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

void expectClose(const std::vector<float>& actual, const std::vector<float>& expected,
                 ampjit::testing::Tolerance tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t off = 0;
  for (size_t i = 0; i < actual.size(); ++i)
    off += !(std::abs(double(actual[i]) - expected[i]) <= tolerance.atol + tolerance.rtol * std::abs(expected[i]));
  EXPECT_EQ(off, 0u) << what << ": elements outside the tolerance";
}

/// The MNIST step compiled with `amp` and the CUDA backend's rewrites
/// (cuBLASLt epilogues, weight gradients beside), in a "cuda" and a "cpu"
/// session written with the same initial state.
struct TwinSessions {
  PlanHandle plan;
  SessionHandle device, host;
  std::vector<rt::Tensor> state;
};

void openTwinSessions(const char* amp, TwinSessions& twins) {
  std::string text = ampjit::testing::exampleText("mnist_train_step.mlir");
  twins.plan.reset(ampjit_compile_module(text.data(), text.size(), "mnist_train_step.mlir", amp,
                                         "fuse-elementwise fuse-gemm-epilogues overlap-weight-gradients"));
  ASSERT_TRUE(twins.plan) << ampjit_last_error();
  twins.device.reset(ampjit_session_create(twins.plan.get(), "cuda"));
  ASSERT_TRUE(twins.device) << ampjit_last_error();
  twins.host.reset(ampjit_session_create(twins.plan.get(), "cpu"));
  ASSERT_TRUE(twins.host) << ampjit_last_error();
  // The runtime's plan of the same compilation, for initialArguments.
  rt::Expected<rt::Plan> reference = ampjit::codegen::compileModule(
      text, "mnist_train_step.mlir",
      {.ampPipeline = amp,
       .plan = {.fuseElementwise = true, .fuseGemmEpilogues = true, .overlapWeightGradients = true}});
  ASSERT_TRUE(reference.ok()) << reference.message();
  twins.state = ampjit::testing::initialArguments(*reference);
  writeState(twins.device.get(), *reference, twins.state);
  writeState(twins.host.get(), *reference, twins.state);
}

TEST_F(CApiOnGpu, ASessionOnTheDeviceTracksTheCpuSessionOfThePlan) {
  struct Config {
    const char* amp;
    rt::DType dtype;
  };
  for (Config config : {Config{"level=O1 dtype=f16", rt::DType::F16}, Config{"level=O2 dtype=bf16", rt::DType::BF16}}) {
    SCOPED_TRACE(config.amp);
    TwinSessions twins;
    ASSERT_NO_FATAL_FAILURE(openTwinSessions(config.amp, twins));
    PlanHandle& plan = twins.plan;
    SessionHandle &device = twins.device, &host = twins.host;
    const std::vector<rt::Tensor>& state = twins.state;

    ampjit::testing::Tolerance tolerance = ampjit::testing::toleranceFor(config.dtype);
    for (int step = 0; step < 4; ++step) {
      ASSERT_EQ(ampjit_session_run(device.get()), AMPJIT_OK) << ampjit_last_error();
      ASSERT_EQ(ampjit_session_run(host.get()), AMPJIT_OK) << ampjit_last_error();
      expectClose({readLoss(device.get())}, {readLoss(host.get())},
                  ampjit::testing::scaled(tolerance, 8.0 * (step + 1)), "loss of step " + std::to_string(step));
    }
    expectClose(asFloats(readArgument(device.get(), mnist::kFirstParam)),
                asFloats(readArgument(host.get(), mnist::kFirstParam)), ampjit::testing::scaled(tolerance, 64.0),
                "the first weight after four steps");
    EXPECT_EQ(readArgument(device.get(), mnist::kScale), readArgument(host.get(), mnist::kScale));

    // A parameter written between steps reaches its derived copy on the
    // device, rounded there as the host rounds it.
    std::vector<float> written(state[mnist::kFirstParam].elementCount());
    for (size_t i = 0; i < written.size(); ++i)
      written[i] = 0.5f + float(i % 89) * 1e-3f + 3e-5f;
    for (ampjit_session* session : {device.get(), host.get()})
      ASSERT_EQ(ampjit_session_write(session, mnist::kFirstParam, written.data(), written.size() * sizeof(float)),
                AMPJIT_OK)
          << ampjit_last_error();
    for (size_t i = 0; i < ampjit_plan_argument_count(plan.get()); ++i) {
      ampjit_value_info info;
      ASSERT_EQ(ampjit_plan_argument(plan.get(), i, &info), AMPJIT_OK);
      if (info.derived_from == int64_t(mnist::kFirstParam)) {
        EXPECT_EQ(readArgument(device.get(), i), readArgument(host.get(), i)) << "derived argument " << i;
      }
    }

    // An overflow skips the step on the device: the parameters stay.
    std::vector<std::byte> before = readArgument(device.get(), mnist::kFirstParam);
    ASSERT_EQ(ampjit_session_fill(device.get(), mnist::kScale, 1e30), AMPJIT_OK) << ampjit_last_error();
    ASSERT_EQ(ampjit_session_run(device.get()), AMPJIT_OK) << ampjit_last_error();
    if (config.dtype == rt::DType::F16) {
      EXPECT_EQ(readArgument(device.get(), mnist::kFirstParam), before) << "the skipped step left the weight";
      int64_t skipped = 0;
      ASSERT_EQ(ampjit_session_read(device.get(), mnist::kSkippedSteps, &skipped, sizeof skipped), AMPJIT_OK);
      EXPECT_EQ(skipped, 1);
    }
  }
}

/// Pinned host memory, as a framework's staging buffers are, from the CUDA
/// runtime the session runs on (the emulated one in CI).
class PinnedBytes {
public:
  explicit PinnedBytes(size_t size) : size_(size) {
    EXPECT_EQ(cudaApi::cudaMallocHost(&data_, size), cudaSuccess);
  }
  ~PinnedBytes() { cudaApi::cudaFreeHost(data_); }
  PinnedBytes(const PinnedBytes&) = delete;
  PinnedBytes& operator=(const PinnedBytes&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(data_); }
  size_t size() const { return size_; }

private:
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  struct cudaApi {
    static cudaError_t cudaMallocHost(void** pointer, size_t bytes) {
      return ::ampjit::emulation::cudaMallocHost(pointer, bytes);
    }
    static cudaError_t cudaFreeHost(void* pointer) { return ::ampjit::emulation::cudaFreeHost(pointer); }
  };
#else
  struct cudaApi {
    static cudaError_t cudaMallocHost(void** pointer, size_t bytes) { return ::cudaMallocHost(pointer, bytes); }
    static cudaError_t cudaFreeHost(void* pointer) { return ::cudaFreeHost(pointer); }
  };
#endif
  void* data_ = nullptr;
  size_t size_;
};

/// `tensor` with every element times `factor` (f32), or plus `offset` modulo
/// `modulus` (i64 labels).
rt::Tensor changed(const rt::Tensor& tensor, double factor, int64_t offset, int64_t modulus) {
  std::vector<double> values = tensor.toDoubles();
  for (double& value : values)
    value = tensor.dtype() == rt::DType::I64 ? double((int64_t(value) + offset) % modulus) : value * factor;
  return *rt::Tensor::fromDoubles(tensor.dtype(), tensor.shape(), values);
}

TEST_F(CApiOnGpu, DeviceMemoryGoesInAndOutInTheCallersStreamOrderWithoutTheHost) {
  // The fixture's own backend plays the framework: its device tensors are
  // the caller's memory, its stream the caller's stream. Each step's batch
  // reaches the session from there, the framework overwrites its buffers
  // straight after in its own stream order, and the loss comes back into
  // its memory; the host waits only when the framework reads its loss. On
  // the emulation the streams run in a shuffled order, so a missing wait
  // in either direction reads the wrong bytes.
  TwinSessions twins;
  ASSERT_NO_FATAL_FAILURE(openTwinSessions("level=O2 dtype=f16", twins));
  PlanHandle& plan = twins.plan;
  SessionHandle &device = twins.device, &host = twins.host;
  const std::vector<rt::Tensor>& state = twins.state;

  void* callerStream = cuda->stream();
  ASSERT_NE(ampjit_session_stream(device.get()), nullptr);
  EXPECT_NE(ampjit_session_stream(device.get()), callerStream) << "each session has a stream of its own";
  rt::Tensor loss = *cuda->allocate(rt::TensorType{rt::DType::F32, {}});
  ampjit::testing::Tolerance tolerance = ampjit::testing::toleranceFor(rt::DType::F16);
  for (int step = 0; step < 4; ++step) {
    rt::Tensor images = changed(state[mnist::kImages], 1.0 + 0.25 * step, 0, 1);
    rt::Tensor labels = changed(state[mnist::kLabels], 1.0, step, 10);
    rt::Tensor callerImages = *cuda->toDevice(images), callerLabels = *cuda->toDevice(labels);
    ASSERT_EQ(ampjit_session_write_device(device.get(), mnist::kImages, callerImages.bytes(),
                                          callerImages.byteSize(), callerStream),
              AMPJIT_OK)
        << ampjit_last_error();
    ASSERT_EQ(ampjit_session_write_device(device.get(), mnist::kLabels, callerLabels.bytes(),
                                          callerLabels.byteSize(), callerStream),
              AMPJIT_OK)
        << ampjit_last_error();
    rt::Tensor garbage = changed(images, -1e4, 0, 1);
    ASSERT_TRUE(cuda->copyIntoTensor(callerImages, garbage.bytes(), false, nullptr).ok());
    for (auto [index, tensor] : {std::pair{mnist::kImages, &images}, std::pair{mnist::kLabels, &labels}})
      ASSERT_EQ(ampjit_session_write(host.get(), index, tensor->bytes(), tensor->byteSize()), AMPJIT_OK)
          << ampjit_last_error();
    ASSERT_EQ(ampjit_session_run(device.get()), AMPJIT_OK) << ampjit_last_error();
    ASSERT_EQ(ampjit_session_run(host.get()), AMPJIT_OK) << ampjit_last_error();
    ASSERT_EQ(ampjit_session_read_result_device(device.get(), 0, loss.bytes(), loss.byteSize(), callerStream),
              AMPJIT_OK)
        << ampjit_last_error();
    expectClose({float(cuda->toHost(loss)->at(0))}, {readLoss(host.get())},
                ampjit::testing::scaled(tolerance, 8.0 * (step + 1)), "loss of step " + std::to_string(step));
  }

  // State read into the caller's memory is the state the host reads.
  rt::Tensor weight = *cuda->allocate(state[mnist::kFirstParam].type());
  ASSERT_EQ(ampjit_session_read_device(device.get(), mnist::kFirstParam, weight.bytes(), weight.byteSize(),
                                       callerStream),
            AMPJIT_OK)
      << ampjit_last_error();
  std::vector<std::byte> weightBytes(weight.byteSize());
  std::memcpy(weightBytes.data(), cuda->toHost(weight)->bytes(), weightBytes.size());
  EXPECT_EQ(weightBytes, readArgument(device.get(), mnist::kFirstParam));

  // A parameter written from the caller's memory reaches its derived copy,
  // rounded as the host rounds it.
  rt::Tensor written = changed(state[mnist::kFirstParam], 0.5, 0, 1);
  rt::Tensor callerWritten = *cuda->toDevice(written);
  ASSERT_EQ(ampjit_session_write_device(device.get(), mnist::kFirstParam, callerWritten.bytes(),
                                        callerWritten.byteSize(), callerStream),
            AMPJIT_OK)
      << ampjit_last_error();
  ASSERT_EQ(ampjit_session_write(host.get(), mnist::kFirstParam, written.bytes(), written.byteSize()), AMPJIT_OK)
      << ampjit_last_error();
  int derived = 0;
  for (size_t i = 0; i < ampjit_plan_argument_count(plan.get()); ++i) {
    ampjit_value_info info;
    ASSERT_EQ(ampjit_plan_argument(plan.get(), i, &info), AMPJIT_OK);
    if (info.derived_from == int64_t(mnist::kFirstParam)) {
      ++derived;
      EXPECT_EQ(readArgument(device.get(), i), readArgument(host.get(), i)) << "derived argument " << i;
    }
  }
  EXPECT_EQ(derived, 1) << "O2 keeps an f16 copy of the first weight";
  EXPECT_EQ(ampjit_session_synchronize(device.get()), AMPJIT_OK) << ampjit_last_error();
}

/// The MNIST step without AMP in a "cuda" session, and its first weight.
struct PlainCudaSession {
  PlanHandle plan;
  SessionHandle session;
  ampjit_value_info firstParam{};
};

void openPlainCudaSession(PlainCudaSession& opened) {
  std::string text = ampjit::testing::exampleText("mnist_train_step.mlir");
  opened.plan.reset(ampjit_compile_module(text.data(), text.size(), "step.mlir", nullptr, nullptr));
  ASSERT_TRUE(opened.plan) << ampjit_last_error();
  opened.session.reset(ampjit_session_create(opened.plan.get(), "cuda"));
  ASSERT_TRUE(opened.session) << ampjit_last_error();
  ASSERT_EQ(ampjit_plan_argument(opened.plan.get(), mnist::kFirstParam, &opened.firstParam), AMPJIT_OK);
}

TEST_F(CApiOnGpu, PinnedHostBytesMayChangeAsSoonAsTheWriteReturns) {
  // A copy from pinned memory runs when the stream gets to it, not when it
  // is enqueued: the session stages the bytes first, as the runtime does for
  // pageable ones.
  PlainCudaSession opened;
  ASSERT_NO_FATAL_FAILURE(openPlainCudaSession(opened));
  ampjit_session* device = opened.session.get();
  const ampjit_value_info& info = opened.firstParam;
  PinnedBytes pinned(info.byte_size);
  std::vector<float> values(info.byte_size / sizeof(float));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = float(i % 97) * 0.125f;
  std::memcpy(pinned.data(), values.data(), pinned.size());
  ASSERT_EQ(ampjit_session_write(device, mnist::kFirstParam, pinned.data(), pinned.size()), AMPJIT_OK)
      << ampjit_last_error();
  std::memset(pinned.data(), 0xff, pinned.size());
  EXPECT_EQ(asFloats(readArgument(device, mnist::kFirstParam)), values);
}

TEST_F(CApiOnGpu, LossesAndWeightsReadLaterArriveWithoutTheStepsWaitingForThem) {
  // A loop of run and asynchronous reads of the loss and a weight enqueues
  // and never waits (on the emulation: no operation runs until the first
  // wait); each read then holds its own step's value, bit for bit what a
  // twin session read synchronously after that step. A copy still pending
  // may be destroyed, and may outlive its session.
  PlainCudaSession asked, read;
  ASSERT_NO_FATAL_FAILURE(openPlainCudaSession(asked));
  ASSERT_NO_FATAL_FAILURE(openPlainCudaSession(read));
  std::string text = ampjit::testing::exampleText("mnist_train_step.mlir");
  rt::Expected<rt::Plan> reference = ampjit::codegen::compileModule(text, "step.mlir", {});
  ASSERT_TRUE(reference.ok()) << reference.message();
  std::vector<rt::Tensor> state = ampjit::testing::initialArguments(*reference);
  writeState(asked.session.get(), *reference, state);
  writeState(read.session.get(), *reference, state);
  const size_t weightBytes = asked.firstParam.byte_size;
  std::vector<float> expectedLosses;
  std::vector<std::vector<std::byte>> expectedWeights;
  for (int step = 0; step < 4; ++step) {
    ASSERT_EQ(ampjit_session_run(read.session.get()), AMPJIT_OK) << ampjit_last_error();
    expectedLosses.push_back(readLoss(read.session.get()));
    expectedWeights.push_back(readArgument(read.session.get(), mnist::kFirstParam));
  }
  ASSERT_EQ(ampjit_session_synchronize(asked.session.get()), AMPJIT_OK) << ampjit_last_error();
  std::vector<HostCopyHandle> losses, weights;
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  uint64_t ranBefore = ampjit::emulation::operationsRun();
#endif
  for (int step = 0; step < 4; ++step) {
    ASSERT_EQ(ampjit_session_run(asked.session.get()), AMPJIT_OK) << ampjit_last_error();
    losses.emplace_back(ampjit_session_read_result_async(asked.session.get(), 0));
    weights.emplace_back(ampjit_session_read_async(asked.session.get(), mnist::kFirstParam));
    ASSERT_TRUE(losses.back() && weights.back()) << ampjit_last_error();
  }
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
  EXPECT_EQ(ampjit::emulation::operationsRun(), ranBefore) << "something waited for the GPU";
#endif
  for (int step = 0; step < 4; ++step) {
    float loss = NAN;
    ASSERT_EQ(ampjit_host_copy_wait(losses[step].get(), &loss, sizeof loss), AMPJIT_OK) << ampjit_last_error();
    EXPECT_EQ(loss, expectedLosses[step]) << "loss of step " << step;
    EXPECT_EQ(ampjit_host_copy_ready(losses[step].get()), 1);
    EXPECT_EQ(waitFor(weights[step].get(), weightBytes), expectedWeights[step]) << "the weight after step " << step;
  }
  ASSERT_EQ(ampjit_session_run(asked.session.get()), AMPJIT_OK) << ampjit_last_error();
  HostCopyHandle abandoned(ampjit_session_read_async(asked.session.get(), mnist::kFirstParam));
  HostCopyHandle kept(ampjit_session_read_result_async(asked.session.get(), 0));
  ASSERT_TRUE(abandoned && kept) << ampjit_last_error();
  abandoned.reset();
  ASSERT_EQ(ampjit_session_run(read.session.get()), AMPJIT_OK) << ampjit_last_error();
  float fifth = readLoss(read.session.get());
  asked.session.reset();
  float loss = NAN;
  ASSERT_EQ(ampjit_host_copy_wait(kept.get(), &loss, sizeof loss), AMPJIT_OK) << ampjit_last_error();
  EXPECT_EQ(loss, fifth);
}

TEST_F(CApiOnGpu, MemoryOnTheWrongSideIsAnErrorThatNamesTheArgumentAndThePointer) {
  PlainCudaSession opened;
  ASSERT_NO_FATAL_FAILURE(openPlainCudaSession(opened));
  ampjit_session* device = opened.session.get();
  const ampjit_value_info& info = opened.firstParam;
  ASSERT_EQ(ampjit_session_fill(device, mnist::kFirstParam, 0.25), AMPJIT_OK) << ampjit_last_error();
  std::vector<std::byte> before = readArgument(device, mnist::kFirstParam);
  std::string argument = "argument 2 '" + std::string(info.name) + "' (param f32[";

  std::vector<std::byte> hostBytes(info.byte_size, std::byte{0x3c});
  EXPECT_EQ(ampjit_session_write_device(device, mnist::kFirstParam, hostBytes.data(), hostBytes.size(),
                                        cuda->stream()),
            AMPJIT_ERROR);
  std::string message = ampjit_last_error();
  EXPECT_EQ(message.rfind("ampjit_session_write_device: " + argument, 0), 0u) << message;
  EXPECT_NE(message.find("]): the source 0x"), std::string::npos) << message;
  EXPECT_NE(message.find(" is host memory, not memory of CUDA device 0"), std::string::npos) << message;
  EXPECT_EQ(ampjit_session_read_device(device, mnist::kFirstParam, hostBytes.data(), hostBytes.size(),
                                       cuda->stream()),
            AMPJIT_ERROR);
  message = ampjit_last_error();
  EXPECT_NE(message.find("the destination 0x"), std::string::npos) << message;
  EXPECT_NE(message.find(" is host memory, not memory of CUDA device 0"), std::string::npos) << message;

  rt::Tensor callerMemory = *cuda->allocate(rt::TensorType{rt::DType::F32, rt::Shape(info.shape, info.shape + info.rank)});
  EXPECT_EQ(ampjit_session_write(device, mnist::kFirstParam, callerMemory.bytes(), callerMemory.byteSize()),
            AMPJIT_ERROR);
  message = ampjit_last_error();
  EXPECT_EQ(message.rfind("ampjit_session_write: " + argument, 0), 0u) << message;
  EXPECT_NE(message.find(" is device memory, given as host memory"), std::string::npos) << message;
  EXPECT_EQ(ampjit_session_write_device(device, mnist::kFirstParam, callerMemory.bytes(), 12,
                                        cuda->stream()),
            AMPJIT_ERROR);
  EXPECT_NE(std::string(ampjit_last_error()).find(" bytes, not 12"), std::string::npos) << ampjit_last_error();
  EXPECT_EQ(readArgument(device, mnist::kFirstParam), before) << "the refused writes changed nothing";
}

TEST_F(CApiOnGpu, AnI1ArgumentIsWrittenFromTheHostOnlyWhereItsBytesAreChecked) {
  const std::string text =
      "func.func @mask(%m: tensor<3xi1> {jit.role = \"input\"}, %x: tensor<3xf32> {jit.role = \"input\"}, "
      "%y: tensor<3xf32> {jit.role = \"input\"}) -> tensor<3xf32> {\n"
      "  %r = jit.select %m, %x, %y : (tensor<3xi1>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>\n"
      "  return %r : tensor<3xf32>\n}\n";
  PlanHandle plan(ampjit_compile_module(text.data(), text.size(), "mask.mlir", nullptr, nullptr));
  ASSERT_TRUE(plan) << ampjit_last_error();
  SessionHandle device(ampjit_session_create(plan.get(), "cuda"));
  ASSERT_TRUE(device) << ampjit_last_error();
  rt::Tensor mask = *cuda->toDevice(*rt::Tensor::fromDoubles(rt::DType::I1, {3}, std::vector<double>{1, 0, 1}));
  EXPECT_EQ(ampjit_session_write_device(device.get(), 0, mask.bytes(), 3, cuda->stream()), AMPJIT_ERROR);
  EXPECT_NE(std::string(ampjit_last_error()).find("(input i1[3]) is i1, whose bytes are checked to be 0 or 1 on "
                                                  "the host: write it with ampjit_session_write"),
            std::string::npos)
      << ampjit_last_error();
  // The others come from the device, and the step reads them.
  const uint8_t hostMask[3] = {1, 0, 1};
  ASSERT_EQ(ampjit_session_write(device.get(), 0, hostMask, 3), AMPJIT_OK) << ampjit_last_error();
  rt::Tensor x = *cuda->toDevice(*rt::Tensor::fromDoubles(rt::DType::F32, {3}, std::vector<double>{1, 2, 3}));
  rt::Tensor y = *cuda->toDevice(*rt::Tensor::fromDoubles(rt::DType::F32, {3}, std::vector<double>{-1, -2, -3}));
  ASSERT_EQ(ampjit_session_write_device(device.get(), 1, x.bytes(), x.byteSize(), cuda->stream()), AMPJIT_OK)
      << ampjit_last_error();
  ASSERT_EQ(ampjit_session_write_device(device.get(), 2, y.bytes(), y.byteSize(), cuda->stream()), AMPJIT_OK)
      << ampjit_last_error();
  ASSERT_EQ(ampjit_session_run(device.get()), AMPJIT_OK) << ampjit_last_error();
  float r[3] = {0, 0, 0};
  ASSERT_EQ(ampjit_session_read_result(device.get(), 0, r, sizeof r), AMPJIT_OK) << ampjit_last_error();
  EXPECT_EQ(std::vector<float>(r, r + 3), (std::vector<float>{1, -2, 3}));
}

TEST_F(CApiOnGpu, ReportsTheBackendAndTheDevices) {
  EXPECT_EQ(ampjit_cuda_backend_built(), 1);
  EXPECT_EQ(ampjit_cuda_device_count(), rt::cudaDeviceCount());
  EXPECT_GE(ampjit_cuda_device_count(), 1);
}

TEST_F(CApiOnGpu, ABadDeviceNumberIsAnErrorThatSaysSo) {
  std::string text = ampjit::testing::exampleText("mnist_train_step.mlir");
  PlanHandle plan(ampjit_compile_module(text.data(), text.size(), "step.mlir", nullptr, nullptr));
  ASSERT_TRUE(plan) << ampjit_last_error();
  EXPECT_EQ(ampjit_session_create(plan.get(), "cuda:4096"), nullptr);
  EXPECT_EQ(std::string(ampjit_last_error()).rfind("ampjit_session_create: backend 'cuda:4096': ", 0), 0u)
      << ampjit_last_error();
}

} // namespace
