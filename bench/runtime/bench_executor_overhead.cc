// Benchmark (a): executor overhead. One rank training a model through the Executor (plan over a
// world of one, Gloo communicator) vs a plain libtorch loop over the same layer modules, data
// and optimizer. Prints ms per iteration (median of trials) and the ratio executor / plain.
//   build-*/bin/deepool-bench-executor_overhead [iterations_per_trial] [trials]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/clock.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/communicator_gloo.h"
#include "worker/runtime/data.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/loss.h"
#include "worker/runtime/optimizer.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;
using Ms = std::chrono::duration<double, std::milli>;

namespace {

template <typename T>
T Check(deepool::StatusOr<T> value) {
  if (!value.ok()) {
    std::fprintf(stderr, "error: %s\n", value.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(value).value();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

dw::OptimizerSpec Sgd() {
  dw::OptimizerSpec spec;
  spec.lr = 0.01;
  spec.momentum = 0.9;
  return spec;
}

// ms per iteration of a plain loop: forward the whole graph, mean loss, backward, step.
double PlainLoop(const dp::Graph& graph, int64_t batch, int iterations, int64_t start) {
  auto modules = Check(dw::BuildAllLayerModules(graph, 1));
  std::vector<torch::Tensor> params;
  for (auto& module : modules) {
    module->train();
    for (auto& p : module->parameters()) params.push_back(p);
  }
  auto optimizer = Check(dw::MakeOptimizer(Sgd(), params));
  auto data = Check(dw::MakeDataSource(dw::DataSpec{}, graph, batch));
  auto run = [&](int64_t i) {
    auto b = Check(data->GlobalBatch(i));
    auto outputs = Check(dw::ForwardGraph(graph, modules, b.inputs, dw::StepContext{i, 0}));
    auto loss = dw::LossPart(outputs[0], b.labels, 1.0, batch);
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
    (void)loss.item<double>();
  };
  for (int i = 0; i < 3; ++i) run(start + i);  // warm-up
  auto begin = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) run(start + 3 + i);
  return Ms(std::chrono::steady_clock::now() - begin).count() / iterations;
}

double ExecutorLoop(const dp::Graph& graph, int64_t batch, int iterations, int64_t start,
                    dw::Communicator* comm) {
  auto plan = dp::DataParallelLayout(graph, batch, 1);
  plan.num_devices = 1;
  auto data = Check(dw::MakeDataSource(dw::DataSpec{}, graph, batch));
  dw::ExecutorOptions options;
  options.seed = 1;
  options.optimizer = Sgd();
  auto executor = Check(dw::Executor::Create(graph, plan, comm, data.get(), dw::BuildLayerModule,
                                             options, deepool::SystemClock::Get()));
  for (int i = 0; i < 3; ++i) Check(executor->Step(start + i));
  auto begin = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) Check(executor->Step(start + 3 + i));
  return Ms(std::chrono::steady_clock::now() - begin).count() / iterations;
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = argc > 1 ? std::atoi(argv[1]) : 30;
  int trials = argc > 2 ? std::atoi(argv[2]) : 5;
  torch::set_num_threads(1);
  auto comm = Check(dw::ConnectGloo(dw::CommOptions{}));
  struct Case {
    std::string model;
    int64_t batch;
  };
  std::printf("| model | batch | plain libtorch ms/iter | executor ms/iter | ratio |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const Case& c : {Case{"small_cnn", 32}, Case{"small_cnn", 128}, Case{"mlp", 64}}) {
    dp::zoo::ModelOptions model_options;
    model_options.num_classes = 10;
    auto graph = Check(dp::zoo::BuildModel(c.model, model_options));
    std::vector<double> plain, executor;
    // Interleave the two so that machine noise hits both alike.
    for (int t = 0; t < trials; ++t) {
      plain.push_back(PlainLoop(graph, c.batch, iterations, t * 1000));
      executor.push_back(ExecutorLoop(graph, c.batch, iterations, t * 1000, comm.get()));
    }
    double p = Median(plain), e = Median(executor);
    std::printf("| %s | %lld | %.3f | %.3f | %.3f |\n", c.model.c_str(),
                static_cast<long long>(c.batch), p, e, e / p);
  }
  return 0;
}
