// What the runtime benchmarks share besides bench/bench_util.h: the optimizer both sides of a
// comparison train with, and timing a run of steps. Threading: pure functions.
#pragma once

#include <chrono>
#include <cstdint>

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

struct StepTiming {
  double wall_ms = 0;  // per step
  double cpu_ms = 0;   // the process's, per step
};

// Times step(start), ..., step(start + steps - 1).
template <typename Step>
StepTiming TimeSteps(int steps, int64_t start, Step&& step) {
  const double cpu_begin = ProcessCpuMs();
  const auto begin = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step(start + i);
  StepTiming timing;
  timing.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count() /
      steps;
  timing.cpu_ms = (ProcessCpuMs() - cpu_begin) / steps;
  return timing;
}

}  // namespace deepool::bench
