// Benchmark (a): executor overhead. One rank training a model through the Executor (plan over a
// world of one, Gloo communicator) vs a plain libtorch loop over the same layer modules, data
// and optimizer, one intra-op thread on both sides. Both are built once per case and warmed up;
// then trials alternate between them (each goes first in every other trial) so that load on a
// shared machine hits both alike. Prints, per side, wall and CPU ms per iteration (medians of
// trials) and the ratios executor / plain (medians of the trials' paired ratios). CPU time is
// the process's (all threads), so it counts any work handed to other threads; unlike wall time
// it does not grow while other processes hold the cores.
//   build-*/bin/deepool-bench-executor_overhead [iterations_per_trial] [trials]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/runtime/runtime_bench_util.h"
#include "common/clock.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/communicator_gloo.h"
#include "worker/runtime/data.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/loss.h"
#include "worker/runtime/optimizer.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;

namespace {

using deepool::bench::Check;
using deepool::bench::Median;
using deepool::bench::StepTiming;
using deepool::bench::TimeSteps;
const auto Sgd = deepool::bench::BenchSgd;

// The reference: an idiomatic libtorch loop over the whole graph (forward, mean loss, one
// backward(), step) with the same modules, data and optimizer as the executor.
class PlainLoop {
 public:
  PlainLoop(const dp::Graph& graph, int64_t batch) : graph_(graph), batch_(batch) {
    modules_ = Check(dw::BuildAllLayerModules(graph, 1));
    std::vector<torch::Tensor> params;
    for (auto& module : modules_) {
      module->train();
      for (auto& p : module->parameters()) params.push_back(p);
    }
    optimizer_ = Check(dw::MakeOptimizer(Sgd(), params));
    data_ = Check(dw::MakeDataSource(dw::DataSpec{}, graph, batch));
  }
  void Step(int64_t i) {
    auto b = Check(data_->GlobalBatch(i));
    auto outputs = Check(dw::ForwardGraph(graph_, modules_, b.inputs, dw::StepContext{i, 0}));
    auto loss = dw::LossPart(outputs[0], b.labels, 1.0, batch_);
    optimizer_->zero_grad();
    loss.backward();
    optimizer_->step();
    (void)loss.item<double>();
  }

 private:
  const dp::Graph& graph_;
  int64_t batch_;
  std::vector<std::shared_ptr<dw::LayerModule>> modules_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<dw::DataSource> data_;
};

// The executor on a one-rank data-parallel plan.
class ExecutorLoop {
 public:
  ExecutorLoop(const dp::Graph& graph, int64_t batch, dw::Communicator* comm) {
    plan_ = dp::DataParallelLayout(graph, batch, 1);
    plan_.num_devices = 1;
    data_ = Check(dw::MakeDataSource(dw::DataSpec{}, graph, batch));
    dw::ExecutorOptions options;
    options.seed = 1;
    options.optimizer = Sgd();
    executor_ = Check(dw::Executor::Create(graph, plan_, comm, data_.get(), dw::BuildLayerModule,
                                           options, deepool::SystemClock::Get()));
  }
  void Step(int64_t i) { Check(executor_->Step(i)); }

 private:
  dp::Plan plan_;
  std::unique_ptr<dw::DataSource> data_;
  std::unique_ptr<dw::Executor> executor_;
};

template <typename Loop>
StepTiming TimeLoop(Loop& loop, int iterations, int64_t start) {
  return TimeSteps(iterations, start, [&](int64_t i) { loop.Step(i); });
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 30;
  int trials = 5;
  CLI::App app{
      "Executor overhead: one rank trained through the Executor vs a plain libtorch loop "
      "over the same modules, data and optimizer; wall and CPU ms per iteration"};
  app.add_option("iterations_per_trial", iterations, "iterations per trial")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("trials", trials, "trials, alternating the two sides")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  auto comm = Check(dw::ConnectGloo(dw::CommOptions{}));
  struct Case {
    std::string model;
    int64_t batch;
  };
  std::printf(
      "| model | batch | plain wall ms/iter | executor wall ms/iter | wall ratio | "
      "plain CPU ms/iter | executor CPU ms/iter | CPU ratio |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const Case& c : {Case{"small_cnn", 32}, Case{"small_cnn", 128}, Case{"mlp", 64}}) {
    dp::zoo::ModelOptions model_options;
    model_options.num_classes = 10;
    auto graph = Check(dp::zoo::BuildModel(c.model, model_options));
    PlainLoop plain_loop(graph, c.batch);
    ExecutorLoop executor_loop(graph, c.batch, comm.get());
    TimeLoop(plain_loop, 5, 0);  // warm-up: allocator pages, weights' gradients, momentum
    TimeLoop(executor_loop, 5, 0);
    std::vector<double> plain_wall, executor_wall, wall_ratio, plain_cpu, executor_cpu, cpu_ratio;
    for (int t = 0; t < trials; ++t) {
      int64_t start = 10 + static_cast<int64_t>(t) * iterations;  // same batches on both sides
      StepTiming plain, executor;
      if (t % 2 == 0) {
        plain = TimeLoop(plain_loop, iterations, start);
        executor = TimeLoop(executor_loop, iterations, start);
      } else {
        executor = TimeLoop(executor_loop, iterations, start);
        plain = TimeLoop(plain_loop, iterations, start);
      }
      plain_wall.push_back(plain.wall_ms);
      executor_wall.push_back(executor.wall_ms);
      wall_ratio.push_back(executor.wall_ms / plain.wall_ms);
      plain_cpu.push_back(plain.cpu_ms);
      executor_cpu.push_back(executor.cpu_ms);
      cpu_ratio.push_back(executor.cpu_ms / plain.cpu_ms);
    }
    std::printf("| %s | %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", c.model.c_str(),
                static_cast<long long>(c.batch), Median(plain_wall), Median(executor_wall),
                Median(wall_ratio), Median(plain_cpu), Median(executor_cpu), Median(cpu_ratio));
    std::fflush(stdout);
  }
  return 0;
}
