// tests/gpu/CudnnKernelTest.cpp against the CUDA backend itself on the
// emulated runtime (GpuTestUtil.h), as EmulatedBackendTest.*: its
// convolutions and batch norms go through Cudnn.cpp into the host model of
// cuDNN (tests/emulation/EmulatedCudnn.h), its pooling through the backend's
// streams and graphs.
#define AMPJIT_GPU_TESTS_ON_EMULATED_RUNTIME
#include "CudnnKernelTest.cpp"
