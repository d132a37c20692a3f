#ifndef AMPJIT_TESTS_GPU_GPUTESTUTIL_H
#define AMPJIT_TESTS_GPU_GPUTESTUTIL_H

// What every GPU test shares: the skip rule (no device, or any error from
// cudaGetDeviceCount), one CUDA backend per test, and "run this plan on the
// CPU backend and on the CUDA backend from the same host arguments, then
// compare" with DESIGN's tolerances.
//
// Built with AMPJIT_GPU_TESTS_ON_EMULATION (tests/unit/cuda), `CudaBackend`
// here is the host emulation's (tests/emulation/EmulatedCudaPlan.h) and
// nothing skips: the kernel tests that need no CUDA library run in CI
// without a GPU, against the same CPU results and tolerances. Built with
// AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME instead, it is the CUDA backend
// itself over the emulated runtime (tests/emulation/EmulatedStreams.h),
// its streams run in a shuffled order seeded per test.

#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/CudaBackend.h"
#ifdef AMPJIT_GPU_TESTS_ON_EMULATION
#include "EmulatedCudaPlan.h"
#endif
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
#include "EmulatedCublasLt.h"
#include "EmulatedStreams.h"
#endif
#include "ampjit/runtime/Plan.h"
#include "ampjit/runtime/Tensor.h"

#include "RuntimeTestUtil.h"
#include "ScopedEnvironment.h"
#include "TemporaryDirectory.h"
#include "Tolerance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ampjit::runtime::gputest {

#ifdef AMPJIT_GPU_TESTS_ON_EMULATION
using CudaBackend = ::ampjit::emulation::EmulatedCudaBackend;

// Reported as EmulatedGpuTest.*, apart from the device runs of the same tests.
#define GpuTest EmulatedGpuTest
class GpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    cuda = std::make_unique<CudaBackend>();
    cpu = createCpuBackend();
  }

  std::unique_ptr<CudaBackend> cuda;
  std::unique_ptr<Backend> cpu;
};
#else
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
// Reported as EmulatedBackendTest.*, apart from the device runs of the same tests.
#define GpuTest EmulatedBackendTest
#endif
class GpuTest : public ::testing::Test {
protected:
  void SetUp() override {
#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
    // The emulated device is always there; its streams run in an order drawn for each test.
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    ::ampjit::emulation::setStreamSchedule(::ampjit::emulation::StreamSchedule::Shuffled,
                                           std::hash<std::string>()(test->name()));
#else
    if (cudaDeviceCount() == 0)
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount reported none or failed)";
#endif
    Expected<std::unique_ptr<CudaBackend>> backend = createCudaBackend();
    ASSERT_TRUE(backend.ok()) << backend.message();
    cuda = std::move(*backend);
    cpu = createCpuBackend();
  }

  std::unique_ptr<CudaBackend> cuda;
  std::unique_ptr<Backend> cpu;
};
#endif

/// A test's own kernel cache directory (TemporaryDirectory.h), and the GEMM
/// tuning entries written there.
struct CacheDirectory : ::ampjit::testing::TemporaryDirectory {
  std::vector<std::filesystem::path> gemmTuningEntries() const {
    std::vector<std::filesystem::path> found;
    if (std::filesystem::exists(path))
      for (const auto& entry : std::filesystem::directory_iterator(path))
        if (entry.path().extension() == ".gemm")
          found.push_back(entry.path());
    return found;
  }
};

#ifdef AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
/// The algorithms the emulated cuBLASLt heuristic offers during one test,
/// with the microseconds each takes (EmulatedCublasLt.h).
struct ModelledAlgorithms {
  explicit ModelledAlgorithms(std::vector<uint64_t> microseconds) {
    ::ampjit::emulation::setCublasLtAlgorithmTimes(std::move(microseconds));
  }
  ~ModelledAlgorithms() { ::ampjit::emulation::setCublasLtAlgorithmTimes({}); }
};

/// During one test, an emulated cuBLASLt with no algorithm that reads alpha
/// and beta from the device: no update folds into a GEMM.
struct CublasLtWithoutDeviceScalars {
  CublasLtWithoutDeviceScalars() { ::ampjit::emulation::setCublasLtOffersDeviceScalars(false); }
  ~CublasLtWithoutDeviceScalars() { ::ampjit::emulation::setCublasLtOffersDeviceScalars(true); }
};
#endif

/// Host tensors for every argument of `plan`: floating ones uniform in
/// [low, high) (never all zeros), i64 ones in [0, integerBound), i1 ones 1.
inline std::vector<Tensor> randomArguments(const Plan& plan, uint32_t seed, double low = -1.0, double high = 1.0,
                                           int64_t integerBound = 2) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<double> uniform(low, high);
  std::vector<Tensor> arguments;
  for (size_t i = 0; i < plan.argumentCount(); ++i) {
    const TensorType& type = plan.buffers[plan.argumentBuffer(i)].type;
    Tensor tensor = *Tensor::allocate(type);
    for (int64_t e = 0; e < tensor.elementCount(); ++e) {
      if (type.dtype == DType::I64)
        tensor.set(e, double(std::uniform_int_distribution<int64_t>(0, integerBound - 1)(generator)));
      else if (type.dtype == DType::I1)
        tensor.set(e, 1.0);
      else
        tensor.set(e, uniform(generator));
    }
    arguments.push_back(std::move(tensor));
  }
  return arguments;
}

using ::ampjit::testing::ScopedEnvironment;

/// The results of one run of a plan on each backend, and the arguments after
/// it (state is updated in place), all as host tensors.
struct BothRuns {
  std::vector<Tensor> cpuResults, cudaResults;
  std::vector<Tensor> cpuArguments, cudaArguments;
};

/// Runs `plan` `runs` times on each backend from copies of `hostArguments`.
inline Expected<BothRuns> runOnBoth(Backend& cpu, CudaBackend& cuda, const Plan& plan,
                                    const std::vector<Tensor>& hostArguments, int runs = 1) {
  BothRuns both;
  std::vector<Tensor> cpuArguments, cudaArguments;
  for (const Tensor& argument : hostArguments) {
    Expected<Tensor> copy = argument.clone();
    if (!copy)
      return copy.status();
    cpuArguments.push_back(std::move(*copy));
    Expected<Tensor> device = cuda.toDevice(argument);
    if (!device)
      return device.status();
    cudaArguments.push_back(std::move(*device));
  }
  Expected<std::unique_ptr<Executable>> cpuExecutable = cpu.prepare(plan);
  if (!cpuExecutable)
    return cpuExecutable.status();
  Expected<std::unique_ptr<Executable>> cudaExecutable = cuda.prepare(plan);
  if (!cudaExecutable)
    return cudaExecutable.status();
  for (int run = 0; run < runs; ++run) {
    Expected<std::vector<Tensor>> cpuResults = (*cpuExecutable)->run(cpuArguments);
    if (!cpuResults)
      return cpuResults.status();
    both.cpuResults = std::move(*cpuResults);
    Expected<std::vector<Tensor>> cudaResults = (*cudaExecutable)->run(cudaArguments);
    if (!cudaResults)
      return cudaResults.status();
    both.cudaResults.clear();
    for (const Tensor& result : *cudaResults) {
      Expected<Tensor> host = cuda.toHost(result);
      if (!host)
        return host.status();
      both.cudaResults.push_back(std::move(*host));
    }
  }
  both.cpuArguments = std::move(cpuArguments);
  for (const Tensor& argument : cudaArguments) {
    Expected<Tensor> host = cuda.toHost(argument);
    if (!host)
      return host.status();
    both.cudaArguments.push_back(std::move(*host));
  }
  return both;
}

/// Every element of `actual` within DESIGN's tolerance of `expected` for
/// `expected`'s dtype, scaled by `slack` (GEMMs and reductions grow with K;
/// transcendental functions differ by an ulp between host and device);
/// NaN matches NaN and infinities match exactly. i64 and i1 must be equal.
/// The runtime tests' allClose does the comparison. `computedIn` is the
/// precision the value went through before its own dtype: f32 state that a
/// bf16 gradient updates cannot agree more closely than bf16 does, since one
/// product rounding to the other side of a bf16 boundary moves it by an ulp
/// of bf16. The looser of the two dtypes' tolerances applies.
inline ::testing::AssertionResult allClose(const Tensor& expected, const Tensor& actual, double slack = 1.0,
                                           DType computedIn = DType::F64) {
  if (expected.type() != actual.type())
    return ::testing::AssertionFailure() << "types differ: " << typeToString(expected.type()) << " vs "
                                         << typeToString(actual.type());
  testing::Tolerance own = testing::toleranceFor(expected.dtype()), path = testing::toleranceFor(computedIn);
  testing::Tolerance tolerance = isFloating(expected.dtype())
                                     ? testing::scaled({std::max(own.rtol, path.rtol), std::max(own.atol, path.atol)},
                                                       slack)
                                     : testing::Tolerance{0.0, 0.0};
  return test::allClose(actual, expected.toDoubles(), tolerance);
}

} // namespace ampjit::runtime::gputest

#endif // AMPJIT_TESTS_GPU_GPUTESTUTIL_H
