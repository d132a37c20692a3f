// Filled in by the NumericKernelTest work.
#include "GpuTestUtil.h"
