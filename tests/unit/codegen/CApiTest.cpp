// The C API (capi/include/ampjit-c/Ampjit.h): its plans are compileModule's,
// its sessions give the runtime's bits on the same state, and every mistake
// a caller can make through it is an error that says what and where and
// changes nothing.

#include "ampjit-c/Ampjit.h"

#include "ampjit/Codegen/CompileModule.h"
#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/CudaBackend.h"

#include "CApiTestUtil.h"
#include "CompileExample.h"
#include "TemporaryDirectory.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

namespace {

namespace rt = ampjit::runtime;
namespace mnist = ampjit::testing::mnist_step;
using ampjit::testing::exampleText;

using ampjit::testing::PlanHandle;
using ampjit::testing::readArgument;
using ampjit::testing::readLoss;
using ampjit::testing::SessionHandle;
using ampjit::testing::HostCopyHandle;
using ampjit::testing::waitFor;
using ampjit::testing::writeState;

constexpr const char* kO1 = "level=O1 dtype=f16 target=cpu";
constexpr const char* kO2 = "level=O2 dtype=bf16 target=cpu";

PlanHandle compileMnist(const char* ampPipeline, const char* planOptions = "fuse-elementwise") {
  std::string text = exampleText("mnist_train_step.mlir");
  return PlanHandle(
      ampjit_compile_module(text.data(), text.size(), "mnist_train_step.mlir", ampPipeline, planOptions));
}

rt::Plan referencePlan(const char* ampPipeline, ampjit::codegen::PlanOptions options = {.fuseElementwise = true}) {
  rt::Expected<rt::Plan> plan = ampjit::codegen::compileModule(exampleText("mnist_train_step.mlir"),
                                                               "mnist_train_step.mlir",
                                                               {.ampPipeline = ampPipeline, .plan = options});
  EXPECT_TRUE(plan.ok()) << plan.message();
  return plan.ok() ? std::move(*plan) : rt::Plan{};
}

std::string lastError() { return ampjit_last_error(); }

/// A CPU session of the module `text` as written, its plan kept in `plan`.
SessionHandle cpuSessionOf(const char* text, const char* sourceName, PlanHandle& plan) {
  plan.reset(ampjit_compile_module(text, std::strlen(text), sourceName, nullptr, nullptr));
  EXPECT_TRUE(plan) << lastError();
  SessionHandle session(plan ? ampjit_session_create(plan.get(), "cpu") : nullptr);
  EXPECT_TRUE(session) << lastError();
  return session;
}

float asFloat(const std::vector<std::byte>& bytes) {
  float value;
  std::memcpy(&value, bytes.data(), sizeof value);
  return value;
}

TEST(CApi, DescribesThePlansArgumentsAndResultsAsThePlanHasThem) {
  PlanHandle plan = compileMnist(kO2);
  ASSERT_TRUE(plan) << lastError();
  rt::Plan expected = referencePlan(kO2);
  char* text = ampjit_plan_to_text(plan.get());
  ASSERT_NE(text, nullptr) << lastError();
  EXPECT_EQ(std::string(text), rt::printPlan(expected)) << "the C API compiles what compileModule compiles";
  ampjit_free(text);

  ASSERT_EQ(ampjit_plan_argument_count(plan.get()), expected.argumentCount());
  size_t derived = 0;
  for (size_t i = 0; i < expected.argumentCount(); ++i) {
    SCOPED_TRACE("argument " + std::to_string(i));
    const rt::BufferDesc& buffer = expected.buffers[expected.argumentBuffer(i)];
    ampjit_value_info info;
    ASSERT_EQ(ampjit_plan_argument(plan.get(), i, &info), AMPJIT_OK) << lastError();
    EXPECT_EQ(ampjit_dtype_name(info.dtype), rt::dtypeName(buffer.type.dtype));
    EXPECT_EQ(ampjit_role_name(info.role), rt::bufferRoleName(buffer.role));
    EXPECT_EQ(rt::Shape(info.shape, info.shape + info.rank), buffer.type.shape);
    EXPECT_EQ(info.byte_size, buffer.type.byteSize());
    EXPECT_EQ(std::string(info.name), buffer.name);
    EXPECT_EQ(info.derived_from, buffer.derivedFrom);
    EXPECT_EQ(info.tied_argument, -1);
    derived += info.derived_from >= 0;
  }
  EXPECT_GT(derived, 0u) << "O2 adds bf16 copies of the parameters, derived from them";
  ampjit_value_info images;
  ASSERT_EQ(ampjit_plan_argument(plan.get(), mnist::kImages, &images), AMPJIT_OK);
  EXPECT_EQ(images.role, AMPJIT_ROLE_INPUT);
  EXPECT_EQ(images.dtype, AMPJIT_DTYPE_F32);

  ASSERT_EQ(ampjit_plan_result_count(plan.get()), expected.results.size());
  ampjit_value_info loss;
  ASSERT_EQ(ampjit_plan_result(plan.get(), 0, &loss), AMPJIT_OK) << lastError();
  EXPECT_EQ(loss.role, AMPJIT_ROLE_OUTPUT);
  EXPECT_EQ(loss.rank, 0u);
  EXPECT_EQ(loss.tied_argument, -1);
  for (size_t i = 0; i < expected.results.size(); ++i) {
    ampjit_value_info info;
    ASSERT_EQ(ampjit_plan_result(plan.get(), i, &info), AMPJIT_OK) << lastError();
    EXPECT_EQ(info.tied_argument, expected.results[i].tiedArgument) << "result " << i;
  }
  EXPECT_EQ(std::string(ampjit_role_name(ampjit_role(7))), "<invalid role>");
  EXPECT_EQ(std::string(ampjit_dtype_name(ampjit_dtype(9))), "<invalid dtype>");
}

TEST(CApi, ASessionGivesTheBitsOfTheRuntimeOnTheSameState) {
  // The reference runs the same plan on the runtime's CPU backend directly,
  // with the derived copies derived as initialArguments derives them.
  for (const char* amp : {kO1, kO2}) {
    SCOPED_TRACE(amp);
    PlanHandle plan = compileMnist(amp);
    ASSERT_TRUE(plan) << lastError();
    rt::Plan expected = referencePlan(amp);
    std::vector<rt::Tensor> reference = ampjit::testing::initialArguments(expected);
    SessionHandle session(ampjit_session_create(plan.get(), "cpu"));
    ASSERT_TRUE(session) << lastError();
    writeState(session.get(), expected, reference);

    std::unique_ptr<rt::Backend> cpu = rt::createCpuBackend();
    rt::Expected<std::unique_ptr<rt::Executable>> executable = cpu->prepare(expected);
    ASSERT_TRUE(executable.ok()) << executable.message();
    float firstLoss = 0, loss = 0;
    for (int step = 0; step < 6; ++step) {
      ASSERT_EQ(ampjit_session_run(session.get()), AMPJIT_OK) << lastError();
      rt::Expected<std::vector<rt::Tensor>> ran = (*executable)->run(reference);
      ASSERT_TRUE(ran.ok()) << ran.message();
      loss = readLoss(session.get());
      EXPECT_EQ(std::bit_cast<uint32_t>(loss), std::bit_cast<uint32_t>(ran->front().elements<float>()[0]))
          << "step " << step;
      firstLoss = step == 0 ? loss : firstLoss;
    }
    EXPECT_EQ(ampjit_session_steps(session.get()), 6u);
    EXPECT_LT(loss, firstLoss) << "six steps on learnable data lower the loss";
    std::vector<std::vector<std::byte>> expectedState = ampjit::testing::snapshot(reference);
    for (size_t i = 0; i < reference.size(); ++i)
      EXPECT_EQ(readArgument(session.get(), i), expectedState[i]) << "argument " << i << " after six steps";
  }
}

TEST(CApi, DerivedStateFollowsItsSourceAndCannotBeWrittenItself) {
  PlanHandle plan = compileMnist(kO2);
  ASSERT_TRUE(plan) << lastError();
  SessionHandle session(ampjit_session_create(plan.get(), "cpu"));
  ASSERT_TRUE(session) << lastError();
  size_t derived = 0;
  ampjit_value_info info;
  for (; derived < ampjit_plan_argument_count(plan.get()); ++derived) {
    ASSERT_EQ(ampjit_plan_argument(plan.get(), derived, &info), AMPJIT_OK);
    if (info.derived_from >= 0)
      break;
  }
  ASSERT_GE(info.derived_from, 0) << "O2's plan has a derived bf16 copy";
  ampjit_value_info source;
  ASSERT_EQ(ampjit_plan_argument(plan.get(), size_t(info.derived_from), &source), AMPJIT_OK);
  ASSERT_EQ(source.dtype, AMPJIT_DTYPE_F32);
  ASSERT_EQ(info.dtype, AMPJIT_DTYPE_BF16);

  std::vector<float> values(source.byte_size / sizeof(float));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = 1.0f + float(i % 97) * 1e-3f + 3e-5f; // not representable in bf16
  ASSERT_EQ(ampjit_session_write(session.get(), size_t(info.derived_from), values.data(), source.byte_size),
            AMPJIT_OK)
      << lastError();
  std::vector<double> widened(values.begin(), values.end());
  rt::Tensor rounded = *rt::Tensor::fromDoubles(rt::DType::BF16, rt::Shape(info.shape, info.shape + info.rank),
                                                widened);
  std::vector<std::byte> copy = readArgument(session.get(), derived);
  EXPECT_EQ(copy, std::vector<std::byte>(rounded.bytes(), rounded.bytes() + rounded.byteSize()))
      << "the bf16 copy is its source rounded to nearest even once the source is written";

  std::vector<std::byte> zeros(info.byte_size);
  EXPECT_EQ(ampjit_session_write(session.get(), derived, zeros.data(), zeros.size()), AMPJIT_ERROR);
  EXPECT_NE(lastError().find("is derived from argument " + std::to_string(info.derived_from)), std::string::npos)
      << lastError();
  EXPECT_EQ(readArgument(session.get(), derived), copy) << "a refused write changes nothing";
}

TEST(CApi, ReadingStateAfterADeferredUpdateSeesTheUpdate) {
  // The deferred plan leaves each step's update pending for the next run;
  // a read must do it first, so the two sessions read the same bits.
  PlanHandle inLine = compileMnist(kO1, "fuse-elementwise");
  PlanHandle deferred = compileMnist(kO1, "fuse-elementwise defer-optimizer-updates defer-minimum-elements=0");
  ASSERT_TRUE(inLine && deferred) << lastError();
  rt::Plan expected = referencePlan(kO1);
  std::vector<rt::Tensor> state = ampjit::testing::initialArguments(expected);
  SessionHandle first(ampjit_session_create(inLine.get(), "cpu"));
  SessionHandle second(ampjit_session_create(deferred.get(), "cpu"));
  ASSERT_TRUE(first && second) << lastError();
  writeState(first.get(), expected, state);
  writeState(second.get(), expected, state);
  for (int step = 0; step < 3; ++step) {
    ASSERT_EQ(ampjit_session_run(first.get()), AMPJIT_OK) << lastError();
    ASSERT_EQ(ampjit_session_run(second.get()), AMPJIT_OK) << lastError();
    EXPECT_EQ(readLoss(first.get()), readLoss(second.get())) << "step " << step;
    std::vector<std::byte> weights = readArgument(first.get(), mnist::kFirstParam);
    EXPECT_EQ(readArgument(second.get(), mnist::kFirstParam), weights) << "step " << step;
    // A tied result reads its argument, the update done.
    ampjit_value_info result;
    for (size_t r = 0; r < ampjit_plan_result_count(deferred.get()); ++r) {
      ASSERT_EQ(ampjit_plan_result(deferred.get(), r, &result), AMPJIT_OK);
      if (result.tied_argument == int64_t(mnist::kFirstParam)) {
        std::vector<std::byte> bytes(result.byte_size);
        ASSERT_EQ(ampjit_session_read_result(second.get(), r, bytes.data(), bytes.size()), AMPJIT_OK)
            << lastError();
        EXPECT_EQ(bytes, weights);
      }
    }
  }
}

TEST(CApi, AnOverflowingStepIsSkippedNotAnError) {
  PlanHandle plan = compileMnist(kO1);
  ASSERT_TRUE(plan) << lastError();
  rt::Plan expected = referencePlan(kO1);
  std::vector<rt::Tensor> state = ampjit::testing::initialArguments(expected);
  SessionHandle session(ampjit_session_create(plan.get(), "cpu"));
  ASSERT_TRUE(session) << lastError();
  writeState(session.get(), expected, state);
  // An f16 gradient overflows at this scale.
  ASSERT_EQ(ampjit_session_fill(session.get(), mnist::kScale, 1e30), AMPJIT_OK) << lastError();
  std::vector<std::byte> weights = readArgument(session.get(), mnist::kFirstParam);
  ASSERT_EQ(ampjit_session_run(session.get()), AMPJIT_OK) << lastError();
  EXPECT_EQ(readArgument(session.get(), mnist::kFirstParam), weights) << "a skipped step leaves the parameters";
  EXPECT_EQ(asFloat(readArgument(session.get(), mnist::kScale)), 5e29f) << "and backs the scale off";
  std::vector<std::byte> skipped = readArgument(session.get(), mnist::kSkippedSteps);
  int64_t skippedSteps;
  std::memcpy(&skippedSteps, skipped.data(), sizeof skippedSteps);
  EXPECT_EQ(skippedSteps, 1);
}

TEST(CApi, FillRoundsToTheArgumentsDtypeAndRefusesWhatAnIntegerCannotHold) {
  PlanHandle plan = compileMnist(kO1);
  ASSERT_TRUE(plan) << lastError();
  SessionHandle session(ampjit_session_create(plan.get(), "cpu"));
  ASSERT_TRUE(session) << lastError();
  ASSERT_EQ(ampjit_session_fill(session.get(), mnist::kLearningRate, 0.1), AMPJIT_OK) << lastError();
  EXPECT_EQ(asFloat(readArgument(session.get(), mnist::kLearningRate)), 0.1f);
  ASSERT_EQ(ampjit_session_fill(session.get(), mnist::kLabels, 7), AMPJIT_OK) << lastError();
  std::vector<std::byte> labels = readArgument(session.get(), mnist::kLabels);
  int64_t last;
  std::memcpy(&last, labels.data() + labels.size() - sizeof last, sizeof last);
  EXPECT_EQ(last, 7);
  for (double value : {double(NAN), 0.5, 1e19}) {
    EXPECT_EQ(ampjit_session_fill(session.get(), mnist::kLabels, value), AMPJIT_ERROR);
    EXPECT_NE(lastError().find("argument 1 'arg1' (input i64[64]) cannot hold "), std::string::npos) << lastError();
  }
  EXPECT_EQ(readArgument(session.get(), mnist::kLabels), labels) << "the refused fills changed nothing";
}

TEST(CApi, ValuesGoInAsDoublesRoundedAsTheRuntimeRoundsAndComeBackExactly) {
  const char* text = "func.func @half(%x: tensor<4xf16> {jit.role = \"input\"}, %n: tensor<2xi64> {jit.role = "
                     "\"input\"}) -> tensor<4xf16> {\n"
                     "  %y = jit.relu %x : tensor<4xf16>\n"
                     "  return %y : tensor<4xf16>\n}\n";
  PlanHandle plan;
  SessionHandle session = cpuSessionOf(text, "half.mlir", plan);
  ASSERT_TRUE(session);
  const double values[4] = {1.0 / 3.0, 70000.0, -2.5, 1e-8};
  ASSERT_EQ(ampjit_session_write_values(session.get(), 0, values, 4), AMPJIT_OK) << lastError();
  rt::Tensor rounded = *rt::Tensor::fromDoubles(rt::DType::F16, {4}, values);
  std::vector<std::byte> bits = readArgument(session.get(), 0);
  EXPECT_EQ(bits, std::vector<std::byte>(rounded.bytes(), rounded.bytes() + rounded.byteSize()))
      << "rounded to nearest even, past 65504 to inf, as the runtime rounds";
  double back[4];
  ASSERT_EQ(ampjit_session_read_values(session.get(), 0, back, 4), AMPJIT_OK) << lastError();
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(back[i], rounded.at(i)) << "element " << i;
  EXPECT_TRUE(std::isinf(back[1]));

  ASSERT_EQ(ampjit_session_run(session.get()), AMPJIT_OK) << lastError();
  EXPECT_EQ(ampjit_session_write_values(session.get(), 0, values, 3), AMPJIT_ERROR);
  EXPECT_NE(lastError().find("argument 0 'arg0' (input f16[4]) has 4 elements, not 3"), std::string::npos)
      << lastError();
  const double counts[2] = {3, 2.5};
  EXPECT_EQ(ampjit_session_write_values(session.get(), 1, counts, 2), AMPJIT_ERROR);
  EXPECT_NE(lastError().find("(input i64[2]) cannot hold 2.5 (element 1)"), std::string::npos) << lastError();
  EXPECT_EQ(ampjit_session_read_values(session.get(), 0, nullptr, 4), AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_session_read_values: values is NULL");
  EXPECT_EQ(readArgument(session.get(), 0), bits) << "the refused calls changed nothing";
}

TEST(CApi, APlanSavedAndLoadedIsTheSamePlan) {
  ampjit::testing::TemporaryDirectory directory;
  PlanHandle plan = compileMnist(kO2);
  ASSERT_TRUE(plan) << lastError();
  std::string path = (directory.path / "step.plan").string();
  ASSERT_EQ(ampjit_plan_save(plan.get(), path.c_str()), AMPJIT_OK) << lastError();
  PlanHandle loaded(ampjit_plan_load(path.c_str()));
  ASSERT_TRUE(loaded) << lastError();
  char* original = ampjit_plan_to_text(plan.get());
  char* reloaded = ampjit_plan_to_text(loaded.get());
  EXPECT_STREQ(original, reloaded);
  ampjit_free(original);
  ampjit_free(reloaded);

  std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a plan";
  EXPECT_EQ(ampjit_plan_load(path.c_str()), nullptr);
  EXPECT_EQ(lastError().rfind("ampjit_plan_load: ", 0), 0u) << lastError();
  EXPECT_NE(lastError().find(path), std::string::npos) << "the error names the file: " << lastError();
}

TEST(CApi, CompileErrorsSayWhatAndWhere) {
  const char* broken = "func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                       "  %y = jit.relu %x : tensor<4xf16>\n"
                       "  return %y : tensor<4xf32>\n}\n";
  EXPECT_EQ(ampjit_compile_module(broken, std::strlen(broken), "framework.mlir", kO1, nullptr), nullptr);
  EXPECT_EQ(lastError().rfind("ampjit_compile_module: framework.mlir", 0), 0u) << lastError();
  EXPECT_NE(lastError().find("framework.mlir:2:"), std::string::npos) << lastError();

  std::string text = exampleText("mnist_train_step.mlir");
  // The text need not end in NUL: a length that cuts the module short is
  // what is compiled.
  EXPECT_EQ(ampjit_compile_module(text.data(), text.size() / 2, "half.mlir", kO1, nullptr), nullptr);
  EXPECT_NE(lastError().find("half.mlir:"), std::string::npos) << lastError();

  EXPECT_EQ(ampjit_compile_module(text.data(), text.size(), "step.mlir", kO1, "fuse-elementwise fuse-everything"),
            nullptr);
  EXPECT_NE(lastError().find("step.mlir: unknown plan option 'fuse-everything' (known: fuse-elementwise,"),
            std::string::npos)
      << lastError();
  EXPECT_EQ(ampjit_compile_module(text.data(), text.size(), "step.mlir", kO1, "defer-minimum-elements=-3"), nullptr);
  EXPECT_NE(lastError().find("'defer-minimum-elements=-3' needs a count"), std::string::npos) << lastError();
  EXPECT_EQ(ampjit_compile_module(text.data(), text.size(), "step.mlir", "level=O7", nullptr), nullptr);
  EXPECT_NE(lastError().find("O7"), std::string::npos) << lastError();
  EXPECT_EQ(ampjit_compile_module(text.data(), text.size(), "step.mlir", kO1, "function=nope"), nullptr);
  EXPECT_NE(lastError().find("nope"), std::string::npos) << lastError();
  EXPECT_EQ(ampjit_compile_module(nullptr, 0, "step.mlir", kO1, nullptr), nullptr);
  EXPECT_EQ(lastError(), "ampjit_compile_module: text is NULL");

  PlanHandle named = compileMnist(kO1, "function=train_step");
  EXPECT_TRUE(named) << lastError();
}

TEST(CApi, SessionMistakesAreErrorsThatChangeNothing) {
  PlanHandle plan = compileMnist(kO1);
  ASSERT_TRUE(plan) << lastError();
  EXPECT_EQ(ampjit_session_create(plan.get(), "tpu"), nullptr);
  EXPECT_EQ(lastError(), "ampjit_session_create: unknown backend 'tpu' (known: cpu, cuda, cuda:N)");
  EXPECT_EQ(ampjit_session_create(plan.get(), "cuda:x"), nullptr);
  EXPECT_NE(lastError().find("'cuda:N' takes a device number"), std::string::npos) << lastError();
  EXPECT_EQ(ampjit_session_create(nullptr, "cpu"), nullptr);
  EXPECT_EQ(lastError(), "ampjit_session_create: plan is NULL");

  SessionHandle session(ampjit_session_create(plan.get(), "cpu"));
  ASSERT_TRUE(session) << lastError();
  float loss;
  EXPECT_EQ(ampjit_session_read_result(session.get(), 0, &loss, sizeof loss), AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_session_read_result: result 0: no step has run yet");

  ASSERT_EQ(ampjit_session_fill(session.get(), mnist::kFirstParam, 0.25), AMPJIT_OK) << lastError();
  std::vector<std::byte> before = readArgument(session.get(), mnist::kFirstParam);
  std::vector<float> tooShort(10, 1.0f);
  EXPECT_EQ(ampjit_session_write(session.get(), mnist::kFirstParam, tooShort.data(), 40), AMPJIT_ERROR);
  ampjit_value_info info;
  ASSERT_EQ(ampjit_plan_argument(plan.get(), mnist::kFirstParam, &info), AMPJIT_OK);
  EXPECT_NE(lastError().find("argument 2 '" + std::string(info.name) + "' (param f32["), std::string::npos)
      << lastError();
  EXPECT_NE(lastError().find(std::to_string(info.byte_size) + " bytes, not 40"), std::string::npos) << lastError();
  EXPECT_EQ(readArgument(session.get(), mnist::kFirstParam), before) << "the refused write changed nothing";

  EXPECT_EQ(ampjit_session_write(session.get(), 99, tooShort.data(), 40), AMPJIT_ERROR);
  EXPECT_NE(lastError().find("argument 99 does not exist: plan @"), std::string::npos) << lastError();
  EXPECT_EQ(ampjit_session_read(session.get(), mnist::kFirstParam, nullptr, info.byte_size), AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_session_read: data is NULL");
  EXPECT_EQ(ampjit_session_run(nullptr), AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_session_run: session is NULL");
  EXPECT_EQ(ampjit_session_read_result(session.get(), 1000, &loss, sizeof loss), AMPJIT_ERROR);
  EXPECT_NE(lastError().find("result 1000 does not exist"), std::string::npos) << lastError();
  ASSERT_EQ(ampjit_session_run(session.get()), AMPJIT_OK) << lastError();
  EXPECT_EQ(ampjit_session_read_result(session.get(), 0, &loss, 8), AMPJIT_ERROR);
  EXPECT_NE(lastError().find("result 0 (f32[]) is 4 bytes, not 8"), std::string::npos) << lastError();
  EXPECT_EQ(ampjit_plan_argument_count(nullptr), 0u);
  EXPECT_EQ(ampjit_session_steps(nullptr), 0u);
}

TEST(CApi, DeviceMemoryCallsNeedACudaSessionAndSaySo) {
  PlanHandle plan = compileMnist(kO1);
  ASSERT_TRUE(plan) << lastError();
  SessionHandle session(ampjit_session_create(plan.get(), "cpu"));
  ASSERT_TRUE(session) << lastError();
  ASSERT_EQ(ampjit_session_fill(session.get(), mnist::kFirstParam, 0.25), AMPJIT_OK) << lastError();
  std::vector<std::byte> before = readArgument(session.get(), mnist::kFirstParam);
  std::vector<std::byte> bytes(before.size());
  const std::string why = ": device memory needs a session on \"cuda\"; this one runs on \"cpu\" (use the calls "
                          "without _device)";
  EXPECT_EQ(ampjit_session_write_device(session.get(), mnist::kFirstParam, bytes.data(), bytes.size(), nullptr),
            AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_session_write_device" + why);
  EXPECT_EQ(readArgument(session.get(), mnist::kFirstParam), before) << "the refused write changed nothing";
  EXPECT_EQ(ampjit_session_read_device(session.get(), mnist::kFirstParam, bytes.data(), bytes.size(), nullptr),
            AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_session_read_device" + why);
  ASSERT_EQ(ampjit_session_run(session.get()), AMPJIT_OK) << lastError();
  float loss = 0;
  EXPECT_EQ(ampjit_session_read_result_device(session.get(), 0, &loss, sizeof loss, nullptr), AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_session_read_result_device" + why);
  EXPECT_EQ(ampjit_session_write_device(nullptr, 0, bytes.data(), bytes.size(), nullptr), AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_session_write_device: session is NULL");
  // A CPU session has no stream, and nothing to wait for.
  EXPECT_EQ(ampjit_session_stream(session.get()), nullptr);
  EXPECT_EQ(ampjit_session_stream(nullptr), nullptr);
  EXPECT_EQ(ampjit_session_synchronize(session.get()), AMPJIT_OK) << lastError();
  EXPECT_EQ(ampjit_session_synchronize(nullptr), AMPJIT_ERROR);
}

TEST(CApi, AReadThatArrivesLaterHoldsTheValueAsItWasWhenAskedFor) {
  // On "cpu" the value is taken at once: the steps and writes after the
  // call do not reach it, and it is ready from the start.
  PlanHandle plan = compileMnist(kO1);
  ASSERT_TRUE(plan) << lastError();
  SessionHandle session(ampjit_session_create(plan.get(), "cpu"));
  ASSERT_TRUE(session) << lastError();
  writeState(session.get(), referencePlan(kO1), ampjit::testing::initialArguments(referencePlan(kO1)));
  EXPECT_EQ(ampjit_session_read_result_async(session.get(), 0), nullptr);
  EXPECT_EQ(lastError(), "ampjit_session_read_result_async: result 0: no step has run yet");
  ASSERT_EQ(ampjit_session_run(session.get()), AMPJIT_OK) << lastError();
  float firstLoss = readLoss(session.get());
  std::vector<std::byte> firstWeight = readArgument(session.get(), mnist::kFirstParam);
  HostCopyHandle loss(ampjit_session_read_result_async(session.get(), 0));
  HostCopyHandle weight(ampjit_session_read_async(session.get(), mnist::kFirstParam));
  ASSERT_TRUE(loss && weight) << lastError();
  EXPECT_EQ(ampjit_host_copy_ready(loss.get()), 1);
  ASSERT_EQ(ampjit_session_run(session.get()), AMPJIT_OK) << lastError();
  ASSERT_NE(readArgument(session.get(), mnist::kFirstParam), firstWeight) << "the second step changed nothing";
  float arrived = 0;
  ASSERT_EQ(ampjit_host_copy_wait(loss.get(), &arrived, sizeof arrived), AMPJIT_OK) << lastError();
  EXPECT_EQ(arrived, firstLoss);
  EXPECT_EQ(waitFor(weight.get(), firstWeight.size()), firstWeight);
  EXPECT_EQ(waitFor(weight.get(), firstWeight.size()), firstWeight) << "a second wait gives it again";

  // Mistakes say what and which.
  double tooWide = 0;
  EXPECT_EQ(ampjit_host_copy_wait(loss.get(), &tooWide, sizeof tooWide), AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_host_copy_wait: result 0 (f32[]) is 4 bytes, not 8");
  EXPECT_EQ(ampjit_host_copy_wait(loss.get(), nullptr, sizeof arrived), AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_host_copy_wait: data is NULL");
  EXPECT_EQ(ampjit_host_copy_ready(nullptr), -1);
  EXPECT_EQ(ampjit_host_copy_wait(nullptr, &arrived, sizeof arrived), AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_host_copy_wait: copy is NULL");
  size_t arguments = ampjit_plan_argument_count(plan.get());
  EXPECT_EQ(ampjit_session_read_async(session.get(), arguments), nullptr);
  EXPECT_NE(lastError().find("ampjit_session_read_async: argument " + std::to_string(arguments)), std::string::npos)
      << lastError();
  EXPECT_EQ(ampjit_session_read_async(nullptr, 0), nullptr);
  EXPECT_EQ(lastError(), "ampjit_session_read_async: session is NULL");
  // A copy may outlive its session.
  session.reset();
  EXPECT_EQ(waitFor(weight.get(), firstWeight.size()), firstWeight);
}

TEST(CApi, AnI1ArgumentTakesOnlyZeroAndOneBytes) {
  const char* text = "func.func @mask(%m: tensor<3xi1> {jit.role = \"input\"}, %x: tensor<3xf32> {jit.role = "
                     "\"input\"}, %y: tensor<3xf32> {jit.role = \"input\"}) -> tensor<3xf32> {\n"
                     "  %r = jit.select %m, %x, %y : (tensor<3xi1>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>\n"
                     "  return %r : tensor<3xf32>\n}\n";
  PlanHandle plan;
  SessionHandle session = cpuSessionOf(text, "mask.mlir", plan);
  ASSERT_TRUE(session);
  const uint8_t bad[3] = {1, 2, 0};
  EXPECT_EQ(ampjit_session_write(session.get(), 0, bad, 3), AMPJIT_ERROR);
  EXPECT_NE(lastError().find("is i1, but byte 1 is 2, not 0 or 1"), std::string::npos) << lastError();
  EXPECT_EQ(ampjit_session_fill(session.get(), 0, 2.0), AMPJIT_ERROR);
  EXPECT_NE(lastError().find("(input i1[3]) cannot hold 2"), std::string::npos) << lastError();
  const uint8_t mask[3] = {1, 0, 1};
  const float x[3] = {1, 2, 3}, y[3] = {-1, -2, -3};
  ASSERT_EQ(ampjit_session_write(session.get(), 0, mask, 3), AMPJIT_OK) << lastError();
  ASSERT_EQ(ampjit_session_write(session.get(), 1, x, sizeof x), AMPJIT_OK) << lastError();
  ASSERT_EQ(ampjit_session_write(session.get(), 2, y, sizeof y), AMPJIT_OK) << lastError();
  ASSERT_EQ(ampjit_session_run(session.get()), AMPJIT_OK) << lastError();
  float r[3];
  ASSERT_EQ(ampjit_session_read_result(session.get(), 0, r, sizeof r), AMPJIT_OK) << lastError();
  EXPECT_EQ(r[0], 1.0f);
  EXPECT_EQ(r[1], -2.0f);
  EXPECT_EQ(r[2], 3.0f);
}

TEST(CApi, ArgumentsTakeTheNamesTheirLocationsGive) {
  // How a framework names its tensors: a name location on the argument.
  const char* text = "func.func @step(%x: tensor<2x3xf32> {jit.role = \"input\"} loc(\"batch\"), "
                     "%w: tensor<4x3xf32> {jit.role = \"param\"} loc(\"fc1.weight\"), "
                     "%b: tensor<4xf32> {jit.role = \"param\"}) -> tensor<2x4xf32> {\n"
                     "  %y = jit.matmul %x, %w {transpose_rhs} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>\n"
                     "  return %y : tensor<2x4xf32>\n}\n";
  PlanHandle plan(ampjit_compile_module(text, std::strlen(text), "named.mlir", nullptr, nullptr));
  ASSERT_TRUE(plan) << lastError();
  std::vector<std::string> names;
  for (size_t i = 0; i < ampjit_plan_argument_count(plan.get()); ++i) {
    ampjit_value_info info;
    ASSERT_EQ(ampjit_plan_argument(plan.get(), i, &info), AMPJIT_OK) << lastError();
    names.push_back(info.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"batch", "fc1.weight", "arg2"}));
  SessionHandle session(ampjit_session_create(plan.get(), "cpu"));
  ASSERT_TRUE(session) << lastError();
  float tooFew[2] = {};
  EXPECT_EQ(ampjit_session_write(session.get(), 1, tooFew, sizeof tooFew), AMPJIT_ERROR);
  EXPECT_NE(lastError().find("argument 1 'fc1.weight' (param f32[4x3]) is 48 bytes, not 8"), std::string::npos)
      << lastError();

  // O2's low-precision copy of a named parameter is named after it.
  PlanHandle mixed(ampjit_compile_module(text, std::strlen(text), "named.mlir", "level=O2 dtype=bf16", nullptr));
  ASSERT_TRUE(mixed) << lastError();
  ASSERT_EQ(ampjit_plan_argument_count(mixed.get()), 4u);
  ampjit_value_info copy;
  ASSERT_EQ(ampjit_plan_argument(mixed.get(), 3, &copy), AMPJIT_OK) << lastError();
  EXPECT_EQ(copy.derived_from, 1);
  EXPECT_EQ(std::string(copy.name), "fc1.weight.bf16");
}

TEST(CApi, AnArgumentIsFoundByItsName) {
  const char* text = "func.func @step(%x: tensor<2x3xf32> {jit.role = \"input\"} loc(\"batch\"), "
                     "%w: tensor<4x3xf32> {jit.role = \"param\"} loc(\"fc1.weight\"), "
                     "%v: tensor<4x3xf32> {jit.role = \"param\"} loc(\"shared\"), "
                     "%u: tensor<4x3xf32> {jit.role = \"param\"} loc(\"shared\"), "
                     "%b: tensor<4xf32> {jit.role = \"param\"}) -> tensor<2x4xf32> {\n"
                     "  %y = jit.matmul %x, %w {transpose_rhs} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>\n"
                     "  return %y : tensor<2x4xf32>\n}\n";
  PlanHandle plan(ampjit_compile_module(text, std::strlen(text), "named.mlir", nullptr, nullptr));
  ASSERT_TRUE(plan) << lastError();
  for (auto [name, expected] : {std::pair{"batch", size_t(0)}, {"fc1.weight", size_t(1)}, {"arg4", size_t(4)}}) {
    size_t index = 99;
    ASSERT_EQ(ampjit_plan_find_argument(plan.get(), name, &index), AMPJIT_OK) << lastError();
    EXPECT_EQ(index, expected) << name;
  }
  size_t index = 99;
  EXPECT_EQ(ampjit_plan_find_argument(plan.get(), "fc2.weight", &index), AMPJIT_ERROR);
  EXPECT_EQ(lastError(), "ampjit_plan_find_argument: plan @step has no argument named 'fc2.weight'; its arguments "
                         "are 'batch', 'fc1.weight', 'shared', 'shared', 'arg4'");
  EXPECT_EQ(ampjit_plan_find_argument(plan.get(), "shared", &index), AMPJIT_ERROR);
  EXPECT_NE(lastError().find("has 2 arguments named 'shared' (2 and 3); use an index"), std::string::npos)
      << lastError();
  EXPECT_EQ(index, 99u); // a failed lookup writes nothing
  EXPECT_EQ(ampjit_plan_find_argument(plan.get(), nullptr, &index), AMPJIT_ERROR);
  EXPECT_EQ(ampjit_plan_find_argument(plan.get(), "batch", nullptr), AMPJIT_ERROR);
}

TEST(CApi, SessionsOnSeveralThreadsShareOnePlanAndAgree) {
  // One call at a time per handle: here four threads each compile, create a
  // session from one shared plan and run it, while the others do the same.
  PlanHandle shared = compileMnist(kO1);
  ASSERT_TRUE(shared) << lastError();
  rt::Plan expected = referencePlan(kO1);
  std::vector<rt::Tensor> state = ampjit::testing::initialArguments(expected);
  constexpr int kThreads = 4, kSteps = 3;
  std::vector<std::vector<float>> losses(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      PlanHandle own = compileMnist(kO1);
      SessionHandle session(ampjit_session_create(t % 2 == 0 ? shared.get() : own.get(), "cpu"));
      if (!own || !session) {
        errors[t] = ampjit_last_error();
        return;
      }
      for (size_t i = 0; i < state.size(); ++i)
        if (ampjit_session_write(session.get(), i, state[i].bytes(), state[i].byteSize()) != AMPJIT_OK)
          errors[t] = ampjit_last_error();
      for (int step = 0; step < kSteps && errors[t].empty(); ++step) {
        float loss = NAN;
        if (ampjit_session_run(session.get()) != AMPJIT_OK ||
            ampjit_session_read_result(session.get(), 0, &loss, sizeof loss) != AMPJIT_OK)
          errors[t] = ampjit_last_error();
        losses[t].push_back(loss);
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    ASSERT_EQ(losses[t].size(), size_t(kSteps)) << "thread " << t;
    for (int step = 0; step < kSteps; ++step)
      EXPECT_EQ(std::bit_cast<uint32_t>(losses[t][step]), std::bit_cast<uint32_t>(losses[0][step]))
          << "thread " << t << ", step " << step;
  }
}

TEST(CApi, TheLastErrorBelongsToItsThread) {
  EXPECT_EQ(ampjit_session_run(nullptr), AMPJIT_ERROR);
  std::string seenElsewhere = "unset";
  std::thread([&] { seenElsewhere = ampjit_last_error(); }).join();
  EXPECT_EQ(seenElsewhere, "") << "another thread's failure is not this thread's";
  EXPECT_EQ(lastError(), "ampjit_session_run: session is NULL");
}

TEST(CApi, SaysWhatTheBuildAndTheMachineHave) {
  EXPECT_STREQ(ampjit_version(), AMPJIT_PROJECT_VERSION);
  EXPECT_EQ(ampjit_cuda_backend_built(), rt::cudaBackendBuilt() ? 1 : 0);
  EXPECT_EQ(ampjit_cuda_device_count(), rt::cudaDeviceCount());
  if (ampjit_cuda_device_count() == 0) {
    // Then a CUDA session cannot be had, and the error says why.
    PlanHandle plan = compileMnist(kO1);
    ASSERT_TRUE(plan) << lastError();
    EXPECT_EQ(ampjit_session_create(plan.get(), "cuda"), nullptr);
    EXPECT_EQ(lastError().rfind("ampjit_session_create: backend 'cuda': ", 0), 0u) << lastError();
  }
}

} // namespace
