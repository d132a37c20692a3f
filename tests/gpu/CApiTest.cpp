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

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
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
using ampjit::testing::SessionHandle;
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

TEST_F(CApiOnGpu, ASessionOnTheDeviceTracksTheCpuSessionOfThePlan) {
  std::string text = ampjit::testing::exampleText("mnist_train_step.mlir");
  struct Config {
    const char* amp;
    rt::DType dtype;
  };
  for (Config config : {Config{"level=O1 dtype=f16", rt::DType::F16}, Config{"level=O2 dtype=bf16", rt::DType::BF16}}) {
    SCOPED_TRACE(config.amp);
    // The CUDA backend's rewrites: cuBLASLt epilogues, weight gradients beside.
    PlanHandle plan(ampjit_compile_module(text.data(), text.size(), "mnist_train_step.mlir", config.amp,
                                          "fuse-elementwise fuse-gemm-epilogues overlap-weight-gradients"));
    ASSERT_TRUE(plan) << ampjit_last_error();
    SessionHandle device(ampjit_session_create(plan.get(), "cuda"));
    ASSERT_TRUE(device) << ampjit_last_error();
    SessionHandle host(ampjit_session_create(plan.get(), "cpu"));
    ASSERT_TRUE(host) << ampjit_last_error();

    // The runtime's plan of the same compilation, for initialArguments.
    rt::Expected<rt::Plan> reference = ampjit::codegen::compileModule(
        text, "mnist_train_step.mlir",
        {.ampPipeline = config.amp,
         .plan = {.fuseElementwise = true, .fuseGemmEpilogues = true, .overlapWeightGradients = true}});
    ASSERT_TRUE(reference.ok()) << reference.message();
    std::vector<rt::Tensor> state = ampjit::testing::initialArguments(*reference);
    writeState(device.get(), *reference, state);
    writeState(host.get(), *reference, state);

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
