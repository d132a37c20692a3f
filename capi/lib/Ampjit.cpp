//===- Ampjit.cpp - ampjit's C API over compileModule and the runtime -----===//
//
// Each entry point checks its handles and sizes before it touches anything,
// so a failing call changes nothing, and turns every error (a Status, or an
// exception such as bad_alloc thrown below it) into the thread's last error:
// nothing may unwind into a C caller.
//
//===----------------------------------------------------------------------===//

#include "ampjit-c/Ampjit.h"

#include "ampjit/Codegen/CompileModule.h"
#include "ampjit/runtime/Backend.h"
#include "ampjit/runtime/CpuBackend.h"
#include "ampjit/runtime/CudaBackend.h"
#include "ampjit/runtime/PlanFile.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>

namespace rt = ampjit::runtime;

struct ampjit_plan {
  rt::Plan plan;
};

struct ampjit_session {
  ampjit_plan plan;
  std::unique_ptr<rt::Backend> backend;
  rt::CudaBackend* cuda = nullptr; // backend, when it is the CUDA one
  std::unique_ptr<rt::Executable> executable;
  std::vector<rt::Tensor> arguments;
  std::vector<rt::Tensor> results;
  /// The arguments that derived state is rounded from, and the arguments a
  /// pending deferred update reads or writes.
  std::set<size_t> derivationSources, deferredArguments;
  /// A source was written since the derived state was last re-derived.
  bool derivedStale = false;
  uint64_t steps = 0;
};

static_assert(AMPJIT_DTYPE_F32 == int(rt::DType::F32) && AMPJIT_DTYPE_F64 == int(rt::DType::F64) &&
              AMPJIT_DTYPE_F16 == int(rt::DType::F16) && AMPJIT_DTYPE_BF16 == int(rt::DType::BF16) &&
              AMPJIT_DTYPE_I64 == int(rt::DType::I64) && AMPJIT_DTYPE_I1 == int(rt::DType::I1) &&
              rt::allDTypes.size() == 6, "ampjit_dtype numbers the runtime's DType");
static_assert(AMPJIT_ROLE_INPUT == int(rt::BufferRole::Input) && AMPJIT_ROLE_PARAM == int(rt::BufferRole::Param) &&
              AMPJIT_ROLE_GRAD == int(rt::BufferRole::Grad) && AMPJIT_ROLE_OPT_STATE == int(rt::BufferRole::OptState) &&
              AMPJIT_ROLE_SCALER_STATE == int(rt::BufferRole::ScalerState) &&
              AMPJIT_ROLE_HYPER == int(rt::BufferRole::Hyper) && AMPJIT_ROLE_OUTPUT == int(rt::BufferRole::Output),
              "ampjit_role numbers the runtime's BufferRole");

namespace {

thread_local std::string lastError;

/// Runs `body`, which returns a Status, as the entry point `function`.
ampjit_status guarded(const char* function, const auto& body) {
  try {
    rt::Status status = body();
    if (status.ok())
      return AMPJIT_OK;
    lastError = std::string(function) + ": " + status.message();
  } catch (const std::exception& error) {
    lastError = std::string(function) + ": " + error.what();
  }
  return AMPJIT_ERROR;
}

/// Runs `body`, which returns an Expected<T*>, as the entry point `function`:
/// the handle, or null with guarded()'s error.
template <typename T, typename Body> T* guardedHandle(const char* function, const Body& body) {
  T* handle = nullptr;
  guarded(function, [&]() -> rt::Status {
    rt::Expected<T*> made = body();
    if (!made)
      return made.status();
    handle = *made;
    return rt::Status::success();
  });
  return handle;
}

std::string formatValue(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

rt::Status missing(const char* what) { return rt::Status::error(std::string(what) + " is NULL"); }

/// The plan rewrites named in `words` (ampjit_compile_module's plan_options).
rt::Expected<ampjit::codegen::ModuleCompileOptions> parsePlanOptions(std::string_view words) {
  ampjit::codegen::ModuleCompileOptions options;
  ampjit::codegen::PlanOptions& plan = options.plan;
  const std::pair<std::string_view, bool*> switches[] = {
      {"fuse-elementwise", &plan.fuseElementwise},
      {"fuse-gemm-epilogues", &plan.fuseGemmEpilogues},
      {"fuse-batch-norm-epilogues", &plan.fuseBatchNormEpilogues},
      {"fuse-gradient-accumulation", &plan.fuseGradientAccumulation},
      {"overlap-weight-gradients", &plan.overlapWeightGradients},
      {"defer-optimizer-updates", &plan.deferOptimizerUpdates},
  };
  std::istringstream stream{std::string(words)};
  std::string word;
  while (stream >> word) {
    bool known = false;
    for (const auto& [name, flag] : switches) {
      if (word == name) {
        *flag = known = true;
        break;
      }
    }
    if (known)
      continue;
    if (word.starts_with("function=") && word.size() > 9) {
      options.function = word.substr(9);
      continue;
    }
    if (word.starts_with("defer-minimum-elements=")) {
      std::string_view number = std::string_view(word).substr(23);
      auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), plan.deferMinimumElements);
      if (error == std::errc() && end == number.data() + number.size() && !number.empty() &&
          plan.deferMinimumElements >= 0)
        continue;
      return rt::Status::error("plan option '" + word + "' needs a count of elements (0 or more)");
    }
    std::string knownWords;
    for (const auto& entry : switches)
      knownWords += std::string(entry.first) + ", ";
    return rt::Status::error("unknown plan option '" + word + "' (known: " + knownWords +
                             "defer-minimum-elements=N, function=NAME)");
  }
  return options;
}

void describe(const rt::Plan& plan, rt::BufferId id, ampjit_value_info* info) {
  const rt::BufferDesc& buffer = plan.buffers[id];
  info->dtype = ampjit_dtype(int(buffer.type.dtype));
  info->role = rt::isArgumentRole(buffer.role) ? ampjit_role(int(buffer.role)) : AMPJIT_ROLE_OUTPUT;
  info->rank = buffer.type.shape.size();
  info->shape = buffer.type.shape.data();
  info->byte_size = size_t(buffer.type.byteSize());
  info->name = buffer.name.c_str();
  info->tied_argument = -1;
  info->derived_from = buffer.derivedFrom;
}

rt::Status checkArgumentIndex(const rt::Plan& plan, size_t index) {
  if (index < plan.argumentCount())
    return rt::Status::success();
  return rt::Status::error("argument " + std::to_string(index) + " does not exist: plan @" + plan.name + " has " +
                           std::to_string(plan.argumentCount()) + " arguments");
}

rt::Status checkByteCount(const rt::Plan& plan, size_t index, size_t bytes, const void* data) {
  if (data == nullptr)
    return missing("data");
  size_t expected = size_t(plan.buffers[plan.argumentBuffer(index)].type.byteSize());
  if (bytes == expected)
    return rt::Status::success();
  return rt::Status::error(rt::describeArgument(plan, index) + " is " + std::to_string(expected) + " bytes, not " +
                           std::to_string(bytes));
}

rt::Status checkResultIndex(const rt::Plan& plan, size_t index) {
  if (index < plan.results.size())
    return rt::Status::success();
  return rt::Status::error("result " + std::to_string(index) + " does not exist: plan @" + plan.name + " has " +
                           std::to_string(plan.results.size()) + " results");
}

/// checkByteCount for ampjit_session_{write,read}_values: one double per element.
rt::Status checkElementCount(const rt::Plan& plan, size_t index, size_t count, const double* values) {
  if (rt::Status exists = checkArgumentIndex(plan, index); !exists.ok())
    return exists;
  if (values == nullptr)
    return missing("values");
  int64_t elements = plan.buffers[plan.argumentBuffer(index)].type.elementCount();
  if (count == size_t(elements))
    return rt::Status::success();
  return rt::Status::error(rt::describeArgument(plan, index) + " has " + std::to_string(elements) +
                           " elements, not " + std::to_string(count));
}

/// Does a pending deferred update first when it touches argument `index`,
/// so that the host sees (or overwrites) the state after it.
rt::Status completeDeferredFor(ampjit_session& session, size_t index) {
  if (!session.executable->deferredPending() || !session.deferredArguments.contains(index))
    return rt::Status::success();
  return session.executable->completeDeferred(session.arguments);
}

rt::Status rederiveIfStale(ampjit_session& session) {
  if (!session.derivedStale)
    return rt::Status::success();
  if (rt::Status rederived = session.executable->rederive(session.arguments); !rederived.ok())
    return rederived;
  session.derivedStale = false;
  return rt::Status::success();
}

/// Where a caller's bytes are: host memory, or device memory of a "cuda"
/// session's device ordered by the caller's stream (the _device calls).
struct CallerMemory {
  bool onDevice = false;
  void* stream = nullptr; ///< a cudaStream_t; nullptr: the legacy default stream
};

/// A "cuda" session, for the _device calls: the others have no device memory.
rt::Status checkDeviceSession(const ampjit_session& session) {
  if (session.cuda != nullptr)
    return rt::Status::success();
  return rt::Status::error("device memory needs a session on \"cuda\"; this one runs on \"" +
                           std::string(session.backend->name()) + "\" (use the calls without _device)");
}

/// Puts `data` (argument `index`'s bytes, in the caller's `memory`) into the
/// session's memory for that argument: copied once, straight from the
/// caller's bytes, into the argument's own memory (on a device, graphs
/// captured on its address stay valid).
rt::Status store(ampjit_session& session, size_t index, const std::byte* data, CallerMemory memory = {}) {
  const rt::Plan& plan = session.plan.plan;
  const rt::BufferDesc& buffer = plan.buffers[plan.argumentBuffer(index)];
  if (buffer.derivedFrom >= 0)
    return rt::Status::error(rt::describeArgument(plan, index) + " is derived from " +
                             rt::describeArgument(plan, size_t(buffer.derivedFrom)) +
                             ", and follows it: write that one");
  size_t bytes = size_t(buffer.type.byteSize());
  if (buffer.type.dtype == rt::DType::I1) {
    // Each byte is checked on the host; device bytes would need a device
    // check and a wait for it.
    if (memory.onDevice)
      return rt::Status::error(rt::describeArgument(plan, index) +
                               " is i1, whose bytes are checked to be 0 or 1 on the host: write it with "
                               "ampjit_session_write");
    for (size_t i = 0; i < bytes; ++i) {
      if (std::to_integer<int>(data[i]) > 1)
        return rt::Status::error(rt::describeArgument(plan, index) + " is i1, but byte " + std::to_string(i) +
                                 " is " + std::to_string(std::to_integer<int>(data[i])) + ", not 0 or 1");
    }
  }
  if (rt::Status completed = completeDeferredFor(session, index); !completed.ok())
    return completed;
  rt::Tensor& argument = session.arguments[index];
  if (argument.device() == rt::Device::Host) {
    std::memcpy(argument.bytes(), data, bytes);
  } else if (rt::Status copied = session.cuda->copyIntoTensor(argument, data, memory.onDevice, memory.stream);
             !copied.ok()) {
    return rt::Status::error(rt::describeArgument(plan, index) + ": " + copied.message());
  }
  if (session.derivationSources.contains(index))
    session.derivedStale = true;
  return rt::Status::success();
}

/// Sets argument `index` to `valueAt(i)` for each element i, rounded to its
/// dtype as the runtime rounds (storeElementFromDouble). An integer argument
/// takes only integers it can hold: the runtime's own rule would truncate 2.5
/// to 2, saturate 2^63 and store NaN as 0 (truncateToInt64), silently turning
/// a caller's mistake (a fractional label) into another value.
/// `nameElement`: a refusal names the element (values written one by one).
rt::Status storeValues(ampjit_session& session, size_t index, const std::function<double(int64_t)>& valueAt,
                       bool nameElement) {
  const rt::Plan& plan = session.plan.plan;
  if (rt::Status exists = checkArgumentIndex(plan, index); !exists.ok())
    return exists;
  rt::Expected<rt::Tensor> host = rt::Tensor::allocate(plan.buffers[plan.argumentBuffer(index)].type);
  if (!host)
    return host.status();
  for (int64_t i = 0; i < host->elementCount(); ++i) {
    double value = valueAt(i);
    bool integral = std::isfinite(value) && value == std::trunc(value);
    if ((host->dtype() == rt::DType::I64 && !(integral && value >= -0x1p63 && value < 0x1p63)) ||
        (host->dtype() == rt::DType::I1 && value != 0.0 && value != 1.0))
      return rt::Status::error(rt::describeArgument(plan, index) + " cannot hold " + formatValue(value) +
                               (nameElement ? " (element " + std::to_string(i) + ")" : ""));
    host->set(i, value);
  }
  return store(session, index, host->bytes());
}

/// Copies `tensor` (in the session's memory) into the caller's `data`.
rt::Status load(ampjit_session& session, const rt::Tensor& tensor, void* data, CallerMemory memory = {}) {
  if (memory.onDevice)
    return session.cuda->copyTensorToDeviceMemory(tensor, data, memory.stream);
  if (tensor.device() == rt::Device::Host) {
    std::memcpy(data, tensor.bytes(), tensor.byteSize());
    return rt::Status::success();
  }
  rt::Expected<rt::Tensor> host = session.backend->toHost(tensor);
  if (!host)
    return host.status();
  std::memcpy(data, host->bytes(), host->byteSize());
  return rt::Status::success();
}

/// The tensor that reads of argument `index` copy: its pending deferred
/// update done, and, if it is derived state, re-derived when stale.
rt::Expected<const rt::Tensor*> argumentToRead(ampjit_session& session, size_t index) {
  const rt::Plan& plan = session.plan.plan;
  AMPJIT_RETURN_IF_ERROR(checkArgumentIndex(plan, index));
  AMPJIT_RETURN_IF_ERROR(completeDeferredFor(session, index));
  if (plan.buffers[plan.argumentBuffer(index)].derivedFrom >= 0)
    AMPJIT_RETURN_IF_ERROR(rederiveIfStale(session));
  return &session.arguments[index];
}

/// The tensor that reads of result `index` of the last step copy (a tied
/// result is its argument), and how messages name it.
rt::Expected<std::pair<const rt::Tensor*, std::string>> resultToRead(ampjit_session& session, size_t index) {
  const rt::Plan& plan = session.plan.plan;
  AMPJIT_RETURN_IF_ERROR(checkResultIndex(plan, index));
  if (session.results.empty())
    return rt::Status::error("result " + std::to_string(index) + ": no step has run yet");
  if (int32_t tied = plan.results[index].tiedArgument; tied >= 0) {
    rt::Expected<const rt::Tensor*> argument = argumentToRead(session, size_t(tied));
    if (!argument)
      return argument.status();
    return std::pair{*argument, rt::describeArgument(plan, size_t(tied))};
  }
  const rt::Tensor& result = session.results[index];
  return std::pair{&result, "result " + std::to_string(index) + " (" + rt::typeToString(result.type()) + ")"};
}

/// ampjit_session_read, for result reads too (a tied result is its argument).
rt::Status readArgument(ampjit_session& session, size_t index, void* data, size_t bytes, CallerMemory memory = {}) {
  const rt::Plan& plan = session.plan.plan;
  AMPJIT_RETURN_IF_ERROR(checkArgumentIndex(plan, index));
  AMPJIT_RETURN_IF_ERROR(checkByteCount(plan, index, bytes, data));
  rt::Expected<const rt::Tensor*> argument = argumentToRead(session, index);
  if (!argument)
    return argument.status();
  if (rt::Status loaded = load(session, **argument, data, memory); !loaded.ok())
    return rt::Status::error(rt::describeArgument(plan, index) + ": " + loaded.message());
  return rt::Status::success();
}

/// ampjit_session_read_result and its _device twin.
rt::Status readResult(ampjit_session& session, size_t index, void* data, size_t bytes, CallerMemory memory) {
  const rt::Plan& plan = session.plan.plan;
  AMPJIT_RETURN_IF_ERROR(checkResultIndex(plan, index));
  if (int32_t tied = plan.results[index].tiedArgument; tied >= 0 && !session.results.empty())
    return readArgument(session, size_t(tied), data, bytes, memory);
  rt::Expected<std::pair<const rt::Tensor*, std::string>> result = resultToRead(session, index);
  if (!result)
    return result.status();
  if (data == nullptr)
    return missing("data");
  const auto& [tensor, what] = *result;
  if (bytes != tensor->byteSize())
    return rt::Status::error(what + " is " + std::to_string(tensor->byteSize()) + " bytes, not " +
                             std::to_string(bytes));
  if (rt::Status loaded = load(session, *tensor, data, memory); !loaded.ok())
    return rt::Status::error(what + ": " + loaded.message());
  return rt::Status::success();
}

} // namespace

/// A read that arrives later (ampjit_session_read_async): on the GPU a copy
/// into pinned memory after the steps enqueued before it; on the host, the
/// value taken at once.
struct ampjit_host_copy {
  std::string what;
  rt::PendingHostRead read;
};

namespace {

rt::Expected<ampjit_host_copy*> startHostCopy(ampjit_session& session, const rt::Tensor& tensor, std::string what) {
  rt::Expected<rt::PendingHostRead> started = rt::PendingHostRead::start(tensor, session.cuda);
  if (!started)
    return rt::Status::error(what + ": " + started.message());
  return new ampjit_host_copy{std::move(what), std::move(*started)};
}

/// Runs `start` and reports its failure like `guarded`: NULL, with
/// ampjit_last_error naming `call`.
ampjit_host_copy* startedOrNull(const char* call, const std::function<rt::Expected<ampjit_host_copy*>()>& start) {
  ampjit_host_copy* copy = nullptr;
  ampjit_status status = guarded(call, [&]() -> rt::Status {
    rt::Expected<ampjit_host_copy*> started = start();
    if (!started)
      return started.status();
    copy = *started;
    return rt::Status::success();
  });
  return status == AMPJIT_OK ? copy : nullptr;
}

} // namespace

extern "C" {

const char* ampjit_version(void) { return AMPJIT_VERSION; }

const char* ampjit_last_error(void) { return lastError.c_str(); }

const char* ampjit_dtype_name(ampjit_dtype dtype) {
  for (rt::DType known : rt::allDTypes)
    if (int(known) == int(dtype))
      return rt::dtypeName(known).data();
  return "<invalid dtype>";
}

int ampjit_cuda_backend_built(void) { return rt::cudaBackendBuilt() ? 1 : 0; }

int ampjit_cuda_device_count(void) { return rt::cudaDeviceCount(); }

const char* ampjit_role_name(ampjit_role role) {
  if (role < AMPJIT_ROLE_INPUT || (role > AMPJIT_ROLE_HYPER && role != AMPJIT_ROLE_OUTPUT))
    return "<invalid role>";
  return rt::bufferRoleName(rt::BufferRole(role)).data();
}

ampjit_plan* ampjit_compile_module(const char* text, size_t length, const char* source_name,
                                   const char* amp_pipeline, const char* plan_options) {
  return guardedHandle<ampjit_plan>("ampjit_compile_module", [&]() -> rt::Expected<ampjit_plan*> {
    if (text == nullptr)
      return missing("text");
    std::string_view name = source_name != nullptr && *source_name != 0 ? source_name : "<module>";
    rt::Expected<ampjit::codegen::ModuleCompileOptions> options =
        parsePlanOptions(plan_options != nullptr ? plan_options : "");
    if (!options)
      return rt::Status::error(std::string(name) + ": " + options.message());
    options->ampPipeline = amp_pipeline != nullptr ? amp_pipeline : "";
    rt::Expected<rt::Plan> plan = ampjit::codegen::compileModule(std::string_view(text, length), name, *options);
    if (!plan)
      return plan.status();
    return new ampjit_plan{std::move(*plan)};
  });
}

ampjit_plan* ampjit_plan_load(const char* path) {
  return guardedHandle<ampjit_plan>("ampjit_plan_load", [&]() -> rt::Expected<ampjit_plan*> {
    if (path == nullptr)
      return missing("path");
    rt::Expected<rt::Plan> plan = rt::loadPlan(path);
    if (!plan)
      return plan.status();
    return new ampjit_plan{std::move(*plan)};
  });
}

ampjit_status ampjit_plan_save(const ampjit_plan* plan, const char* path) {
  return guarded("ampjit_plan_save", [&]() -> rt::Status {
    if (plan == nullptr)
      return missing("plan");
    if (path == nullptr)
      return missing("path");
    return rt::savePlan(plan->plan, path);
  });
}

void ampjit_plan_destroy(ampjit_plan* plan) { delete plan; }

size_t ampjit_plan_argument_count(const ampjit_plan* plan) { return plan ? plan->plan.argumentCount() : 0; }

size_t ampjit_plan_result_count(const ampjit_plan* plan) { return plan ? plan->plan.results.size() : 0; }

ampjit_status ampjit_plan_argument(const ampjit_plan* plan, size_t index, ampjit_value_info* info) {
  return guarded("ampjit_plan_argument", [&]() -> rt::Status {
    if (plan == nullptr)
      return missing("plan");
    if (info == nullptr)
      return missing("info");
    if (rt::Status exists = checkArgumentIndex(plan->plan, index); !exists.ok())
      return exists;
    describe(plan->plan, plan->plan.argumentBuffer(index), info);
    return rt::Status::success();
  });
}

ampjit_status ampjit_plan_find_argument(const ampjit_plan* plan, const char* name, size_t* index) {
  return guarded("ampjit_plan_find_argument", [&]() -> rt::Status {
    if (plan == nullptr)
      return missing("plan");
    if (name == nullptr)
      return missing("name");
    if (index == nullptr)
      return missing("index");
    rt::Expected<std::size_t> found = rt::findArgument(plan->plan, name);
    if (!found)
      return found.status();
    *index = *found;
    return rt::Status::success();
  });
}

ampjit_status ampjit_plan_result(const ampjit_plan* plan, size_t index, ampjit_value_info* info) {
  return guarded("ampjit_plan_result", [&]() -> rt::Status {
    if (plan == nullptr)
      return missing("plan");
    if (info == nullptr)
      return missing("info");
    if (rt::Status exists = checkResultIndex(plan->plan, index); !exists.ok())
      return exists;
    const rt::PlanResult& result = plan->plan.results[index];
    describe(plan->plan, result.buffer, info);
    info->tied_argument = result.tiedArgument;
    info->derived_from = -1;
    return rt::Status::success();
  });
}

char* ampjit_plan_to_text(const ampjit_plan* plan) {
  return guardedHandle<char>("ampjit_plan_to_text", [&]() -> rt::Expected<char*> {
    if (plan == nullptr)
      return missing("plan");
    std::string text = rt::printPlan(plan->plan);
    char* copy = static_cast<char*>(std::malloc(text.size() + 1));
    if (copy == nullptr)
      return rt::Status::error("out of memory for " + std::to_string(text.size() + 1) + " bytes");
    std::memcpy(copy, text.c_str(), text.size() + 1);
    return copy;
  });
}

void ampjit_free(void* memory) { std::free(memory); }

ampjit_session* ampjit_session_create(const ampjit_plan* plan, const char* backend) {
  return guardedHandle<ampjit_session>("ampjit_session_create", [&]() -> rt::Expected<ampjit_session*> {
    if (plan == nullptr)
      return missing("plan");
    if (backend == nullptr)
      return missing("backend");
    auto session = std::make_unique<ampjit_session>();
    session->plan.plan = plan->plan;
    rt::Expected<std::unique_ptr<rt::Backend>> created = rt::createBackendByName(backend);
    if (!created)
      return created.status();
    session->backend = std::move(*created);
    session->cuda = dynamic_cast<rt::CudaBackend*>(session->backend.get());
    rt::Expected<std::unique_ptr<rt::Executable>> executable = session->backend->prepare(plan->plan);
    if (!executable)
      return executable.status();
    session->executable = std::move(*executable);
    const rt::Plan& prepared = session->plan.plan;
    for (size_t index = 0; index < prepared.argumentCount(); ++index) {
      const rt::BufferDesc& buffer = prepared.buffers[prepared.argumentBuffer(index)];
      rt::Expected<rt::Tensor> storage = session->backend->allocate(buffer.type);
      if (!storage)
        return rt::Status::error(rt::describeArgument(prepared, index) + ": " + storage.message());
      session->arguments.push_back(std::move(*storage));
      if (buffer.derivedFrom >= 0)
        session->derivationSources.insert(size_t(buffer.derivedFrom));
    }
    for (size_t index : rt::deferredArguments(prepared))
      session->deferredArguments.insert(index);
    return session.release();
  });
}

void ampjit_session_destroy(ampjit_session* session) { delete session; }

const ampjit_plan* ampjit_session_plan(const ampjit_session* session) {
  return session ? &session->plan : nullptr;
}

ampjit_status ampjit_session_write(ampjit_session* session, size_t index, const void* data, size_t bytes) {
  return guarded("ampjit_session_write", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    const rt::Plan& plan = session->plan.plan;
    if (rt::Status exists = checkArgumentIndex(plan, index); !exists.ok())
      return exists;
    if (rt::Status sized = checkByteCount(plan, index, bytes, data); !sized.ok())
      return sized;
    return store(*session, index, static_cast<const std::byte*>(data));
  });
}

ampjit_status ampjit_session_fill(ampjit_session* session, size_t index, double value) {
  return guarded("ampjit_session_fill", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    return storeValues(*session, index, [&](int64_t) { return value; }, false);
  });
}

ampjit_status ampjit_session_write_values(ampjit_session* session, size_t index, const double* values,
                                          size_t count) {
  return guarded("ampjit_session_write_values", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    if (rt::Status counted = checkElementCount(session->plan.plan, index, count, values); !counted.ok())
      return counted;
    return storeValues(*session, index, [&](int64_t i) { return values[i]; }, true);
  });
}

ampjit_status ampjit_session_read_values(ampjit_session* session, size_t index, double* values, size_t count) {
  return guarded("ampjit_session_read_values", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    const rt::Plan& plan = session->plan.plan;
    if (rt::Status counted = checkElementCount(plan, index, count, values); !counted.ok())
      return counted;
    rt::Expected<rt::Tensor> host = rt::Tensor::allocate(plan.buffers[plan.argumentBuffer(index)].type);
    if (!host)
      return host.status();
    if (rt::Status read = readArgument(*session, index, host->bytes(), host->byteSize()); !read.ok())
      return read;
    for (int64_t i = 0; i < host->elementCount(); ++i)
      values[i] = host->at(i);
    return rt::Status::success();
  });
}

ampjit_status ampjit_session_read(ampjit_session* session, size_t index, void* data, size_t bytes) {
  return guarded("ampjit_session_read", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    return readArgument(*session, index, data, bytes);
  });
}

ampjit_status ampjit_session_run(ampjit_session* session) {
  return guarded("ampjit_session_run", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    if (rt::Status rederived = rederiveIfStale(*session); !rederived.ok())
      return rederived;
    rt::Expected<std::vector<rt::Tensor>> results = session->executable->run(session->arguments);
    if (!results)
      return results.status();
    session->results = std::move(*results);
    ++session->steps;
    return rt::Status::success();
  });
}

ampjit_status ampjit_session_read_result(ampjit_session* session, size_t index, void* data, size_t bytes) {
  return guarded("ampjit_session_read_result", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    return readResult(*session, index, data, bytes, {});
  });
}

ampjit_host_copy* ampjit_session_read_async(ampjit_session* session, size_t index) {
  return startedOrNull("ampjit_session_read_async", [&]() -> rt::Expected<ampjit_host_copy*> {
    if (session == nullptr)
      return missing("session");
    rt::Expected<const rt::Tensor*> argument = argumentToRead(*session, index);
    if (!argument)
      return argument.status();
    return startHostCopy(*session, **argument, rt::describeArgument(session->plan.plan, index));
  });
}

ampjit_host_copy* ampjit_session_read_result_async(ampjit_session* session, size_t index) {
  return startedOrNull("ampjit_session_read_result_async", [&]() -> rt::Expected<ampjit_host_copy*> {
    if (session == nullptr)
      return missing("session");
    rt::Expected<std::pair<const rt::Tensor*, std::string>> result = resultToRead(*session, index);
    if (!result)
      return result.status();
    return startHostCopy(*session, *result->first, result->second);
  });
}

int ampjit_host_copy_ready(ampjit_host_copy* copy) {
  if (copy == nullptr)
    return -1;
  return copy->read.ready() ? 1 : 0;
}

ampjit_status ampjit_host_copy_wait(ampjit_host_copy* copy, void* data, size_t bytes) {
  return guarded("ampjit_host_copy_wait", [&]() -> rt::Status {
    if (copy == nullptr)
      return missing("copy");
    rt::Expected<rt::Tensor> arrived = copy->read.wait();
    if (!arrived)
      return rt::Status::error(copy->what + ": " + arrived.message());
    if (data == nullptr)
      return missing("data");
    if (bytes != arrived->byteSize())
      return rt::Status::error(copy->what + " is " + std::to_string(arrived->byteSize()) + " bytes, not " +
                               std::to_string(bytes));
    std::memcpy(data, arrived->bytes(), bytes);
    return rt::Status::success();
  });
}

void ampjit_host_copy_destroy(ampjit_host_copy* copy) { delete copy; }

ampjit_status ampjit_session_write_device(ampjit_session* session, size_t index, const void* device_data,
                                          size_t bytes, void* stream) {
  return guarded("ampjit_session_write_device", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    AMPJIT_RETURN_IF_ERROR(checkDeviceSession(*session));
    const rt::Plan& plan = session->plan.plan;
    AMPJIT_RETURN_IF_ERROR(checkArgumentIndex(plan, index));
    AMPJIT_RETURN_IF_ERROR(checkByteCount(plan, index, bytes, device_data));
    return store(*session, index, static_cast<const std::byte*>(device_data), {.onDevice = true, .stream = stream});
  });
}

ampjit_status ampjit_session_read_device(ampjit_session* session, size_t index, void* device_data, size_t bytes,
                                         void* stream) {
  return guarded("ampjit_session_read_device", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    AMPJIT_RETURN_IF_ERROR(checkDeviceSession(*session));
    return readArgument(*session, index, device_data, bytes, {.onDevice = true, .stream = stream});
  });
}

ampjit_status ampjit_session_read_result_device(ampjit_session* session, size_t index, void* device_data,
                                                size_t bytes, void* stream) {
  return guarded("ampjit_session_read_result_device", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    AMPJIT_RETURN_IF_ERROR(checkDeviceSession(*session));
    return readResult(*session, index, device_data, bytes, {.onDevice = true, .stream = stream});
  });
}

void* ampjit_session_stream(const ampjit_session* session) {
  return session != nullptr && session->cuda != nullptr ? session->cuda->stream() : nullptr;
}

ampjit_status ampjit_session_synchronize(ampjit_session* session) {
  return guarded("ampjit_session_synchronize", [&]() -> rt::Status {
    if (session == nullptr)
      return missing("session");
    return session->cuda != nullptr ? session->cuda->synchronize() : rt::Status::success();
  });
}

uint64_t ampjit_session_steps(const ampjit_session* session) { return session ? session->steps : 0; }

} // extern "C"
