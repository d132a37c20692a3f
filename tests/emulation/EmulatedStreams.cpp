// EmulatedStreams.h: the CUDA runtime's streams, events, graphs and memory
// on the host.

#include "EmulatedStreams.h"

#include "CudaEmulation.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ampjit::emulation {

namespace {

struct Event;
struct Capture;

enum class OperationKind { Work, Record, Wait };

struct Operation {
  OperationKind kind = OperationKind::Work;
  std::function<void()> work;
  std::string what; ///< Work submitted: what it is, for a capture's node (a replay leaves it empty)
  Event* event = nullptr;
  /// Record: which record of the event this is; Wait: the record to wait for.
  uint64_t generation = 0;
};

struct Stream {
  std::deque<Operation> queue;
  Capture* capture = nullptr;
  int lane = 0; ///< in its capture: 0 for the stream that began it
  int priority = 0;
};

struct Event {
  uint64_t records = 0;   ///< records enqueued
  uint64_t completed = 0; ///< the latest record that ran
  uint64_t time = 0;      ///< the clock when it ran
  bool timing = true;
  /// The active capture its latest record was made in, and which record of
  /// it there.
  Capture* capture = nullptr;
  uint64_t captureGeneration = 0;
};

/// One captured operation, on a lane (a stream in the capture), its event
/// named by its number in the capture.
struct Node {
  OperationKind kind = OperationKind::Work;
  int lane = 0;
  int priority = 0; ///< the capturing stream's
  std::function<void()> work;
  std::string what;
  int event = -1;
  uint64_t generation = 0;
};

struct Graph {
  std::vector<Node> nodes;
  int lanes = 1;
  int events = 0;
};

struct Capture {
  Stream* origin = nullptr;
  std::vector<Stream*> members;
  std::map<Event*, int> eventNumbers;
  std::vector<uint64_t> eventRecords;
  Graph graph;
  cudaError_t invalidatedBy = cudaSuccess;
};

struct GraphExecutable {
  Graph graph;
  std::vector<Stream*> lanes;  ///< lane k >= 1 runs on lanes[k]: streams of the graph's own
  std::vector<Event*> events;  ///< the graph's own events
};

/// Device memory and pinned host memory the model handed out.
struct Allocation {
  std::size_t bytes = 0;
  bool pinned = false;
};

/// cudaDeviceGetStreamPriorityRange on an sm_90 device.
constexpr int kLeastStreamPriority = 0, kGreatestStreamPriority = -5;

struct Model {
  GraphInstantiation lastInstantiation;
  unsigned long long unknownInstantiateFlags = 0;
  StreamSchedule schedule = StreamSchedule::Shuffled;
  std::mt19937_64 random{1};
  std::vector<Stream*> streams; // creation order
  std::map<uintptr_t, Allocation> allocations;
  uint64_t clock = 0;
  uint64_t operationsRun = 0, pinnedAllocations = 0, eventsCreated = 0;
  int64_t poolUsed = 0, poolHigh = 0;
  std::size_t largestPoolAllocation = 0; // 0: as large as the host allows
};

Model& model() {
  static Model* instance = new Model; // never destroyed: device tensors may be freed at exit
  return *instance;
}

Stream* streamOf(cudaStream_t stream) { return reinterpret_cast<Stream*>(stream); }
Event* eventOf(cudaEvent_t event) { return reinterpret_cast<Event*>(event); }
int gPoolToken = 0;

const Allocation* findAllocation(const void* pointer) {
  Model& m = model();
  auto address = reinterpret_cast<uintptr_t>(pointer);
  auto found = m.allocations.upper_bound(address);
  if (found == m.allocations.begin())
    return nullptr;
  --found;
  return address < found->first + std::max<std::size_t>(found->second.bytes, 1) ? &found->second : nullptr;
}

bool isPinned(const void* pointer) {
  const Allocation* allocation = findAllocation(pointer);
  return allocation != nullptr && allocation->pinned;
}

void complain(const std::string& what) { std::fprintf(stderr, "[cuda emulation] %s\n", what.c_str()); }

void execute(Operation& operation) {
  Model& m = model();
  ++m.clock;
  ++m.operationsRun;
  switch (operation.kind) {
  case OperationKind::Work:
    operation.work();
    break;
  case OperationKind::Record:
    operation.event->completed = std::max(operation.event->completed, operation.generation);
    operation.event->time = m.clock;
    break;
  case OperationKind::Wait: break;
  }
}

bool mayRun(const Operation& operation) {
  return operation.kind != OperationKind::Wait || operation.event->completed >= operation.generation;
}

/// Runs queued work, a stream at a time as the schedule draws them, until
/// `done` holds.
cudaError_t drainUntil(const std::function<bool()>& done) {
  Model& m = model();
  while (!done()) {
    std::vector<Stream*> ready;
    bool pending = false;
    for (Stream* stream : m.streams) {
      if (stream->queue.empty())
        continue;
      pending = true;
      if (mayRun(stream->queue.front()))
        ready.push_back(stream);
    }
    if (ready.empty()) {
      if (pending)
        complain("every stream with work waits on an event no stream will record");
      return cudaErrorIllegalState;
    }
    Stream* chosen = ready[m.random() % ready.size()];
    Operation operation = std::move(chosen->queue.front());
    chosen->queue.pop_front();
    execute(operation);
  }
  return cudaSuccess;
}

cudaError_t drainAll() {
  return drainUntil([] {
    for (Stream* stream : model().streams)
      if (!stream->queue.empty())
        return false;
    return true;
  });
}

void invalidate(Capture* capture, cudaError_t why) {
  if (capture->invalidatedBy == cudaSuccess)
    capture->invalidatedBy = why;
}

/// Enqueues on `stream`: the null stream runs it at once; a capturing
/// stream records it; otherwise it waits in the queue (or, under the
/// Immediate schedule, runs now).
void submit(Stream* stream, Operation operation) {
  Model& m = model();
  if (stream != nullptr && stream->capture != nullptr) {
    Capture& capture = *stream->capture;
    Node node;
    node.kind = operation.kind;
    node.lane = stream->lane;
    node.priority = stream->priority;
    node.work = std::move(operation.work);
    node.what = std::move(operation.what);
    node.generation = operation.generation;
    node.event = operation.event == nullptr ? -1 : capture.eventNumbers.at(operation.event);
    capture.graph.nodes.push_back(std::move(node));
    return;
  }
  if (stream == nullptr || m.schedule == StreamSchedule::Immediate) {
    if (operation.kind == OperationKind::Wait && !mayRun(operation))
      drainUntil([&] { return mayRun(operation); });
    execute(operation);
    return;
  }
  stream->queue.push_back(std::move(operation));
}

void submitWork(cudaStream_t stream, std::string what, std::function<void()> work) {
  Operation operation;
  operation.work = std::move(work);
  operation.what = std::move(what);
  submit(streamOf(stream), std::move(operation));
}

/// Kernel launches and cuBLASLt calls (CudaEmulation.h) come here.
const bool gInstalled = [] {
  setStreamSubmitter(submitWork);
  return true;
}();

void release(Capture* capture) {
  for (Stream* member : capture->members) {
    member->capture = nullptr;
    member->lane = 0;
  }
  for (auto& [event, number] : capture->eventNumbers)
    if (event->capture == capture)
      event->capture = nullptr;
}

bool sameTopology(const Graph& a, const Graph& b) {
  if (a.nodes.size() != b.nodes.size() || a.lanes != b.lanes || a.events != b.events)
    return false;
  for (std::size_t i = 0; i < a.nodes.size(); ++i)
    if (a.nodes[i].kind != b.nodes[i].kind || a.nodes[i].lane != b.nodes[i].lane ||
        a.nodes[i].event != b.nodes[i].event || a.nodes[i].generation != b.nodes[i].generation)
      return false;
  return true;
}

/// Every lane but the origin's must end in a record the origin waits for
/// after it: the device refuses to end a capture with work forked and not
/// joined back.
bool joined(const Graph& graph) {
  for (int lane = 1; lane < graph.lanes; ++lane) {
    std::ptrdiff_t last = -1;
    for (std::size_t i = 0; i < graph.nodes.size(); ++i)
      if (graph.nodes[i].lane == lane)
        last = std::ptrdiff_t(i);
    if (last < 0)
      continue;
    const Node& end = graph.nodes[std::size_t(last)];
    if (end.kind != OperationKind::Record)
      return false;
    bool waited = false;
    for (std::size_t i = std::size_t(last) + 1; i < graph.nodes.size() && !waited; ++i)
      waited = graph.nodes[i].lane == 0 && graph.nodes[i].kind == OperationKind::Wait &&
               graph.nodes[i].event == end.event && graph.nodes[i].generation >= end.generation;
    if (!waited)
      return false;
  }
  return true;
}

std::string describeNode(const Node& node) {
  std::string lane = "lane " + std::to_string(node.lane) + ": ";
  switch (node.kind) {
  case OperationKind::Work: return lane + node.what;
  case OperationKind::Record:
    return lane + "record event " + std::to_string(node.event) + " (#" + std::to_string(node.generation) + ")";
  case OperationKind::Wait:
    return lane + "wait for event " + std::to_string(node.event) + " (#" + std::to_string(node.generation) + ")";
  }
  return lane + "?";
}

void* allocate(std::size_t bytes, bool pinned) {
  std::size_t rounded = std::max<std::size_t>(256, (bytes + 255) / 256 * 256);
  void* memory = std::aligned_alloc(256, rounded);
  if (memory != nullptr)
    model().allocations[reinterpret_cast<uintptr_t>(memory)] = Allocation{bytes, pinned};
  return memory;
}

void deallocate(void* pointer) {
  model().allocations.erase(reinterpret_cast<uintptr_t>(pointer));
  std::free(pointer);
}

} // namespace

void setStreamSchedule(StreamSchedule schedule, uint64_t seed) {
  drainAll();
  model().schedule = schedule;
  model().random.seed(seed);
}

uint64_t operationsRun() { return model().operationsRun; }
uint64_t pinnedAllocations() { return model().pinnedAllocations; }
uint64_t eventsCreated() { return model().eventsCreated; }

bool isDeviceMemory(const void* pointer) {
  const Allocation* allocation = findAllocation(pointer);
  return allocation != nullptr && !allocation->pinned;
}

std::size_t deviceBytesFrom(const void* pointer) {
  Model& m = model();
  auto address = reinterpret_cast<uintptr_t>(pointer);
  auto found = m.allocations.upper_bound(address);
  if (found == m.allocations.begin())
    return 0;
  --found;
  if (found->second.pinned || address >= found->first + found->second.bytes)
    return 0;
  return found->first + found->second.bytes - address;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (device != 0)
    return cudaErrorInvalidDevice;
  switch (attribute) {
  case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
  case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
  case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
  case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; return cudaSuccess;
  case cudaDevAttrL2CacheSize: *value = 50 << 20; return cudaSuccess;
  case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; return cudaSuccess;
  default: return cudaErrorInvalidValue;
  }
}

cudaError_t cudaDeviceSynchronize() { return drainAll(); }

void chargeDeviceClock(uint64_t microseconds) { model().clock += microseconds; }

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr)
    *least = kLeastStreamPriority;
  if (greatest != nullptr)
    *greatest = kGreatestStreamPriority;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  return emulation::cudaStreamCreateWithPriority(stream, flags, 0);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned, int priority) {
  if (stream == nullptr)
    return cudaErrorInvalidValue;
  auto* made = new Stream;
  made->priority = std::clamp(priority, kGreatestStreamPriority, kLeastStreamPriority);
  model().streams.push_back(made);
  *stream = reinterpret_cast<cudaStream_t>(made);
  return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  Stream* s = streamOf(stream);
  if (priority == nullptr)
    return cudaErrorInvalidValue;
  *priority = s == nullptr ? 0 : s->priority;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Stream* s = streamOf(stream);
  if (s == nullptr)
    return cudaErrorInvalidResourceHandle;
  // The device finishes what was enqueued before the stream goes.
  cudaError_t drained = drainUntil([s] { return s->queue.empty(); });
  std::vector<Stream*>& streams = model().streams;
  streams.erase(std::remove(streams.begin(), streams.end(), s), streams.end());
  delete s;
  return drained;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Stream* s = streamOf(stream);
  if (s == nullptr)
    return drainAll();
  if (s->capture != nullptr) {
    invalidate(s->capture, cudaErrorStreamCaptureUnsupported);
    return cudaErrorStreamCaptureUnsupported;
  }
  return drainUntil([s] { return s->queue.empty(); });
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  Stream* s = streamOf(stream);
  if (s == nullptr)
    return cudaErrorStreamCaptureImplicit;
  if (s->capture != nullptr)
    return cudaErrorIllegalState;
  auto* capture = new Capture;
  capture->origin = s;
  capture->members.push_back(s);
  s->capture = capture;
  s->lane = 0;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  Stream* s = streamOf(stream);
  *graph = nullptr;
  if (s == nullptr || s->capture == nullptr || s->capture->origin != s)
    return cudaErrorIllegalState;
  std::unique_ptr<Capture> capture(s->capture);
  release(capture.get());
  if (capture->invalidatedBy != cudaSuccess)
    return cudaErrorStreamCaptureInvalidated;
  if (!joined(capture->graph)) {
    complain("a capture ended with work forked to another stream and not joined back");
    return cudaErrorStreamCaptureUnjoined;
  }
  capture->graph.events = int(capture->eventRecords.size());
  *graph = reinterpret_cast<cudaGraph_t>(new Graph(std::move(capture->graph)));
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return emulation::cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  ++model().eventsCreated;
  auto* made = new Event;
  made->timing = (flags & cudaEventDisableTiming) == 0;
  *event = reinterpret_cast<cudaEvent_t>(made);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  // The device destroys an event once the work it waits for is done; the
  // queued operations that name it must run first.
  drainAll();
  delete eventOf(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Event* e = eventOf(event);
  Stream* s = streamOf(stream);
  if (e == nullptr)
    return cudaErrorInvalidResourceHandle;
  Operation operation;
  operation.kind = OperationKind::Record;
  operation.event = e;
  if (s != nullptr && s->capture != nullptr) {
    Capture& capture = *s->capture;
    auto [entry, added] = capture.eventNumbers.emplace(e, int(capture.eventRecords.size()));
    if (added)
      capture.eventRecords.push_back(0);
    operation.generation = ++capture.eventRecords[std::size_t(entry->second)];
    e->capture = &capture;
    e->captureGeneration = operation.generation;
  } else {
    operation.generation = ++e->records;
    e->capture = nullptr;
  }
  submit(s, std::move(operation));
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  Event* e = eventOf(event);
  Stream* s = streamOf(stream);
  if (e == nullptr)
    return cudaErrorInvalidResourceHandle;
  Operation operation;
  operation.kind = OperationKind::Wait;
  operation.event = e;
  if (e->capture != nullptr) {
    // Waiting on a captured record pulls the stream into that capture.
    Capture& capture = *e->capture;
    if (s == nullptr)
      return cudaErrorStreamCaptureImplicit;
    if (s->capture == nullptr) {
      s->capture = &capture;
      s->lane = capture.graph.lanes++;
      capture.members.push_back(s);
    } else if (s->capture != &capture) {
      invalidate(s->capture, cudaErrorStreamCaptureMerge);
      return cudaErrorStreamCaptureMerge;
    }
    operation.generation = e->captureGeneration;
  } else {
    if (s != nullptr && s->capture != nullptr) {
      // An event recorded outside the capture cannot order a graph's node.
      invalidate(s->capture, cudaErrorStreamCaptureIsolation);
      return cudaErrorStreamCaptureIsolation;
    }
    if (e->records == 0)
      return cudaSuccess;
    operation.generation = e->records;
  }
  submit(s, std::move(operation));
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Event* e = eventOf(event);
  if (e == nullptr)
    return cudaErrorInvalidResourceHandle;
  if (e->capture != nullptr)
    return cudaErrorCapturedEvent;
  return drainUntil([e] { return e->completed >= e->records; });
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  // The device makes progress while the host polls: here, polling runs it.
  return emulation::cudaEventSynchronize(event);
}

cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end) {
  Event *a = eventOf(start), *b = eventOf(end);
  if (a == nullptr || b == nullptr)
    return cudaErrorInvalidResourceHandle;
  if (!a->timing || !b->timing)
    return cudaErrorInvalidResourceHandle;
  if (a->records == 0 || b->records == 0 || a->completed < a->records || b->completed < b->records)
    return cudaErrorNotReady;
  // A microsecond of the model's clock per operation run.
  *milliseconds = float(double(b->time) - double(a->time)) * 1e-3f;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* executable, cudaGraph_t graph, unsigned long long flags) {
  const Graph* g = reinterpret_cast<const Graph*>(graph);
  const unsigned long long defined = cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
                                     cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;
  if (g == nullptr || (flags & ~defined) != 0 || (flags & model().unknownInstantiateFlags) != 0)
    return cudaErrorInvalidValue;
  GraphInstantiation& instantiation = model().lastInstantiation;
  instantiation.flags = flags;
  instantiation.lanePriorities.assign(std::size_t(g->lanes), {});
  instantiation.nodes.clear();
  for (const Node& node : g->nodes) {
    if (node.kind == OperationKind::Work)
      instantiation.lanePriorities[std::size_t(node.lane)].push_back(node.priority);
    instantiation.nodes.push_back(describeNode(node));
  }
  auto* made = new GraphExecutable{*g, {}, {}};
  for (int lane = 0; lane < g->lanes; ++lane) {
    cudaStream_t own = nullptr;
    if (lane > 0)
      emulation::cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
    made->lanes.push_back(streamOf(own));
  }
  for (int e = 0; e < g->events; ++e)
    made->events.push_back(new Event);
  *executable = reinterpret_cast<cudaGraphExec_t>(made);
  return cudaSuccess;
}

GraphInstantiation lastGraphInstantiation() { return model().lastInstantiation; }

void setUnknownGraphInstantiateFlags(unsigned long long flags) { model().unknownInstantiateFlags = flags; }

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t executable, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info) {
  auto* exec = reinterpret_cast<GraphExecutable*>(executable);
  const Graph* g = reinterpret_cast<const Graph*>(graph);
  if (exec == nullptr || g == nullptr)
    return cudaErrorInvalidValue;
  if (!sameTopology(exec->graph, *g)) {
    if (info != nullptr)
      info->result = cudaGraphExecUpdateErrorTopologyChanged;
    return cudaErrorGraphExecUpdateFailure;
  }
  exec->graph = *g; // the same nodes, with this capture's arguments
  if (info != nullptr)
    info->result = cudaGraphExecUpdateSuccess;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t executable, cudaStream_t stream) {
  auto* exec = reinterpret_cast<GraphExecutable*>(executable);
  Stream* s = streamOf(stream);
  if (exec == nullptr)
    return cudaErrorInvalidValue;
  if (s != nullptr && s->capture != nullptr)
    return cudaErrorNotSupported; // a graph inside a capture: not modelled
  std::vector<uint64_t> base;
  for (Event* event : exec->events)
    base.push_back(event->records);
  for (const Node& node : exec->graph.nodes) {
    Operation operation;
    operation.kind = node.kind;
    operation.work = node.work;
    if (node.event >= 0) {
      operation.event = exec->events[std::size_t(node.event)];
      operation.generation = base[std::size_t(node.event)] + node.generation;
      if (node.kind == OperationKind::Record)
        operation.event->records = std::max(operation.event->records, operation.generation);
    }
    submit(node.lane == 0 ? s : exec->lanes[std::size_t(node.lane)], std::move(operation));
  }
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<Graph*>(graph);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t executable) {
  auto* exec = reinterpret_cast<GraphExecutable*>(executable);
  if (exec == nullptr)
    return cudaErrorInvalidValue;
  drainAll();
  for (Stream* lane : exec->lanes)
    if (lane != nullptr)
      emulation::cudaStreamDestroy(reinterpret_cast<cudaStream_t>(lane));
  for (Event* event : exec->events)
    delete event;
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (device != 0)
    return cudaErrorInvalidDevice;
  *pool = reinterpret_cast<cudaMemPool_t>(&gPoolToken);
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void*) {
  if (pool != reinterpret_cast<cudaMemPool_t>(&gPoolToken))
    return cudaErrorInvalidValue;
  return attribute == cudaMemPoolAttrReleaseThreshold ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) {
  if (pool != reinterpret_cast<cudaMemPool_t>(&gPoolToken))
    return cudaErrorInvalidValue;
  if (attribute == cudaMemPoolAttrUsedMemHigh) {
    *static_cast<uint64_t*>(value) = uint64_t(model().poolHigh);
    return cudaSuccess;
  }
  if (attribute == cudaMemPoolAttrUsedMemCurrent) {
    *static_cast<uint64_t*>(value) = uint64_t(model().poolUsed);
    return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

cudaError_t cudaMallocFromPoolAsync(void** pointer, std::size_t bytes, cudaMemPool_t pool, cudaStream_t stream) {
  if (pool != reinterpret_cast<cudaMemPool_t>(&gPoolToken))
    return cudaErrorInvalidValue;
  Stream* s = streamOf(stream);
  if (s != nullptr && s->capture != nullptr) {
    // A graph's allocation node: not modelled, and the backend allocates none.
    invalidate(s->capture, cudaErrorStreamCaptureUnsupported);
    return cudaErrorStreamCaptureUnsupported;
  }
  Model& m = model();
  *pointer = m.largestPoolAllocation == 0 || bytes <= m.largestPoolAllocation ? allocate(bytes, false) : nullptr;
  if (*pointer == nullptr)
    return cudaErrorMemoryAllocation;
  m.poolUsed += int64_t(bytes);
  m.poolHigh = std::max(m.poolHigh, m.poolUsed);
  return cudaSuccess;
}

void setLargestPoolAllocation(std::size_t bytes) { model().largestPoolAllocation = bytes; }

cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream) {
  Stream* s = streamOf(stream);
  const Allocation* allocation = findAllocation(pointer);
  if (allocation == nullptr || allocation->pinned)
    return cudaErrorInvalidValue;
  if (s != nullptr && s->capture != nullptr) {
    complain("a stream-ordered free while capturing: the graph would free it on every launch");
    invalidate(s->capture, cudaErrorStreamCaptureUnsupported);
    return cudaErrorStreamCaptureUnsupported;
  }
  std::size_t bytes = allocation->bytes;
  submitWork(stream, "free " + std::to_string(bytes) + " bytes", [pointer, bytes] {
    model().poolUsed -= int64_t(bytes);
    deallocate(pointer);
  });
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  *pointer = allocate(bytes, false);
  return *pointer != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr)
    return cudaSuccess;
  // Plan-level emulation memory is not tracked: the null stream's world.
  drainAll(); // cudaFree waits for the device
  if (findAllocation(pointer) != nullptr)
    deallocate(pointer);
  else
    std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, std::size_t bytes) {
  ++model().pinnedAllocations;
  *pointer = allocate(bytes, true);
  return *pointer != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void* pointer) {
  if (!isPinned(pointer))
    return cudaErrorInvalidValue;
  drainAll();
  deallocate(pointer);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer) {
  if (attributes == nullptr)
    return cudaErrorInvalidValue;
  *attributes = cudaPointerAttributes{};
  // The one emulated device, 0; host memory it did not allocate is
  // unregistered, with no device, as the runtime reports it.
  attributes->type = isDeviceMemory(pointer) ? cudaMemoryTypeDevice
                     : isPinned(pointer)     ? cudaMemoryTypeHost
                                             : cudaMemoryTypeUnregistered;
  attributes->device = attributes->type == cudaMemoryTypeUnregistered ? -2 : 0;
  attributes->devicePointer = attributes->type == cudaMemoryTypeDevice ? const_cast<void*>(pointer) : nullptr;
  attributes->hostPointer = attributes->type != cudaMemoryTypeDevice ? const_cast<void*>(pointer) : nullptr;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  Stream* s = streamOf(stream);
  if (bytes == 0)
    return cudaSuccess;
  if (s == nullptr) {
    // The plan-level emulation: every buffer is "device" memory, at once.
    std::memmove(destination, source, bytes);
    return cudaSuccess;
  }
  bool fromDevice = isDeviceMemory(source), toDevice = isDeviceMemory(destination);
  bool kindHolds = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToDevice && !fromDevice && toDevice) ||
                   (kind == cudaMemcpyDeviceToHost && fromDevice && !toDevice) ||
                   (kind == cudaMemcpyDeviceToDevice && fromDevice && toDevice) ||
                   (kind == cudaMemcpyHostToHost && !fromDevice && !toDevice);
  if (!kindHolds) {
    complain("cudaMemcpyAsync of kind " + std::to_string(int(kind)) + " from " + (fromDevice ? "device" : "host") +
             " to " + (toDevice ? "device" : "host") + " memory");
    return cudaErrorInvalidValue;
  }
  bool pageableSource = !fromDevice && !isPinned(source), pageableDestination = !toDevice && !isPinned(destination);
  if (s->capture != nullptr && (pageableSource || pageableDestination)) {
    invalidate(s->capture, cudaErrorStreamCaptureUnsupported);
    return cudaErrorStreamCaptureUnsupported;
  }
  if (pageableSource) {
    // The runtime stages pageable bytes before it returns.
    auto staged = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(source),
                                                           static_cast<const std::byte*>(source) + bytes);
    submitWork(stream, "copy " + std::to_string(bytes) + " staged bytes",
               [destination, staged] { std::memcpy(destination, staged->data(), staged->size()); });
    return cudaSuccess;
  }
  submitWork(stream, "copy " + std::to_string(bytes) + " bytes",
             [destination, source, bytes] { std::memmove(destination, source, bytes); });
  // Into pageable memory the call returns once the bytes are there.
  return pageableDestination ? emulation::cudaStreamSynchronize(stream) : cudaSuccess;
}

cudaError_t cudaMemcpy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind) {
  cudaError_t drained = drainAll(); // the legacy stream waits for all work first
  if (bytes > 0)
    std::memmove(destination, source, bytes);
  return drained;
}

cudaError_t cudaMemsetAsync(void* destination, int value, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0)
    return cudaSuccess;
  if (stream != nullptr && !isDeviceMemory(destination))
    return cudaErrorInvalidValue;
  submitWork(stream, "fill " + std::to_string(bytes) + " bytes with " + std::to_string(value),
             [destination, value, bytes] { std::memset(destination, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaLibraryUnload(cudaLibrary_t) { return cudaSuccess; }

} // namespace ampjit::emulation
