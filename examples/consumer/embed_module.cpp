// The way in for another framework, built against the installed ampjit package
// only (examples/consumer/CMakeLists.txt): the framework has its training step
// as a graph of its own and hands it to ampjit as MLIR text in the jit dialect
// (here examples/mnist_train_step.mlir, the MNIST classifier's step with SGD
// and a dynamic loss scaler). ampjit compiles it with AMP, and the framework
// runs the plan on ampjit's runtime with tensors it owns: the step updates the
// state tensors it is given in place.
//
// Checks what such a framework relies on: the O1-f16 plan's first loss agrees
// with the fp32 (O0) plan's from the same state, training on the plan lowers
// the loss, the parameters it was given are the ones updated, and malformed IR
// is an error that names the source and line. Exits non-zero, saying why, when
// any of that fails. Usage: embed_module STEP.mlir

#include <ampjit/Codegen/CompileModule.h>
#include <ampjit/runtime/Backend.h>
#include <ampjit/runtime/CpuBackend.h>
#include <ampjit/runtime/Tensor.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace rt = ampjit::runtime;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  failures += ok ? 0 : 1;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "embed_module: %s\n", what.c_str());
  std::exit(2);
}

/// The framework's state for the step: a learnable batch (each label's images
/// share a prototype), parameters uniform in +-1/sqrt(fan-in), optimizer state
/// zero, lr 0.01, the loss scale 2^16 and its counters zero.
std::vector<rt::Tensor> initialState(const rt::Plan& plan) {
  std::mt19937_64 generator(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<double>> prototypes(10, std::vector<double>(784));
  for (auto& prototype : prototypes)
    for (double& value : prototype)
      value = normal(generator);
  std::vector<rt::Tensor> arguments;
  for (size_t index = 0; index < plan.argumentCount(); ++index) {
    const rt::BufferDesc& buffer = plan.buffers[plan.argumentBuffer(index)];
    std::vector<double> values(size_t(buffer.type.elementCount()), 0.0);
    if (index == 0) { // images [64, 784]
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = prototypes[(i / 784) % 10][i % 784] + 0.5 * normal(generator);
    } else if (index == 1) { // labels [64]
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = double(i % 10);
    } else if (buffer.role == rt::BufferRole::Param) {
      double bound = 1.0 / std::sqrt(double(buffer.type.shape.size() == 2 ? buffer.type.shape[1] : 512));
      std::uniform_real_distribution<double> uniform(-bound, bound);
      for (double& value : values)
        value = uniform(generator);
    } else if (buffer.role == rt::BufferRole::Hyper) {
      values.assign(values.size(), 0.01);
    } else if (buffer.role == rt::BufferRole::ScalerState && buffer.type.dtype == rt::DType::F32) {
      values.assign(values.size(), 65536.0);
    }
    rt::Expected<rt::Tensor> tensor = rt::Tensor::fromDoubles(buffer.type.dtype, buffer.type.shape, values);
    if (!tensor)
      die(tensor.message());
    arguments.push_back(std::move(*tensor));
  }
  if (rt::Status derived = rt::rederiveArguments(plan, arguments); !derived.ok())
    die(derived.message());
  return arguments;
}

double scalar(const rt::Tensor& tensor) { return rt::loadElementAsDouble(tensor.type().dtype, tensor.bytes(), 0); }

} // namespace

int main(int argc, char** argv) {
  if (argc != 2)
    die("usage: embed_module STEP.mlir");
  std::ifstream file(argv[1]);
  if (!file)
    die(std::string("cannot read ") + argv[1]);
  std::stringstream text;
  text << file.rdbuf();

  rt::Expected<rt::Plan> mixed = ampjit::codegen::compileModule(
      text.str(), argv[1], {.ampPipeline = "level=O1 dtype=f16 target=cpu", .plan = {.fuseElementwise = true}});
  rt::Expected<rt::Plan> fp32 = ampjit::codegen::compileModule(text.str(), argv[1], {.ampPipeline = "level=O0"});
  if (!mixed || !fp32)
    die(mixed ? fp32.message() : mixed.message());

  std::unique_ptr<rt::Backend> backend = rt::createCpuBackend();
  rt::Expected<std::unique_ptr<rt::Executable>> mixedStep = backend->prepare(*mixed);
  rt::Expected<std::unique_ptr<rt::Executable>> fp32Step = backend->prepare(*fp32);
  if (!mixedStep || !fp32Step)
    die(mixedStep ? fp32Step.message() : mixedStep.message());

  std::vector<rt::Tensor> state = initialState(*mixed), reference = initialState(*fp32);
  std::vector<double> firstWeights = state[2].toDoubles();
  rt::Expected<std::vector<rt::Tensor>> firstMixed = (*mixedStep)->run(state);
  rt::Expected<std::vector<rt::Tensor>> firstFp32 = (*fp32Step)->run(reference);
  if (!firstMixed || !firstFp32)
    die(firstMixed ? firstFp32.message() : firstMixed.message());
  double mixedLoss = scalar(firstMixed->front()), fp32Loss = scalar(firstFp32->front());
  // The f16 GEMMs round the activations: a few f16 ulps of the loss, relative.
  expect(std::abs(mixedLoss - fp32Loss) <= 1e-2 * std::abs(fp32Loss),
         "the O1-f16 plan's first loss " + std::to_string(mixedLoss) + " is the fp32 plan's " +
             std::to_string(fp32Loss) + " within f16 rounding");

  std::vector<double> updated = state[2].toDoubles();
  size_t changed = 0;
  for (size_t i = 0; i < updated.size(); ++i)
    changed += updated[i] != firstWeights[i];
  expect(changed > updated.size() / 2, "the step updated the framework's own weight tensor in place (" +
                                           std::to_string(changed) + " of " + std::to_string(updated.size()) +
                                           " elements changed)");

  double loss = mixedLoss;
  for (int step = 1; step < 40; ++step) {
    rt::Expected<std::vector<rt::Tensor>> ran = (*mixedStep)->run(state);
    if (!ran)
      die("step " + std::to_string(step) + ": " + ran.message());
    loss = scalar(ran->front());
  }
  expect(loss < mixedLoss / 4, "training on the plan lowers the loss: " + std::to_string(mixedLoss) + " -> " +
                                   std::to_string(loss) + " in 40 steps");

  rt::Expected<rt::Plan> broken =
      ampjit::codegen::compileModule("func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
                                     "  %y = jit.relu %x : tensor<4xf16>\n"
                                     "  return %y : tensor<4xf32>\n}\n",
                                     "framework-graph.mlir");
  expect(!broken && broken.message().find("framework-graph.mlir:2:") != std::string::npos,
         "malformed IR is an error at its source line: " + (broken ? std::string("(compiled)") : broken.message()));

  std::printf("%s\n", failures == 0 ? "embed_module: all checks passed" : "embed_module: checks failed");
  return failures == 0 ? 0 : 1;
}
