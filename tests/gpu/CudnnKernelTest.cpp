// Filled in by the CudnnKernelTest work.
#include "GpuTestUtil.h"
