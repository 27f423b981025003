// For [gpu] tests: whether enough CUDA devices are visible. When not, the test warns "skipped:
// needs ..." and returns early; CTest reports such a test as skipped (tests/CMakeLists.txt).
#pragma once

#include <torch/cuda.h>

#include <catch2/catch.hpp>

namespace deepool::worker::testing {

inline int VisibleGpus() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

inline bool HaveGpus(int needed) {
  const int visible = VisibleGpus();
  if (visible >= needed) return true;
  WARN("skipped: needs " << needed << " CUDA device(s), " << visible << " visible");
  return false;
}

}  // namespace deepool::worker::testing
