#include "GpuTestUtil.h"
