#ifndef AMPJIT_TESTS_EMULATION_EMULATEDSTREAMS_H
#define AMPJIT_TESTS_EMULATION_EMULATEDSTREAMS_H

// The CUDA runtime's device, memory, stream, event and graph calls on the
// host, so the CUDA backend itself (CudaBackend.cpp: its staging, its graph
// capture and replay, the deferred update and the finiteness check on the
// side stream) runs in CI without a GPU. One emulated device (sm_90, 132
// SMs); device memory is host memory the model keeps track of.
//
// Streams are queues. Work enqueued on a stream (a kernel launch, a copy, a
// fill, a cuBLASLt call, a stream-ordered free) runs later: only when the
// host waits (cudaStreamSynchronize, cudaEventSynchronize or Query, a
// synchronous copy or free, and cudaEventDestroy, since queued work names
// the event) does the model run queued work, choosing among the
// streams whose next operation may run by a seeded random draw. An event
// wait holds a stream until that event's record has run. So every run is one
// order the device may choose, different orders across a test's runs, and a
// missing event dependency between streams shows up as a wrong result
// instead of passing by luck of timing. (StreamSchedule::Immediate runs work
// at once, in issue order.)
//
// Capture (cudaStreamBeginCapture) records what is enqueued instead of
// running it, follows other streams into the capture through events as the
// device does, and refuses what capture refuses: a stream synchronisation,
// waiting on an event recorded outside the capture, a copy from pageable
// host memory, and ending with a stream that forked work never joined back
// (cudaErrorStreamCaptureUnjoined). A launched graph enqueues its recorded
// work again with the arguments captured, its forked lanes on streams of
// its own.
//
// Copies from pageable host memory take the bytes when they are enqueued
// (the runtime stages them before returning); copies to the host land when
// the stream gets to them, so reading before waiting reads stale bytes.
// The null stream runs everything at once (the plan-level emulation's path).
//
// Test-only: never part of a shipped binary.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ampjit::emulation {

enum class StreamSchedule {
  /// Work runs when it is enqueued, in issue order.
  Immediate,
  /// Work runs when the host waits, streams drawn at random among those
  /// that may go on (the default, seeded).
  Shuffled,
};
void setStreamSchedule(StreamSchedule schedule, uint64_t seed = 1);

/// Operations (launches, copies, event records and waits) the model has run
/// so far: under the shuffled schedule they run only while the host waits,
/// so a stretch of calls that leaves this unchanged waited for nothing.
uint64_t operationsRun();
/// cudaMallocHost calls so far.
uint64_t pinnedAllocations();
/// cudaEventCreate(WithFlags) calls so far.
uint64_t eventsCreated();

/// Whether `pointer` lies in memory the emulated device allocated.
bool isDeviceMemory(const void* pointer);
/// How many bytes of that allocation lie from `pointer` on (0 if it is not
/// device memory): what a library call may touch there.
std::size_t deviceBytesFrom(const void* pointer);

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device);
cudaError_t cudaDeviceSynchronize();
/// Called by work as it runs (a library call's model): the device's clock,
/// which event times read, moves on by `microseconds` more than the one
/// every operation takes.
void chargeDeviceClock(uint64_t microseconds);

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
/// `priority` clamped to the device's range, as the runtime does; it orders
/// nothing in the model (any order the device may choose is drawn anyway),
/// but capture copies it into the kernel nodes.
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned flags, int priority);
cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end);

/// Refuses flags the runtime does not define.
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* executable, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t executable, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info);
cudaError_t cudaGraphLaunch(cudaGraphExec_t executable, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t executable);

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value);
cudaError_t cudaMallocFromPoolAsync(void** pointer, std::size_t bytes, cudaMemPool_t pool, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream);
/// From now on the pool refuses (cudaErrorMemoryAllocation) any one
/// allocation of more than `bytes`, as a device short of memory would; 0
/// lifts the limit.
void setLargestPoolAllocation(std::size_t bytes);
cudaError_t cudaMalloc(void** pointer, std::size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaMallocHost(void** pointer, std::size_t bytes);
cudaError_t cudaFreeHost(void* pointer);

/// What the model knows of `pointer`: device memory it allocated (device 0),
/// pinned host memory, or else unregistered host memory.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* pointer);
cudaError_t cudaMemcpyAsync(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemcpy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemsetAsync(void* destination, int value, std::size_t bytes, cudaStream_t stream);
cudaError_t cudaLibraryUnload(cudaLibrary_t library);

/// Instantiation flags the emulated driver treats as undefined (refused
/// with cudaErrorInvalidValue), as an older driver would: none by default.
void setUnknownGraphInstantiateFlags(unsigned long long flags);

/// What the latest cudaGraphInstantiate was given: its flags and, per lane
/// of the captured graph (0: the stream that began the capture), the
/// priorities of the streams its work was captured from (the priorities a
/// graph instantiated with cudaGraphInstantiateFlagUseNodePriority runs at);
/// and every node in capture order, in words ("lane 1: name<<<grid, block,
/// shared>>>", "lane 0: wait for event 2 (#1)"): what it does and where,
/// but not on which addresses.
struct GraphInstantiation {
  unsigned long long flags = 0;
  std::vector<std::vector<int>> lanePriorities;
  std::vector<std::string> nodes;
};
GraphInstantiation lastGraphInstantiation();

} // namespace ampjit::emulation

#endif // AMPJIT_TESTS_EMULATION_EMULATEDSTREAMS_H
