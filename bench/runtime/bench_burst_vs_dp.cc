// Benchmark (c): on CPU ranks (one deepool-executor process per rank, Gloo on loopback, one
// intra-op thread each), iteration time and summed busy time of a burst plan vs data
// parallelism for small_cnn. The burst plan keeps the convolutional body on all ranks and runs
// the narrow tail (avgpool, flatten, fc) on rank 0 alone.
//   build-*/bin/deepool-bench-burst_vs_dp [ranks] [global_batch] [iterations]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "bench/runtime/runtime_bench_util.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/run_spec.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;
namespace fs = std::filesystem;

namespace {

struct Summary {
  double iteration_ms = 0;  // mean over measured iterations of the slowest rank's time
  double busy_ms = 0;       // mean over measured iterations of busy time summed over ranks
  double idle_ms = 0;       // likewise, idle
  double final_loss = 0;
};

Summary Run(const dw::RunSpec& spec, const std::string& name, int warmup) {
  std::string pattern = (fs::temp_directory_path() / "deepool-bench-XXXXXX").string();
  if (!mkdtemp(pattern.data())) std::exit(1);
  std::map<int64_t, double> slowest, busy, idle;
  double loss = 0;
  const deepool::Status status = deepool::bench::RunExecutorRanks(
      spec, (fs::path(pattern) / (name + ".json")).string(), 60,
      [&](int, const deepool::protocol::ExecutorEvent& e) {
        const auto* event = std::get_if<deepool::protocol::IterationEvent>(&e);
        if (!event) return;
        const int64_t i = event->iteration;
        if (event->loss) loss = *event->loss;
        if (i < warmup) return;
        slowest[i] = std::max(slowest[i], event->iteration_ms);
        busy[i] += event->busy_ms;
        idle[i] += event->idle_ms;
      });
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    std::exit(1);
  }
  Summary summary;
  for (auto& [i, ms] : slowest) {
    summary.iteration_ms += ms / slowest.size();
    summary.busy_ms += busy[i] / slowest.size();
    summary.idle_ms += idle[i] / slowest.size();
  }
  summary.final_loss = loss;
  fs::remove_all(pattern);
  return summary;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 4;
  int64_t batch = 32;
  int64_t iterations = 20;
  CLI::App app{
      "Burst plan vs data parallelism for small_cnn on CPU ranks (one deepool-executor "
      "process per rank, Gloo on loopback): iteration time and summed busy time"};
  app.add_option("ranks", ranks, "rank processes")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("global_batch", batch, "global batch")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("iterations", iterations, "measured iterations")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);
  const int warmup = 3;
  setenv("OMP_NUM_THREADS", "1", 1);  // one intra-op thread per rank process
  dp::zoo::ModelOptions model_options;
  model_options.num_classes = 10;
  auto graph = dp::zoo::BuildModel("small_cnn", model_options);
  if (!graph.ok()) return 1;
  dw::RunSpec spec;
  spec.job_id = "bench";
  spec.graph = std::make_shared<const dp::Graph>(std::move(graph).value());
  spec.iterations = iterations;
  spec.optimizer.momentum = 0.9;

  spec.plan = dp::DataParallelLayout(*spec.graph, batch, ranks);
  spec.plan.num_devices = ranks;
  Summary dp_summary = Run(spec, "dp", warmup);

  for (auto& placement : spec.plan.layers) {
    if (placement.layer == "avgpool" || placement.layer == "flatten" || placement.layer == "fc") {
      placement.devices = {0};
      placement.samples = {batch};
    }
  }
  Summary burst = Run(spec, "burst", warmup);

  std::printf(
      "| plan (small_cnn, %d CPU ranks, batch %lld) | iteration ms | summed busy ms | "
      "summed idle ms | loss after %lld it. |\n|---|---|---|---|---|\n",
      ranks, static_cast<long long>(batch), static_cast<long long>(iterations));
  std::printf("| data parallel | %.2f | %.2f | %.2f | %.4f |\n", dp_summary.iteration_ms,
              dp_summary.busy_ms, dp_summary.idle_ms, dp_summary.final_loss);
  std::printf("| burst (tail on rank 0) | %.2f | %.2f | %.2f | %.4f |\n", burst.iteration_ms,
              burst.busy_ms, burst.idle_ms, burst.final_loss);
  std::printf("| ratio burst / data parallel | %.3f | %.3f | | |\n",
              burst.iteration_ms / dp_summary.iteration_ms, burst.busy_ms / dp_summary.busy_ms);
  return 0;
}
