// Filled in by the UpdateKernelTest work.
#include "GpuTestUtil.h"
