// ampjit-bench: times whole traced training steps and prints JSON, one line
// per configuration, then a summary line. Workloads are the peers' (the
// PyTorch scripts in bench/peers/, copied from the team's anchors):
//
//   classifier  MindSpore's MNIST MLP 784-512-512-10, batch 64, cross-entropy
//   mlp9        Paddle's 9 x Linear(8192), batch 2048, MSE
//   resnet50    torchvision ResNet-50 (ImageNet stem), 3x32x32, batch 128, 10 classes
//   resnet18    the same with ResNet-18
//
// each at O0 and at O1/O2 with f16 and bf16, plain SGD as the peers run it
// (or, with --optimizer, Adam or AdamW, the peers then running PyTorch's fused
// kernel), dynamic loss scaling for f16. Per configuration it reports the median,
// minimum and maximum step time after warm-up and every step's time in
// order, the host's median time per call (on CUDA, what enqueueing a step
// costs: the pace when it exceeds the GPU's), the time to the first step in a
// fresh process (this binary re-run
// with --first-step-only: trace, compile, first step), the peak resident
// memory, and where PyTorch with CUDA is importable, the peers measured in
// the same run with our speedup over each: PyTorch eager in the matching
// mode, torch.compile in it (--peer-compile), and for O1-O3 the anchors'
// strongest launch-bound peer, the bf16 whole step in one CUDA graph
// (torch_graph_peer.py; the issues' targets compare f16 runs with it too).
// On the CPU backend there is no peer (the peer scripts need CUDA) and the
// sizes default smaller; the JSON says what ran.

#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/LowPrecision.h"
#include "jit/jit.h"
#include "jit/trace.h"

#include <nlohmann/json.hpp>

#include <execinfo.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using jit::Tensor;
using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> models{"classifier"};
  std::vector<jit::amp::Level> levels{jit::amp::O0, jit::amp::O1, jit::amp::O2};
  std::vector<jit::DType> dtypes{jit::f16, jit::bf16};
  std::string optimizer = "sgd"; ///< sgd, adam or adamw
  jit::Backend backend = jit::Backend::automatic;
  jit::DeferUpdates deferUpdates = jit::DeferUpdates::automatic;
  int64_t steps = 30;
  int64_t warmup = 5;
  int64_t batchSize = -1; ///< -1: the workload's (smaller on the CPU)
  int64_t width = -1;     ///< mlp9 width; -1: 8192 (1024 on the CPU)
  bool peer = true;
  bool peerCompile = false;
  bool firstStepOnly = false;
  bool freshProcess = true;
  std::string peerScript = AMPJIT_PEER_SCRIPT;
};

const char* kUsage = R"(usage: ampjit-bench [options]
  --model M[,M...]    classifier (default), mlp9, resnet50, resnet18, or all
  --levels L[,L...]   AMP levels among O0,O1,O2,O3,auto (default O0,O1,O2)
  --dtypes D[,D...]   low-precision types for O1-O3: f16,bf16 (default both)
  --optimizer O       sgd (default: plain SGD, as the peers), adam or adamw (lr 1e-3, AdamW's
                      weight decay 1e-2; the peers run torch.optim's fused Adam/AdamW)
  --backend B         cpu, cuda or automatic (default)
  --defer-updates M   automatic (default: on CUDA for updates of >= 16M parameters), on or off:
                      run each step's optimizer update at the start of the next (TraceOptions)
  --steps N           timed steps after warm-up (default 30)
  --warmup N          untimed steps after the first (default 5)
  --batch-size N      override the workload's batch size
  --width N           mlp9's layer width (default 8192; 1024 on the CPU)
  --no-peer           do not run the PyTorch peers
  --no-fresh-process  do not time the first step again in a fresh process with a cold kernel cache
  --peer-compile      also time torch.compile for O1-O3 (slow: it compiles every configuration)
  --peer-script PATH  the peer script (default: the repository's bench/peers/torch_peers.py);
                      torch_graph_peer.py beside it is the bf16 whole-step CUDA-graph peer
)";

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');)
    if (!item.empty())
      items.push_back(item);
  return items;
}

[[noreturn]] void usageError(const std::string& message) {
  std::cerr << "ampjit-bench: " << message << "\n" << kUsage;
  std::exit(2);
}

jit::amp::Level parseLevel(const std::string& text) {
  if (std::optional<jit::amp::Level> level = jit::amp::level_from_name(text))
    return *level;
  usageError("unknown AMP level '" + text + "' (O0, O1, O2, O3 or auto)");
}

Options parseOptions(int argc, char** argv) {
  Options options;
  auto value = [&](int& i) -> std::string {
    if (i + 1 >= argc)
      usageError(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto number = [&](int& i) -> int64_t {
    std::string text = value(i);
    try {
      size_t used = 0;
      int64_t parsed = std::stoll(text, &used);
      if (used == text.size() && parsed > 0)
        return parsed;
    } catch (const std::exception&) {
    }
    usageError(std::string(argv[i - 1]) + " needs a positive integer, got '" + text + "'");
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (arg == "--model") {
      options.models = splitList(value(i));
      if (options.models == std::vector<std::string>{"all"})
        options.models = {"classifier", "mlp9", "resnet50"};
      for (const std::string& model : options.models)
        if (model != "classifier" && model != "mlp9" && model != "resnet50" && model != "resnet18")
          usageError("unknown model '" + model + "'");
    } else if (arg == "--levels") {
      options.levels.clear();
      for (const std::string& level : splitList(value(i)))
        options.levels.push_back(parseLevel(level));
    } else if (arg == "--dtypes") {
      options.dtypes.clear();
      for (const std::string& dtype : splitList(value(i))) {
        if (dtype != "f16" && dtype != "bf16")
          usageError("unknown dtype '" + dtype + "' (f16 or bf16)");
        options.dtypes.push_back(dtype == "f16" ? jit::f16 : jit::bf16);
      }
    } else if (arg == "--optimizer") {
      options.optimizer = value(i);
      if (options.optimizer != "sgd" && options.optimizer != "adam" && options.optimizer != "adamw")
        usageError("unknown optimizer '" + options.optimizer + "' (sgd, adam or adamw)");
    } else if (arg == "--backend") {
      std::string backend = value(i);
      if (backend == "cpu")
        options.backend = jit::Backend::cpu;
      else if (backend == "cuda")
        options.backend = jit::Backend::cuda;
      else if (backend == "automatic")
        options.backend = jit::Backend::automatic;
      else
        usageError("unknown backend '" + backend + "'");
    } else if (arg == "--defer-updates") {
      std::string mode = value(i);
      if (mode == "automatic")
        options.deferUpdates = jit::DeferUpdates::automatic;
      else if (mode == "on")
        options.deferUpdates = jit::DeferUpdates::on;
      else if (mode == "off")
        options.deferUpdates = jit::DeferUpdates::off;
      else
        usageError("unknown --defer-updates mode '" + mode + "' (automatic, on or off)");
    } else if (arg == "--steps") {
      options.steps = number(i);
    } else if (arg == "--warmup") {
      options.warmup = number(i);
    } else if (arg == "--batch-size") {
      options.batchSize = number(i);
    } else if (arg == "--width") {
      options.width = number(i);
    } else if (arg == "--no-peer") {
      options.peer = false;
    } else if (arg == "--no-fresh-process") {
      options.freshProcess = false;
    } else if (arg == "--peer-compile") {
      options.peerCompile = true;
    } else if (arg == "--peer-script") {
      options.peerScript = value(i);
    } else if (arg == "--first-step-only") {
      options.firstStepOnly = true;
    } else {
      usageError("unknown option '" + arg + "'");
    }
  }
  return options;
}

/// Whether steps will run on the CPU backend (automatic picks CUDA when a device is present).
bool runsOnCpu(const Options& options) { return jit::resolve_backend(options.backend) == jit::Backend::cpu; }

//===----------------------------------------------------------------------===//
// Workloads
//===----------------------------------------------------------------------===//

/// One model with its optimizer, scaler and a fixed batch on the backend.
struct Workload {
  std::string name;
  std::string peerWork; ///< the peer script's name for it
  std::shared_ptr<jit::nn::Module> model;
  std::unique_ptr<jit::optim::Optimizer> optimizer;
  std::unique_ptr<jit::amp::GradScaler> scaler;
  Tensor x, y;
  bool mse = false;
  nlohmann::json shape;

  Tensor step(const Tensor& input, const Tensor& target) {
    optimizer->zero_grad();
    Tensor output = (*model)(input);
    Tensor loss = mse ? jit::mse_loss(output, target) : jit::cross_entropy(output, target);
    scaler->scale(loss).backward();
    scaler->step(*optimizer);
    scaler->update();
    return loss;
  }
};

Tensor labels(int64_t batch, int64_t classes, jit::Generator& generator) {
  std::vector<int64_t> values;
  for (int64_t i = 0; i < batch; ++i)
    values.push_back(int64_t(generator.next_uniform() * double(classes)) % classes);
  return jit::tensor(values, {batch});
}

Workload makeWorkload(const std::string& name, const Options& options, const jit::amp::Policy& policy) {
  Workload work;
  work.name = name;
  jit::Generator generator(0);
  bool cpu = runsOnCpu(options);
  // The policy's loss scaling: dynamic for f16, none for bf16 (its range needs
  // none) and O0, as PyTorch's peer enables its scaler for f16 only.
  work.scaler = std::make_unique<jit::amp::GradScaler>(policy);
  double lr = 1e-2;
  if (name == "classifier") {
    int64_t batch = options.batchSize > 0 ? options.batchSize : 64;
    auto model = std::make_shared<jit::nn::Sequential>(
        jit::nn::Flatten(), jit::nn::Linear(784, 512, true, {.generator = &generator}), jit::nn::ReLU(),
        jit::nn::Linear(512, 512, true, {.generator = &generator}), jit::nn::ReLU(),
        jit::nn::Linear(512, 10, true, {.generator = &generator}));
    work.model = model;
    work.peerWork = "mnist";
    work.x = jit::randn({batch, 1, 28, 28}, jit::f32, &generator);
    work.y = labels(batch, 10, generator);
    work.shape = {{"batch", batch}};
  } else if (name == "mlp9") {
    int64_t width = options.width > 0 ? options.width : cpu ? 1024 : 8192;
    int64_t batch = options.batchSize > 0 ? options.batchSize : cpu ? 256 : 2048;
    auto model = std::make_shared<jit::nn::Sequential>();
    for (int i = 0; i < 9; ++i)
      model->push_back(jit::nn::Linear(width, width, true, {.generator = &generator}));
    work.model = model;
    work.peerWork = width == 8192 && batch == 2048 ? "mlp9" : "";
    work.mse = true;
    lr = 1e-4;
    work.x = jit::rand({batch, width}, jit::f32, &generator);
    work.y = jit::rand({batch, width}, jit::f32, &generator);
    work.shape = {{"batch", batch}, {"width", width}};
  } else {
    int64_t batch = options.batchSize > 0 ? options.batchSize : cpu ? 16 : 128;
    jit::nn::ResNetOptions resnet{.num_classes = 10, .init = {.generator = &generator}};
    work.model = name == "resnet50" ? jit::nn::resnet50(resnet) : jit::nn::resnet18(resnet);
    work.peerWork = name == "resnet50" && batch == 128 ? "resnet50_cifar" : "";
    work.x = jit::randn({batch, 3, 32, 32}, jit::f32, &generator);
    work.y = labels(batch, 10, generator);
    work.shape = {{"batch", batch}, {"image", "3x32x32"}, {"classes", 10}};
  }
  if (options.batchSize > 0 || (cpu && name != "classifier"))
    work.peerWork.clear(); // the peer's shapes are fixed
  if (!cpu) {
    // The batch lives on the GPU, as in the peer scripts: a step then copies
    // nothing from host memory.
    work.x = jit::cuda::to_device(work.x);
    work.y = jit::cuda::to_device(work.y);
  }
  // Adam's lr is PyTorch's default for every workload; the peer script's is the same.
  if (options.optimizer == "adam")
    work.optimizer = std::make_unique<jit::optim::Adam>(work.model->parameters(), jit::optim::AdamOptions{.lr = 1e-3});
  else if (options.optimizer == "adamw")
    work.optimizer =
        std::make_unique<jit::optim::AdamW>(work.model->parameters(), jit::optim::AdamWOptions{.lr = 1e-3});
  else
    work.optimizer = std::make_unique<jit::optim::SGD>(work.model->parameters(), jit::optim::SGDOptions{.lr = lr});
  return work;
}

jit::TraceOptions traceOptions(const Options& options, jit::amp::Level level, jit::DType dtype) {
  jit::TraceOptions trace;
  trace.amp = jit::amp::Policy{.level = level,
                               .dtype = level == jit::amp::O0 ? std::optional<jit::DType>()
                                                              : std::optional<jit::DType>(dtype)};
  trace.backend = options.backend;
  trace.defer_updates = options.deferUpdates;
  trace.name = "bench_step";
  trace.log_retraces = false;
  return trace;
}

double peakResidentMegabytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0; // kilobytes on Linux
}

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// Every AMPJIT_* variable set in this process, by name (docs/environment.md):
/// an A/B run's lines say which switches they ran under.
nlohmann::json ampjitEnvironment() {
  nlohmann::json variables = nlohmann::json::object();
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    std::size_t equals = text.find('=');
    if (text.starts_with("AMPJIT_") && equals != std::string_view::npos)
      variables[std::string(text.substr(0, equals))] = std::string(text.substr(equals + 1));
  }
  return variables;
}

/// Trace, compile and run the first step; then warm up and time. With a
/// deferred update (TraceOptions::defer_updates) each timed step runs the
/// previous step's update, so the median covers one update per step; the
/// first step's own update runs in the second.
nlohmann::json measure(const std::string& model, jit::amp::Level level, jit::DType dtype, const Options& options,
                       bool firstStepOnly) {
  bool lowPrecision = level != jit::amp::O0;
  jit::TraceOptions trace = traceOptions(options, level, dtype);
  Workload work = makeWorkload(model, options, trace.amp);
  auto step = jit::trace([&](const Tensor& x, const Tensor& y) { return work.step(x, y); }, trace);
  Clock::time_point start = Clock::now();
  double loss = step(work.x, work.y).item();
  double firstStep = secondsSince(start);
  nlohmann::json result{{"model", model},
                        {"level", jit::amp::level_name(level)},
                        {"dtype", lowPrecision ? jit::dtype_name(dtype) : "f32"},
                        {"optimizer", options.optimizer},
                        {"shape", work.shape},
                        {"environment", ampjitEnvironment()}};
  if (firstStepOnly) {
    result["time_to_first_step_s"] = firstStep;
    // The cold cache's share of that first step: what timing GEMMs cost.
    result["device_gemm_tuning_ms"] = step.stats().device_gemm_tuning_ms;
    result["device_gemm_tuning_candidates_screened"] = step.stats().device_gemm_tuning_candidates_screened;
    return result;
  }
  std::vector<double> times, hostTimes;
  if (runsOnCpu(options)) {
    for (int64_t i = 0; i < options.warmup; ++i)
      step(work.x, work.y).item();
    // A CPU step has finished when it returns; reading the loss keeps the
    // measurement honest should that change.
    for (int64_t i = 0; i < options.steps; ++i) {
      Clock::time_point begin = Clock::now();
      loss = step(work.x, work.y).item();
      times.push_back(secondsSince(begin) * 1e3);
    }
    hostTimes = times;
  } else {
    // A CUDA step returns once enqueued: time the GPU with events between
    // steps, and read the loss only at the end so nothing waits in between.
    // The host's time per call says whether the GPU or the host sets the
    // pace: a step whose enqueueing takes as long as its GPU work would
    // leave the GPU idle between steps, and the events would time the host.
    Tensor last;
    for (int64_t i = 0; i < options.warmup; ++i)
      last = step(work.x, work.y);
    std::vector<jit::cuda::Event> events{jit::cuda::Event::record()};
    for (int64_t i = 0; i < options.steps; ++i) {
      Clock::time_point begin = Clock::now();
      last = step(work.x, work.y);
      hostTimes.push_back(secondsSince(begin) * 1e3);
      events.push_back(jit::cuda::Event::record());
    }
    for (int64_t i = 0; i < options.steps; ++i)
      times.push_back(events[size_t(i)].elapsed_ms(events[size_t(i) + 1]));
    loss = last.item();
    result["peak_device_mb"] = double(jit::cuda::max_memory_allocated()) / (1024.0 * 1024.0);
  }
  std::sort(hostTimes.begin(), hostTimes.end());
  result["host_ms_per_call_median"] = hostTimes[hostTimes.size() / 2];
  // In step order, so a spread can be told apart: one that follows the
  // step's parity (a speculating CUDA backend alternates two captured
  // graphs), a trend (clocks falling as the card heats), or a few odd steps.
  nlohmann::json timesInOrder = nlohmann::json::array();
  for (double ms : times)
    timesInOrder.push_back(std::round(ms * 1e3) / 1e3);
  std::sort(times.begin(), times.end());
  result.update({{"backend", runsOnCpu(options) ? "cpu" : "cuda"},
                 {"steps", options.steps},
                 {"ms_per_step_median", times[times.size() / 2]},
                 {"ms_per_step_min", times.front()},
                 {"ms_per_step_max", times.back()},
                 {"ms_per_step", timesInOrder},
                 {"time_to_first_step_in_process_s", firstStep},
                 {"peak_host_rss_mb", peakResidentMegabytes()},
                 {"final_loss", loss},
                 {"skipped_steps", work.scaler->skipped_steps()},
                 {"traces", step.stats().traces},
                 {"deferred_update", step.plan_text().find("deferred steps") != std::string::npos},
                 {"early_update_completions", step.stats().early_update_completions},
                 {"device_launches_per_step", step.stats().device_launches_per_step},
                 {"device_side_steps_per_step", step.stats().device_side_steps_per_step},
                 {"device_gemms_beside_update_per_step", step.stats().device_gemms_beside_update_per_step},
                 {"device_speculative_updates_per_step", step.stats().device_speculative_updates_per_step},
                 {"device_speculation_declined", step.stats().device_speculation_declined},
                 {"device_updates_folded_into_gemms", step.stats().device_updates_folded_into_gemms},
                 {"device_gemm_fold_declined", step.stats().device_gemm_fold_declined},
                 {"device_gemms_tuned", step.stats().device_gemms_tuned},
                 {"device_gemms_off_heuristic", step.stats().device_gemms_off_heuristic},
                 {"device_gemm_tuning_ms", step.stats().device_gemm_tuning_ms},
                 {"device_gemm_tuning_candidates_screened", step.stats().device_gemm_tuning_candidates_screened},
                 {"device_gemm_tuning_declined", step.stats().device_gemm_tuning_declined},
                 {"device_graph_replays", step.stats().device_graph_replays},
                 {"device_graph_captures", step.stats().device_graph_captures},
                 {"device_graph_disabled_reason", step.stats().device_graph_disabled_reason}});
  if (runsOnCpu(options)) {
    result["cpu_conversions"] = ampjit::runtime::bulkConversionPath();
    result["cpu_gemm_kernels"] = ampjit::runtime::blasKernelName();
  }
  if (!work.peerWork.empty())
    result["peer_work"] = work.peerWork;
  return result;
}

/// Runs a command and returns its standard output (empty on failure).
std::string capture(const std::string& command, int& status) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    status = -1;
    return output;
  }
  std::array<char, 4096> buffer{};
  while (size_t read = fread(buffer.data(), 1, buffer.size(), pipe))
    output.append(buffer.data(), read);
  status = pclose(pipe);
  return output;
}

std::string shellQuote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text)
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

/// The first JSON object line of `output` that has `key`.
nlohmann::json lineWith(const std::string& output, const std::string& key) {
  std::stringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object() && parsed.contains(key))
      return parsed;
  }
  return nullptr;
}

/// Time to first step in a fresh process: this binary, same configuration,
/// with an empty kernel cache (every generated CUDA kernel compiles again).
nlohmann::json freshProcessFirstStep(const std::string& self, const std::string& model, jit::amp::Level level,
                                     jit::DType dtype, const Options& options) {
  std::error_code error;
  std::filesystem::path coldCache = std::filesystem::temp_directory_path(error) /
                                    ("ampjit-bench-cold-cache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(coldCache, error);
  std::string command = "AMPJIT_KERNEL_CACHE=" + shellQuote(coldCache.string()) + " " + shellQuote(self) +
                        " --first-step-only --no-peer --model " + model + " --levels " +
                        std::string(jit::amp::level_name(level)) + " --dtypes " +
                        std::string(jit::dtype_name(dtype)) + " --optimizer " + options.optimizer + " --backend " +
                        (options.backend == jit::Backend::cuda ? "cuda" : runsOnCpu(options) ? "cpu" : "automatic");
  if (options.batchSize > 0)
    command += " --batch-size " + std::to_string(options.batchSize);
  if (options.width > 0)
    command += " --width " + std::to_string(options.width);
  command += std::string(" --defer-updates ") +
             (options.deferUpdates == jit::DeferUpdates::on    ? "on"
              : options.deferUpdates == jit::DeferUpdates::off ? "off"
                                                               : "automatic");
  int status = 0;
  Clock::time_point start = Clock::now();
  nlohmann::json line = lineWith(capture(command + " 2>/dev/null", status), "time_to_first_step_s");
  double processSeconds = secondsSince(start);
  std::filesystem::remove_all(coldCache, error);
  if (status != 0 || line.is_null())
    return {{"error", "the fresh process failed (exit status " + std::to_string(status) + ")"}};
  nlohmann::json fresh{{"time_to_first_step_s", line["time_to_first_step_s"]},
                       {"fresh_process_wall_s", processSeconds},
                       {"kernel_cache", "cold"}};
  for (const char* field : {"device_gemm_tuning_ms", "device_gemm_tuning_candidates_screened"})
    if (line.contains(field))
      fresh[field] = line[field];
  return fresh;
}

/// The peer configuration matching a level and dtype ("amp_fp16", ...).
std::string peerMode(jit::amp::Level level, jit::DType dtype) {
  if (level == jit::amp::O0)
    return "fp32";
  return dtype == jit::f16 ? "amp_fp16" : "amp_bf16";
}

/// Why the peer cannot run here, or empty when it can.
std::string peerUnavailableReason(const Options& options) {
  if (!options.peer)
    return "disabled (--no-peer)";
  if (runsOnCpu(options))
    return "the peer scripts time PyTorch on CUDA; this run uses the CPU backend";
  int status = 0;
  capture("python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1", status);
  if (status != 0)
    return "PyTorch with CUDA is not importable (python3 -c 'import torch')";
  return "";
}

/// The peers run for a configuration, each measured once per run (the graph
/// peer serves both dtypes of a workload, torch.compile both levels of a mode).
class PeerRuns {
public:
  explicit PeerRuns(const Options& options) : options_(options) {}

  /// {"eager": {...}, "torch_compile": {...}, "bf16_graph": {...}}: each peer's
  /// JSON line with our speedup over it, or its error.
  nlohmann::json compare(const std::string& work, jit::amp::Level level, jit::DType dtype, double oursMs) {
    std::string mode = peerMode(level, dtype);
    std::string script = shellQuote(options_.peerScript);
    // The anchors' scripts take no optimizer argument: SGD's calls stay theirs.
    std::string optimizer = options_.optimizer == "sgd" ? "" : " " + options_.optimizer;
    nlohmann::json peers = nlohmann::json::object();
    peers["eager"] = measured(script + " --only " + work + " " + mode + " eager" + optimizer, oursMs);
    if (level == jit::amp::O0)
      return peers;
    if (options_.peerCompile)
      peers["torch_compile"] = measured(script + " --only " + work + " " + mode + " default" + optimizer, oursMs);
    std::filesystem::path graphScript =
        std::filesystem::path(options_.peerScript).parent_path() / "torch_graph_peer.py";
    peers["bf16_graph"] = measured(shellQuote(graphScript.string()) + " --only " + work + optimizer, oursMs);
    return peers;
  }

private:
  nlohmann::json measured(const std::string& arguments, double oursMs) {
    auto cached = runs_.find(arguments);
    if (cached == runs_.end()) {
      int status = 0;
      std::string output = capture("python3 " + arguments + " 2>&1", status);
      nlohmann::json peer = lineWith(output, "ms_per_step");
      if (peer.is_null())
        peer = {{"error", "python3 " + arguments + ": " + output.substr(output.size() > 300 ? output.size() - 300 : 0)}};
      cached = runs_.emplace(arguments, peer).first;
    }
    nlohmann::json peer = cached->second;
    if (peer.contains("ms_per_step"))
      peer["speedup"] = peer["ms_per_step"].get<double>() / oursMs;
    return peer;
  }

  const Options& options_;
  std::map<std::string, nlohmann::json> runs_;
};

} // namespace

/// On a crash, the stack as return addresses (module+offset), for addr2line
/// on the unstripped binary: device runs are rare and must say where they died.
void printStackAndDie(int signal) {
  static const char header[] = "ampjit-bench: fatal signal; stack:\n";
  ssize_t ignored = ::write(STDERR_FILENO, header, sizeof header - 1);
  (void)ignored;
  void* frames[64];
  int count = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, count, STDERR_FILENO);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

int main(int argc, char** argv) {
  for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    std::signal(signal, printStackAndDie);
  Options options = parseOptions(argc, argv);
  try {
    if (options.firstStepOnly) {
      std::cout << measure(options.models.at(0), options.levels.at(0), options.dtypes.at(0), options, true).dump()
                << std::endl;
      return 0;
    }
    std::string peerReason = peerUnavailableReason(options);
    PeerRuns peers(options);
    nlohmann::json summary = nlohmann::json::array();
    for (const std::string& model : options.models)
      for (jit::amp::Level level : options.levels)
        for (jit::DType dtype : options.dtypes) {
          if (level == jit::amp::O0 && dtype != options.dtypes.front())
            continue; // O0 is f32 whatever the dtype list says
          nlohmann::json result = measure(model, level, dtype, options, false);
          if (options.freshProcess)
            result["fresh_process"] = freshProcessFirstStep(argv[0], model, level, dtype, options);
          if (peerReason.empty() && result.contains("peer_work"))
            result["peers"] = peers.compare(result["peer_work"].get<std::string>(), level, dtype,
                                            result["ms_per_step_median"].get<double>());
          std::cout << result.dump() << std::endl;
          nlohmann::json entry{{"model", model},
                               {"level", result["level"]},
                               {"dtype", result["dtype"]},
                               {"optimizer", options.optimizer},
                               {"ms_per_step_median", result["ms_per_step_median"]}};
          // Named, not iterated as a temporary: items() refers into it, and a
          // range-for keeps only its outermost temporary alive (the run on the
          // GPU crashed here in std::_Rb_tree_increment).
          const nlohmann::json measuredPeers = result.value("peers", nlohmann::json::object());
          for (const auto& [name, peer] : measuredPeers.items())
            if (peer.contains("speedup"))
              entry["speedup_vs"][name] = peer["speedup"];
          summary.push_back(entry);
        }
    nlohmann::json tail{{"summary", summary}};
    if (!peerReason.empty())
      tail["peer"] = {{"ran", false}, {"reason", peerReason}};
    std::cout << tail.dump() << std::endl;
    return 0;
  } catch (const jit::Error& error) {
    std::cerr << "ampjit-bench: " << error.what() << "\n";
    return 1;
  }
}
