// tests/gpu/GemmKernelTest.cpp a second time, against the CUDA backend
// itself on the emulated runtime (GpuTestUtil.h), as EmulatedBackendTest.*:
// its GEMMs then go through the backend's workspace, streams and graphs, not
// the plan-level executor's null stream.
#define AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
#include "GemmKernelTest.cpp"
