// What the runtime benchmarks share besides bench/bench_util.h: the optimizer both sides of a
// comparison train with. Threading: pure functions.
#pragma once

#include "bench/bench_util.h"
#include "worker/runtime/optimizer.h"

namespace deepool::bench {

// SGD with momentum: the optimizer of the executor-vs-loop comparisons.
inline worker::OptimizerSpec BenchSgd() {
  worker::OptimizerSpec spec;
  spec.lr = 0.01;
  spec.momentum = 0.9;
  return spec;
}

}  // namespace deepool::bench
