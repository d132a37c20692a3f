// The fiber scheduler behind CudaEmulation.h: one fiber per thread of the
// running block, all on the launching host thread. A switch saves the
// callee-saved registers on the fiber's stack and swaps stack pointers
// (x86-64 System V; ucontext elsewhere, which costs a system call per switch,
// too slow for a whole train step's millions of threads but correct).
// A fiber that waits or exits hands over straight to the next runnable
// fiber in thread order, not through the launching thread's context: that
// halves the switches of a barrier, which with the stacks' cache misses
// were most of the time an emulated kernel took. The launching context
// runs again when the block has finished, failed or deadlocked.
// Under AddressSanitizer each switch is announced to it, as its interface asks
// of code that switches stacks (sanitizer/common_interface_defs.h): so that
// it knows which stack a report, an unwinding or a fake frame belongs to.
// Every test also passed without that on 2026-11-29; this keeps its contract
// rather than fixing a failure seen.

#include "CudaEmulation.h"

#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define AMPJIT_EMULATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AMPJIT_EMULATION_ASAN 1
#endif
#endif
#if defined(AMPJIT_EMULATION_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

namespace ampjit::emulation {

namespace {

constexpr unsigned kWarpSize = 32;
constexpr unsigned kMaxThreadsPerBlock = 1024;
/// What a kernel may ask for without cudaFuncSetAttribute.
constexpr std::size_t kMaxDynamicSharedBytes = 48 * 1024;
/// Plenty for a kernel's registers and local arrays, even unoptimised
/// (less the page at most that Stack::colouredTop takes off the top).
constexpr std::size_t kStackBytes = 256 * 1024;
constexpr std::size_t kCacheLineBytes = 64;

enum class Wait { None, Block, Warp };

#if defined(__x86_64__)
// ampjit_emulation_switch(&from, to): saves the callee-saved registers on the
// current stack, stores the stack pointer in `from`, and resumes the stack
// `to` saved the same way. The floating-point control words are not
// switched: no kernel changes a rounding mode, so all fibers share one.
extern "C" void ampjit_emulation_switch(void** from, void* to);
asm(R"(
    .text
    .p2align 4
    .type ampjit_emulation_switch, @function
ampjit_emulation_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size ampjit_emulation_switch, .-ampjit_emulation_switch
)");

/// A suspended fiber or scheduler: its saved stack pointer, and for
/// AddressSanitizer the stack it runs on (a fiber's from makeContext, the
/// scheduler's learnt when a fiber first runs).
struct Context {
  void* stackPointer = nullptr;
  const void* stackBottom = nullptr;
  std::size_t stackBytes = 0;
};

void switchStacks(Context& from, Context& to) { ampjit_emulation_switch(&from.stackPointer, to.stackPointer); }

/// A context that starts `entry` (which never returns) on the stack
/// [bottom, top), growing down from `top`.
void makeContext(Context& context, void* bottom, void* top, void (*entry)()) {
  // Laid out as ampjit_emulation_switch leaves a stack: six registers, then
  // the address `ret` goes to; above it a zero return address for `entry`,
  // placed so `entry` starts as if called (rsp = 8 mod 16).
  auto* slot = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(top) & ~uintptr_t(15)) - 8);
  slot[0] = 0;
  slot[-1] = reinterpret_cast<uint64_t>(entry);
  for (int r = 2; r <= 7; ++r)
    slot[-r] = 0;
  context.stackPointer = &slot[-7];
  context.stackBottom = bottom;
  context.stackBytes = std::size_t(static_cast<char*>(top) - static_cast<char*>(bottom));
}
#else
struct Context {
  ucontext_t context{};
  const void* stackBottom = nullptr;
  std::size_t stackBytes = 0;
};

void switchStacks(Context& from, Context& to) { swapcontext(&from.context, &to.context); }

void makeContext(Context& context, void* bottom, void* top, void (*entry)()) {
  getcontext(&context.context);
  context.context.uc_stack.ss_sp = bottom;
  context.context.uc_stack.ss_size = std::size_t(static_cast<char*>(top) - static_cast<char*>(bottom));
  context.context.uc_link = nullptr;
  makecontext(&context.context, entry, 0);
  context.stackBottom = bottom;
  context.stackBytes = context.context.uc_stack.ss_size;
}
#endif

/// Whether the context a switch leaves runs again: an exiting fiber's does
/// not, and AddressSanitizer frees what it kept for it.
enum class Leaving { ToReturn, ForGood };

/// Under AddressSanitizer, the end of a switch into the running context:
/// `fakeStack` is what its start saved (nullptr on a fiber's first entry),
/// and `cameFrom`, when given, receives the bounds of the stack left.
void finishSwitch(void* fakeStack, Context* cameFrom) {
#if defined(AMPJIT_EMULATION_ASAN)
  const void* bottom = nullptr;
  std::size_t bytes = 0;
  __sanitizer_finish_switch_fiber(fakeStack, &bottom, &bytes);
  if (cameFrom != nullptr) {
    cameFrom->stackBottom = bottom;
    cameFrom->stackBytes = bytes;
  }
#else
  (void)fakeStack;
  (void)cameFrom;
#endif
}

/// Suspends `from` and resumes `to`; returns when something switches back to
/// `from` (never for Leaving::ForGood), recording in `cameFrom` the bounds of
/// the stack that did (a fiber learns the scheduler's so).
void switchContext(Context& from, Context& to, Leaving leaving = Leaving::ToReturn, Context* cameFrom = nullptr) {
#if defined(AMPJIT_EMULATION_ASAN)
  void* fakeStack = nullptr;
  __sanitizer_start_switch_fiber(leaving == Leaving::ForGood ? nullptr : &fakeStack, to.stackBottom, to.stackBytes);
  switchStacks(from, to);
  finishSwitch(fakeStack, cameFrom);
#else
  (void)leaving;
  (void)cameFrom;
  switchStacks(from, to);
#endif
}

struct Fiber {
  Context context;
  ThreadIds ids;
  unsigned linear = 0;
  bool done = false;
  Wait waiting = Wait::None;
};

/// One stack, with a guard page below it so an overflow faults at once
/// instead of corrupting the next fiber's stack.
class Stack {
public:
  Stack() {
    page_ = std::size_t(sysconf(_SC_PAGESIZE));
    void* memory = mmap(nullptr, kStackBytes + page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
      std::fprintf(stderr, "CUDA emulation: cannot map a fiber stack\n");
      std::abort();
    }
    mprotect(memory, page_, PROT_NONE);
    base_ = static_cast<char*>(memory);
  }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  ~Stack() {
    forgetFrames();
    munmap(base_, kStackBytes + page_);
  }
  /// The lowest usable address, just above the guard page.
  void* bottom() const { return base_ + page_; }
  /// The highest address: stacks grow down, toward the guard page.
  void* top() const { return base_ + page_ + kStackBytes; }
  /// Where the fiber of thread `linear` starts its stack: below top() by a
  /// cache line per thread, wrapping within a page. Every stack is a whole
  /// number of pages long, so without this offset all the fibers' saved
  /// registers would fall into the same few cache sets and evict each other
  /// at every switch.
  void* colouredTop(unsigned linear) const {
    return static_cast<char*>(top()) - std::size_t(linear % (page_ / kCacheLineBytes)) * kCacheLineBytes;
  }
  /// Clears what AddressSanitizer marked in the frames of the last fiber to
  /// run here: they left the stack without returning, so their marks stay
  /// until the next fiber's frames would trip over them.
  void forgetFrames() const {
#if defined(AMPJIT_EMULATION_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(base_ + page_, kStackBytes);
#endif
  }

private:
  char* base_ = nullptr;
  std::size_t page_ = 0;
};

/// The block that is running on this host thread.
struct BlockRun {
  const std::function<void()>* body = nullptr;
  /// The launching context, which runs again when the block can go no further.
  Context scheduler;
  /// Whether `scheduler` holds its stack's bounds (AddressSanitizer): the
  /// first fiber of the launch learns them, being the one it switched to.
  bool schedulerStackKnown = false;
  std::vector<Fiber> fibers;
  unsigned live = 0;
  unsigned blockArrived = 0;
  std::vector<unsigned> warpLive, warpArrived;
  std::vector<uint64_t> exchangeSlots;
  std::string failure;
};

thread_local BlockRun* tBlock = nullptr;
thread_local Fiber* tFiber = nullptr;
thread_local std::vector<std::unique_ptr<Stack>> tStacks;
thread_local cudaError_t tLastError = cudaSuccess;
/// Unset in a generated kernels' library, whose launches run at once.
StreamSubmitter gStreamSubmitter = nullptr;
// Never destroyed: the process-wide CUDA backend is released by an exit
// handler that runs after thread-local destructors, and its teardown still
// reports here.
thread_local std::string& tLastFailure = *new std::string;

std::atomic<int64_t> gLaunches{0};
std::atomic<int64_t> gThreads{0};
std::atomic<int64_t> gEvictFirstBytes{0};

[[noreturn]] void misuse(const char* what) {
  std::fprintf(stderr, "CUDA emulation: %s outside an emulated kernel\n", what);
  std::abort();
}

/// Makes `fiber` (nullptr: the launching context) the running one.
void enter(Fiber* fiber) {
  tFiber = fiber;
  detail::runningThread = fiber == nullptr ? nullptr : &fiber->ids;
}

void releaseBlockBarrier(BlockRun& block) {
  block.blockArrived = 0;
  for (Fiber& fiber : block.fibers)
    if (fiber.waiting == Wait::Block)
      fiber.waiting = Wait::None;
}

void releaseWarpBarrier(BlockRun& block, unsigned warp) {
  block.warpArrived[warp] = 0;
  for (unsigned t = warp * kWarpSize; t < block.fibers.size() && t < (warp + 1) * kWarpSize; ++t)
    if (block.fibers[t].waiting == Wait::Warp)
      block.fibers[t].waiting = Wait::None;
}

/// The first fiber after thread `linear` in thread order, round to `linear`
/// itself, that can run; nullptr when every live one waits at a barrier.
/// Fibers take turns in thread order, as they did under a scheduler that
/// ran every runnable fiber in turn: the order CudaEmulation.h promises.
Fiber* nextRunnable(BlockRun& block, unsigned linear) {
  auto runnable = [](const Fiber& fiber) { return !fiber.done && fiber.waiting == Wait::None; };
  for (size_t t = size_t(linear) + 1; t < block.fibers.size(); ++t)
    if (runnable(block.fibers[t]))
      return &block.fibers[t];
  for (size_t t = 0; t <= linear; ++t)
    if (runnable(block.fibers[t]))
      return &block.fibers[t];
  return nullptr;
}

/// Leaves the running fiber, which has arrived at a barrier, has failed or
/// (`ForGood`) has exited, for the next fiber that can run, or for the
/// launching context when none can or the block has failed. Returns when
/// the fiber runs again: at once when the barrier it arrived at last
/// released it and no other fiber can run.
void leaveFiber(Leaving leaving = Leaving::ToReturn) {
  BlockRun& block = *tBlock;
  Fiber& from = *tFiber;
  Fiber* next = block.failure.empty() ? nextRunnable(block, from.linear) : nullptr;
  if (next == &from)
    return;
  enter(next);
  switchContext(from.context, next == nullptr ? block.scheduler : next->context, leaving);
}

void arriveAtWarpBarrier(BlockRun& block, Fiber& fiber) {
  unsigned warp = fiber.linear / kWarpSize;
  fiber.waiting = Wait::Warp;
  if (++block.warpArrived[warp] == block.warpLive[warp])
    releaseWarpBarrier(block, warp);
  leaveFiber();
}

[[noreturn]] void fiberEntry() {
  BlockRun& block = *tBlock;
  finishSwitch(nullptr, block.schedulerStackKnown ? nullptr : &block.scheduler);
  block.schedulerStackKnown = true;
  (*block.body)();
  Fiber& fiber = *tFiber;
  fiber.done = true;
  --block.live;
  unsigned warp = fiber.linear / kWarpSize;
  --block.warpLive[warp];
  // An exited thread counts as arrived at the barriers the others wait at.
  if (block.blockArrived > 0 && block.blockArrived == block.live)
    releaseBlockBarrier(block);
  if (block.warpArrived[warp] > 0 && block.warpArrived[warp] == block.warpLive[warp])
    releaseWarpBarrier(block, warp);
  // Never resumed: the next block's fiber reuses the stack.
  leaveFiber(Leaving::ForGood);
  std::abort();
}

std::string describeDeadlock(const BlockRun& block) {
  unsigned atBlock = 0, atWarp = 0;
  for (const Fiber& fiber : block.fibers) {
    if (fiber.done)
      continue;
    (fiber.waiting == Wait::Block ? atBlock : atWarp) += 1;
  }
  const ThreadIds& ids = block.fibers.front().ids;
  return "deadlock in block (" + std::to_string(ids.blockIdx.x) + "," + std::to_string(ids.blockIdx.y) + "," +
         std::to_string(ids.blockIdx.z) + "): " + std::to_string(atBlock) + " threads wait at __syncthreads, " +
         std::to_string(atWarp) + " at a warp shuffle, " +
         std::to_string(block.fibers.size() - atBlock - atWarp) + " have exited";
}

/// Runs one block to its end; false (and `failure`) when it cannot finish.
bool runBlock(BlockRun& block, dim3 grid, dim3 blockShape, uint3 blockIndex) {
  unsigned threads = blockShape.x * blockShape.y * blockShape.z;
  while (tStacks.size() < threads)
    tStacks.push_back(std::make_unique<Stack>());
  block.fibers.assign(threads, Fiber{});
  unsigned warps = (threads + kWarpSize - 1) / kWarpSize;
  block.warpLive.assign(warps, 0);
  block.warpArrived.assign(warps, 0);
  block.exchangeSlots.assign(size_t(warps) * kWarpSize, 0);
  block.live = threads;
  block.blockArrived = 0;
  for (unsigned t = 0; t < threads; ++t) {
    Fiber& fiber = block.fibers[t];
    fiber.linear = t;
    fiber.ids.threadIdx = uint3{t % blockShape.x, (t / blockShape.x) % blockShape.y, t / (blockShape.x * blockShape.y)};
    fiber.ids.blockIdx = blockIndex;
    fiber.ids.blockDim = blockShape;
    fiber.ids.gridDim = grid;
    ++block.warpLive[t / kWarpSize];
    tStacks[t]->forgetFrames();
    makeContext(fiber.context, tStacks[t]->bottom(), tStacks[t]->colouredTop(t), fiberEntry);
  }
  // The fibers pass control among themselves (leaveFiber) and come back
  // here when the block has finished, failed or deadlocked.
  enter(&block.fibers.front());
  switchContext(block.scheduler, block.fibers.front().context);
  enter(nullptr);
  if (!block.failure.empty())
    return false;
  if (block.live > 0) {
    block.failure = describeDeadlock(block);
    return false;
  }
  return true;
}

bool validConfiguration(dim3 grid, dim3 block, std::size_t sharedBytes, std::string& why) {
  uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || block.x > 1024 || block.y > 1024 || block.z > 64)
    why = "block (" + std::to_string(block.x) + "," + std::to_string(block.y) + "," + std::to_string(block.z) +
          ") is outside the device's limits (at most 1024 threads; x, y <= 1024, z <= 64)";
  else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    why = "grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," + std::to_string(grid.z) +
          ") is outside the device's limits (x in [1, 2^31-1], y and z in [1, 65535])";
  else if (sharedBytes > kMaxDynamicSharedBytes)
    why = std::to_string(sharedBytes) + " bytes of dynamic shared memory exceed 48 KiB";
  return why.empty();
}

void fail(cudaError_t error, std::string why) {
  tLastError = error;
  tLastFailure = std::move(why);
}

} // namespace

namespace detail {
thread_local constinit const ThreadIds* runningThread = nullptr;

void threadIndexReadOutsideAKernel() { misuse("a thread or block index was read"); }
} // namespace detail

void synchronizeBlock() {
  if (tFiber == nullptr)
    misuse("__syncthreads was called");
  BlockRun& block = *tBlock;
  tFiber->waiting = Wait::Block;
  if (++block.blockArrived == block.live)
    releaseBlockBarrier(block);
  leaveFiber();
}

void synchronizeWarp(unsigned mask) {
  if (tFiber == nullptr)
    misuse("__syncwarp was called");
  BlockRun& block = *tBlock;
  if (mask != 0xffffffffu) {
    block.failure = "__syncwarp with mask " + std::to_string(mask) + " (the emulation supports the full warp)";
    leaveFiber();
  }
  arriveAtWarpBarrier(block, *tFiber);
}

uint64_t exchangeInWarp(uint64_t bits, unsigned mask, int laneMask, int width) {
  if (tFiber == nullptr)
    misuse("a warp shuffle was called");
  BlockRun& block = *tBlock;
  Fiber& fiber = *tFiber;
  unsigned lane = fiber.linear % kWarpSize, warp = fiber.linear / kWarpSize;
  if (width != int(kWarpSize) || (mask & (1u << lane)) == 0) {
    block.failure = "a warp shuffle with width " + std::to_string(width) + " and mask " + std::to_string(mask) +
                    " (the emulation supports full-warp shuffles by lanes in the mask)";
    leaveFiber();
  }
  block.exchangeSlots[size_t(warp) * kWarpSize + lane] = bits;
  arriveAtWarpBarrier(block, fiber);
  unsigned partner = lane ^ unsigned(laneMask);
  unsigned partnerThread = warp * kWarpSize + partner;
  uint64_t result = bits;
  if (partner < kWarpSize && partnerThread < block.fibers.size()) {
    if (block.fibers[partnerThread].done || (mask & (1u << partner)) == 0) {
      block.failure = "lane " + std::to_string(lane) + " of warp " + std::to_string(warp) +
                      " shuffles with lane " + std::to_string(partner) +
                      ", which has exited or is not in the mask (undefined on the device)";
      leaveFiber();
    }
    result = block.exchangeSlots[partnerThread];
  }
  // Nobody writes a slot again before every lane has read its partner's.
  arriveAtWarpBarrier(block, fiber);
  return result;
}

bool checkLaunch(dim3 grid, dim3 block, std::size_t dynamicSharedBytes) {
  tLastFailure.clear();
  if (tFiber != nullptr) {
    fail(cudaErrorNotSupported, "a kernel launched from inside an emulated kernel");
    return false;
  }
  std::string why;
  if (!validConfiguration(grid, block, dynamicSharedBytes, why)) {
    fail(cudaErrorInvalidConfiguration, "launch: " + why);
    return false;
  }
  return true;
}

void runGrid(dim3 grid, dim3 block, std::size_t dynamicSharedBytes, const std::function<void()>& body) {
  if (!checkLaunch(grid, block, dynamicSharedBytes))
    return;
  ++gLaunches;
  BlockRun run;
  run.body = &body;
  BlockRun* outer = tBlock;
  tBlock = &run;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        gThreads += int64_t(block.x) * block.y * block.z;
        if (!runBlock(run, grid, block, uint3{x, y, z})) {
          tBlock = outer;
          fail(cudaErrorLaunchFailure, "launch: " + run.failure);
          return;
        }
      }
  tBlock = outer;
}

cudaError_t takeLastError() {
  cudaError_t error = tLastError;
  tLastError = cudaSuccess;
  return error;
}

const std::string& lastFailure() { return tLastFailure; }

void setStreamSubmitter(StreamSubmitter submitter) { gStreamSubmitter = submitter; }

void submitToStream(cudaStream_t stream, std::string what, std::function<void()> work) {
  if (stream != nullptr && gStreamSubmitter != nullptr)
    gStreamSubmitter(stream, std::move(what), std::move(work));
  else
    work();
}

std::string describeLaunchConfiguration(dim3 grid, dim3 block, std::size_t sharedBytes) {
  auto dims = [](dim3 d) {
    return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
  };
  return "<<<" + dims(grid) + ", " + dims(block) + ", " + std::to_string(sharedBytes) + ">>>";
}

void countEvictFirstBytes(std::size_t bytes) { gEvictFirstBytes += int64_t(bytes); }

Counters counters() { return Counters{gLaunches.load(), gThreads.load(), gEvictFirstBytes.load()}; }

} // namespace ampjit::emulation
