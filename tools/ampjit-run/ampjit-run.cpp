//===- ampjit-run.cpp - compile a .mlir step and run it -------------------===//
//
//   ampjit-run step.mlir [--amp-pipeline="level=O1 dtype=f16"] [--print-plan]
//              [--jit-fuse-elementwise] [--jit-fuse-gemm-epilogues] [--jit-fuse-batch-norm-epilogues]
//              [--jit-fuse-gradient-accumulation] [--jit-defer-optimizer-updates]
//              [--jit-overlap-weight-gradients]
//              [--emit-plan=plan.bin] [--steps=N] [--seed=S] [--arg=3=w.npy]
//              [--arg=fc1.weight=w.npy] [--arg=14=0.01] [--print-results] [--save-results=DIR]
//              [--backend=cpu|cuda|cuda:N]
//
// Parses and verifies the module, optionally runs the AMP pipeline, lowers the
// entry function to a plan, and runs it N times on a backend (the CPU unless
// --backend says otherwise), feeding each step's tied results back as state
// (they are updated in place). Arguments
// come from .npy files, a number (every element), or a seeded generator chosen
// by role: inputs and parameters uniform in [-1, 1) scaled by 1/sqrt(fan-in)
// for parameters, integer inputs uniform in [0, --label-range), optimizer
// state zero, the loss scale 2^16 and its counters zero, hyperparameters 0.01.
//
//===----------------------------------------------------------------------===//

#include "ampjit/Codegen/CompileModule.h"

#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/CudaBackend.h"
#include "ampjit/runtime/Npy.h"
#include "ampjit/runtime/PlanFile.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <random>

namespace rt = ampjit::runtime;

static llvm::cl::opt<std::string> inputFile(llvm::cl::Positional, llvm::cl::desc("<step.mlir>"),
                                            llvm::cl::Required);
static llvm::cl::opt<std::string> functionName("function",
                                               llvm::cl::desc("The function to compile (default: the only one)"));
static llvm::cl::opt<std::string> ampPipeline(
    "amp-pipeline", llvm::cl::desc("Run --amp-pipeline with these options first (e.g. \"level=O1 dtype=f16\")"),
    llvm::cl::init(""));
static llvm::cl::opt<bool> printPlan("print-plan", llvm::cl::desc("Print the plan as text"));
static llvm::cl::opt<bool> fuseElementwise(
    "jit-fuse-elementwise",
    llvm::cl::desc("Fuse runs of elementwise steps and casts into one step each"));
static llvm::cl::opt<bool> fuseGemmEpilogues(
    "jit-fuse-gemm-epilogues",
    llvm::cl::desc("Fold bias adds, relu/gelu-tanh, gelu-tanh gradients and bias-gradient sums into the "
                   "gemm steps (the CUDA pipeline's cuBLASLt epilogues)"));
static llvm::cl::opt<bool> fuseBatchNormEpilogues(
    "jit-fuse-batch-norm-epilogues",
    llvm::cl::desc("Fold relu(batch_norm(x) [+ z]) into the batch norm and the relu's gradient into its "
                   "batch_norm_grad (the CUDA pipeline's)"));
static llvm::cl::opt<bool> fuseGradientAccumulation(
    "jit-fuse-gradient-accumulation",
    llvm::cl::desc("Fold the sum of a convolution's input gradient and another gradient into the convolution, "
                   "which adds to the other in place (the CUDA pipeline's cuDNN beta = 1)"));
static llvm::cl::opt<bool> deferOptimizerUpdates(
    "jit-defer-optimizer-updates",
    llvm::cl::desc("Move the optimizer update to the front of the next run (the CUDA pipeline's, for large "
                   "models); the results are printed after completing the last run's update"));
static llvm::cl::opt<bool> overlapWeightGradients(
    "jit-overlap-weight-gradients",
    llvm::cl::desc("Let weight gradients (convolutions' filter gradients, small GEMMs') run beside the steps after "
                   "them, as side steps (the CUDA pipeline's second stream; the CPU runs them in line)"));
static llvm::cl::opt<std::string> emitPlan("emit-plan", llvm::cl::desc("Save the plan to this file"));
static llvm::cl::opt<std::string> loadPlanFile(
    "load-plan", llvm::cl::desc("Run this saved plan instead of compiling (the .mlir is not read)"));
static llvm::cl::opt<unsigned> steps("steps", llvm::cl::desc("How many times to run the step"),
                                     llvm::cl::init(0));
static llvm::cl::opt<unsigned> seed("seed", llvm::cl::desc("Seed of the argument generator"),
                                    llvm::cl::init(0));
static llvm::cl::opt<int64_t> labelRange("label-range",
                                         llvm::cl::desc("Integer inputs are drawn from [0, N)"),
                                         llvm::cl::init(10));
static llvm::cl::list<std::string> argumentValues(
    "arg", llvm::cl::desc("INDEX=FILE.npy or INDEX=NUMBER: argument INDEX from a file or filled; "
                          "NAME=... names the argument as the plan does (fc1.weight, arg3)"));
static llvm::cl::opt<std::string> saveResults(
    "save-results", llvm::cl::desc("Write result K of the last step to DIR/result_K.npy"));
static llvm::cl::opt<bool> printResults("print-results",
                                        llvm::cl::desc("Print every result after the last step"));
static llvm::cl::opt<std::string> backendName(
    "backend",
    llvm::cl::desc("Where the steps run: cpu, cuda (device 0) or cuda:N. For CUDA, compile with its rewrites "
                   "(--jit-fuse-gemm-epilogues, ...) and the AMP pipeline's target=sm_NN"),
    llvm::cl::init("cpu"));

namespace {

int fail(const std::string &message) {
  llvm::errs() << "ampjit-run: error: " << message << "\n";
  return 1;
}

/// Fills an argument the user did not give, by its role (see the file comment).
rt::Expected<rt::Tensor> generateArgument(const rt::BufferDesc &buffer, std::mt19937_64 &generator) {
  const rt::TensorType &type = buffer.type;
  int64_t count = type.elementCount();
  std::vector<double> values(size_t(count), 0.0);
  switch (buffer.role) {
  case rt::BufferRole::Input:
  case rt::BufferRole::Param: {
    if (type.dtype == rt::DType::I64) {
      std::uniform_int_distribution<int64_t> labels(0, std::max<int64_t>(labelRange, 1) - 1);
      for (double &value : values)
        value = double(labels(generator));
    } else if (type.dtype == rt::DType::I1) {
      std::bernoulli_distribution coin(0.5);
      for (double &value : values)
        value = coin(generator) ? 1.0 : 0.0;
    } else {
      double bound = 1.0;
      if (buffer.role == rt::BufferRole::Param && type.shape.size() >= 2)
        bound = 1.0 / std::sqrt(double(type.shape.back()));
      std::uniform_real_distribution<double> uniform(-bound, bound);
      for (double &value : values)
        value = uniform(generator);
    }
    break;
  }
  case rt::BufferRole::ScalerState:
    if (rt::isFloating(type.dtype))
      std::fill(values.begin(), values.end(), 65536.0);
    break;
  case rt::BufferRole::Hyper:
    std::fill(values.begin(), values.end(), 0.01);
    break;
  default:
    break;
  }
  return rt::Tensor::fromDoubles(type.dtype, type.shape, values);
}

std::string summarize(const rt::Tensor &tensor) {
  std::string text = rt::typeToString(tensor.type()) + " [";
  int64_t count = tensor.type().elementCount();
  for (int64_t i = 0; i < std::min<int64_t>(count, 6); ++i)
    text += (i ? ", " : "") + rt::formatDouble(rt::loadElementAsDouble(tensor.type().dtype, tensor.bytes(), i));
  if (count > 6)
    text += ", ...";
  return text + "]";
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  llvm::cl::ParseCommandLineOptions(argc, argv, "ampjit-run: compile a jit/amp step and run it\n");
  // Named first, so a backend that cannot run says so before any compiling.
  rt::Expected<std::unique_ptr<rt::Backend>> backend = rt::createBackendByName(backendName);
  if (!backend)
    return fail("--backend=" + backendName + ": " + backend.message());
  auto *cuda = dynamic_cast<rt::CudaBackend *>(backend->get());

  rt::Plan plan;
  if (!loadPlanFile.empty()) {
    rt::Expected<rt::Plan> loaded = rt::loadPlan(loadPlanFile);
    if (!loaded)
      return fail(loaded.message());
    plan = std::move(*loaded);
  } else {
    std::string errorMessage;
    std::unique_ptr<llvm::MemoryBuffer> input = mlir::openInputFile(inputFile, &errorMessage);
    if (!input)
      return fail(errorMessage);
    rt::Expected<rt::Plan> built = ampjit::codegen::compileModule(
        std::string_view(input->getBufferStart(), input->getBufferSize()), std::string(inputFile),
        {.ampPipeline = ampPipeline,
         .function = functionName,
         .plan = {.fuseElementwise = fuseElementwise,
                  .fuseGemmEpilogues = fuseGemmEpilogues,
                  .fuseBatchNormEpilogues = fuseBatchNormEpilogues,
                  .fuseGradientAccumulation = fuseGradientAccumulation,
                  .deferOptimizerUpdates = deferOptimizerUpdates,
                  .overlapWeightGradients = overlapWeightGradients}});
    if (!built)
      return fail(built.message());
    plan = std::move(*built);
  }

  if (printPlan)
    llvm::outs() << rt::printPlan(plan);
  if (!emitPlan.empty())
    if (rt::Status status = rt::savePlan(plan, emitPlan); !status.ok())
      return fail(status.message());
  if (steps == 0)
    return 0;

  // Arguments: given ones first, the rest generated by role.
  std::vector<rt::Tensor> arguments(plan.argumentCount());
  for (const std::string &spec : argumentValues) {
    size_t equals = spec.find('=');
    char *end = nullptr;
    unsigned long index = std::strtoul(spec.c_str(), &end, 10);
    bool numbered = equals != std::string::npos && equals > 0 && end == spec.c_str() + equals;
    if (equals != std::string::npos && equals > 0 && !numbered) {
      // A name, as the plan prints it: a location name or argN.
      rt::Expected<size_t> found = rt::findArgument(plan, std::string_view(spec).substr(0, equals));
      if (!found)
        return fail("--arg=" + spec + ": " + found.message());
      index = *found;
    } else if (!numbered || index >= arguments.size()) {
      return fail("--arg=" + spec + ": expected INDEX=FILE.npy or INDEX=NUMBER with INDEX < " +
                  std::to_string(arguments.size()) + ", or NAME=... with an argument's name");
    }
    std::string value = spec.substr(equals + 1);
    const rt::BufferDesc &buffer = plan.buffers[plan.argumentBuffer(index)];
    char *numberEnd = nullptr;
    double number = std::strtod(value.c_str(), &numberEnd);
    rt::Expected<rt::Tensor> tensor =
        (!value.empty() && numberEnd == value.c_str() + value.size())
            ? rt::Tensor::fromDoubles(buffer.type.dtype, buffer.type.shape,
                                      std::vector<double>(size_t(buffer.type.elementCount()), number))
            : rt::readNpy(value);
    if (!tensor)
      return fail("--arg=" + spec + ": " + tensor.message());
    arguments[index] = std::move(*tensor);
  }
  std::mt19937_64 generator(seed);
  for (size_t index = 0; index < arguments.size(); ++index) {
    const rt::BufferDesc &buffer = plan.buffers[plan.argumentBuffer(index)];
    rt::Expected<rt::Tensor> generated = generateArgument(buffer, generator);
    if (!generated)
      return fail(generated.message());
    if (!arguments[index].bytes())
      arguments[index] = std::move(*generated);
  }

  if (cuda != nullptr) {
    for (size_t index = 0; index < arguments.size(); ++index) {
      rt::Expected<rt::Tensor> onDevice = cuda->toDevice(arguments[index]);
      if (!onDevice)
        return fail(rt::describeArgument(plan, index) + ": " + onDevice.message());
      arguments[index] = std::move(*onDevice);
    }
  }
  rt::Expected<std::unique_ptr<rt::Executable>> executable = (*backend)->prepare(plan);
  if (!executable)
    return fail(executable.message());
  if (rt::Status status = (*executable)->rederive(arguments); !status.ok())
    return fail(status.message());
  // What the host prints and saves: a device backend's results copied back.
  auto onHost = [&](const rt::Tensor &tensor) { return (*backend)->toHost(tensor); };
  std::vector<rt::Tensor> results;
  for (unsigned step = 0; step < steps; ++step) {
    rt::Expected<std::vector<rt::Tensor>> ran = (*executable)->run(arguments);
    if (!ran)
      return fail("step " + std::to_string(step) + ": " + ran.message());
    results = std::move(*ran);
    // The first result of a train step is its loss: show how it moves.
    if (!results.empty() && results.front().type().elementCount() == 1 &&
        rt::isFloating(results.front().type().dtype)) {
      rt::Expected<rt::Tensor> loss = onHost(results.front());
      if (!loss)
        return fail("step " + std::to_string(step) + ": " + loss.message());
      llvm::outs() << "step " << step << ": result 0 = "
                   << rt::formatDouble(rt::loadElementAsDouble(loss->type().dtype, loss->bytes(), 0)) << "\n";
    }
  }
  // State results are only final once the last run's deferred update is done.
  if (rt::Status status = (*executable)->completeDeferred(arguments); !status.ok())
    return fail(status.message());
  if (printResults || !saveResults.empty()) {
    for (size_t index = 0; index < results.size(); ++index) {
      rt::Expected<rt::Tensor> result = onHost(results[index]);
      if (!result)
        return fail("result " + std::to_string(index) + ": " + result.message());
      if (printResults)
        llvm::outs() << "result " << index << ": " << summarize(*result) << "\n";
      if (!saveResults.empty())
        if (rt::Status status = rt::writeNpy(saveResults + "/result_" + std::to_string(index) + ".npy", *result);
            !status.ok())
          return fail(status.message());
    }
  }
  return 0;
}
