// What the runtime benchmarks share besides bench/bench_util.h: the optimizer both sides of a
// comparison train with, timing a run of steps, and running a spec with executor processes.
// Threading: called from one thread (RunExecutorRanks calls back on it).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "bench/bench_util.h"
#include "common/subprocess.h"
#include "worker/runtime/launcher.h"
#include "worker/runtime/layers/optimizer.h"
#include "worker/runtime/run_spec.h"

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

// Writes `spec` to `path` and runs it with one deepool-executor process (from this benchmark's
// folder) per rank of its plan, handing every event to `on_event`; the first failure.
inline Status RunExecutorRanks(const worker::RunSpec& spec, const std::string& path, int timeout_s,
                               const worker::RankProcesses::EventCallback& on_event) {
  RETURN_IF_ERROR(worker::WriteRunSpecFile(spec, path));
  worker::LaunchOptions options;
  options.executor_path = SiblingExecutable("deepool-executor");
  options.run_spec_path = path;
  options.world_size = spec.plan.num_devices;
  options.timeout_s = timeout_s;
  ASSIGN_OR_RETURN(auto ranks, worker::RankProcesses::Start(options));
  return ranks->Wait(on_event);
}

}  // namespace deepool::bench
