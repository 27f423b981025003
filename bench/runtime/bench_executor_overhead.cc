// Benchmark (a): executor overhead. One rank training a model through the Executor (plan over a
// world of one, Gloo communicator) vs a plain libtorch loop over the same layer modules, data
// and optimizer, one intra-op thread on both sides. Both are built once per case and warmed up;
// then trials alternate between them (each goes first in every other trial) so that load on a
// shared machine hits both alike. Prints, per side, wall and CPU ms per iteration (medians of
// trials) and the ratios executor / plain (medians of the trials' paired ratios). CPU time is
// the process's (all threads), so it counts any work handed to other threads; unlike wall time
// it does not grow while other processes hold the cores.
// With --device cuda the same comparison runs on one GPU (NCCL communicator, as deepool-executor
// uses there), on larger models: each side's iteration ends when the GPU has finished it (the
// plain loop reads its loss, the executor synchronises its stream), both sides' batches are
// made ahead on a prefetch thread into pinned memory (as deepool-executor's are), and the CPU
// column is the host's work per iteration, all threads counted. On CUDA a third side, the
// executor fed pageable batches (its copy to the device then waits for the queued kernels),
// alternates with the other two: the last column is pinned / pageable executor wall time.
//   build-*/bin/deepool-bench-executor_overhead [iterations_per_trial] [trials] [--device D]
//       [--case MODEL:BATCH ...] [--image-size N] [--num-classes N]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/runtime/runtime_bench_util.h"
#include "common/clock.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/communication/communicator_gloo.h"
#include "worker/runtime/communication/communicator_nccl.h"
#include "worker/runtime/data/data.h"
#include "worker/runtime/devices/device.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/layers/loss.h"
#include "worker/runtime/layers/optimizer.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;

namespace {

using deepool::bench::Check;
using deepool::bench::Median;
using deepool::bench::StepTiming;
using deepool::bench::TimeSteps;
const auto Sgd = deepool::bench::BenchSgd;

// Synthetic batches; on CUDA made ahead on a prefetch thread, into `memory` (deepool-executor's
// is pinned), so that no side waits for the CPU to make them.
std::unique_ptr<dw::DataSource> MakeData(const dp::Graph& graph, int64_t batch,
                                         torch::Device device,
                                         dw::HostMemory memory = dw::HostMemory::kPinned) {
  auto data = Check(dw::MakeDataSource(dw::DataSpec{}, graph, batch));
  return device.is_cuda() ? dw::WithPrefetch(std::move(data), memory) : std::move(data);
}

// The reference: an idiomatic libtorch loop over the whole graph (forward, the outputs' weighted
// mean losses, one backward(), step) with the same modules, data and optimizer as the executor.
// Reading the loss ends the iteration on the device too.
class PlainLoop {
 public:
  PlainLoop(const dp::Graph& graph, int64_t batch, torch::Device device)
      : graph_(graph), batch_(batch), device_(device) {
    modules_ = Check(dw::BuildAllLayerModules(graph, 1));
    std::vector<torch::Tensor> params;
    for (auto& module : modules_) {
      module->to(device);
      module->train();
      for (auto& p : module->parameters()) params.push_back(p);
    }
    optimizer_ = Check(dw::MakeOptimizer(Sgd(), params));
    data_ = MakeData(graph, batch, device);
  }
  void Step(int64_t i) {
    auto b = Check(data_->GlobalBatch(i));
    auto inputs = b.inputs.to(device_, /*non_blocking=*/device_.is_cuda());  // pinned
    auto labels = b.labels.to(device_, /*non_blocking=*/device_.is_cuda());
    auto outputs = Check(dw::ForwardGraph(graph_, modules_, inputs, dw::StepContext{i, 0}));
    torch::Tensor loss;
    for (size_t o = 0; o < outputs.size(); ++o) {
      auto part = dw::LossPart(outputs[o], labels, graph_.outputs()[o].loss_weight, batch_);
      loss = loss.defined() ? loss + part : part;
    }
    optimizer_->zero_grad();
    loss.backward();
    optimizer_->step();
    (void)loss.item<double>();
  }

 private:
  const dp::Graph& graph_;
  int64_t batch_;
  torch::Device device_;
  std::vector<std::shared_ptr<dw::LayerModule>> modules_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<dw::DataSource> data_;
};

// The executor on a one-rank data-parallel plan.
class ExecutorLoop {
 public:
  ExecutorLoop(const dp::Graph& graph, int64_t batch, dw::Communicator* comm,
               dw::DeviceContext* device, dw::HostMemory memory = dw::HostMemory::kPinned) {
    plan_ = dp::DataParallelLayout(graph, batch, 1);
    plan_.num_devices = 1;
    data_ = MakeData(graph, batch, device->device(), memory);
    dw::ExecutorOptions options;
    options.seed = 1;
    options.optimizer = Sgd();
    options.device = device->device();
    if (options.device.is_cuda()) options.synchronize = [device] { device->Synchronize(); };
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

struct Case {
  std::string model;
  int64_t batch;
};

// "MODEL:BATCH", e.g. "resnet50:32".
Case ParseCase(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0) {
    std::fprintf(stderr, "--case %s: expected MODEL:BATCH, e.g. resnet50:32\n", text.c_str());
    std::exit(2);
  }
  const std::string batch = text.substr(colon + 1);
  char* end = nullptr;
  const long long value = std::strtoll(batch.c_str(), &end, 10);
  if (batch.empty() || *end != '\0' || value < 1) {
    std::fprintf(stderr, "--case %s: the batch must be a positive integer\n", text.c_str());
    std::exit(2);
  }
  return Case{text.substr(0, colon), value};
}

// One GPU: NCCL, as deepool-executor uses on CUDA; CPU: Gloo. A world of one sends nothing.
std::unique_ptr<dw::Communicator> ConnectOneRank(const dw::DeviceSpec& device) {
  if (device.cuda) return Check(dw::ConnectNccl(dw::CommOptions{}));
  return Check(dw::ConnectGloo(dw::CommOptions{}));
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 30;
  int trials = 5;
  std::string device_text = "cpu";
  std::vector<std::string> case_texts;
  int64_t image_size = 0;
  int64_t num_classes = 0;
  CLI::App app{
      "Executor overhead: one rank trained through the Executor vs a plain libtorch loop "
      "over the same modules, data and optimizer; wall and CPU ms per iteration"};
  app.add_option("iterations_per_trial", iterations, "iterations per trial")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("trials", trials, "trials, alternating the two sides")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--device", device_text, "cpu, cuda or cuda:K")->capture_default_str();
  app.add_option("--case", case_texts,
                 "MODEL:BATCH, repeatable (default: small_cnn:32 small_cnn:128 mlp:64 on CPU; "
                 "vgg16:32 resnet50:32 inception_v3:32 wide_resnet101_2:16 on CUDA)");
  app.add_option("--image-size", image_size, "input height and width (0: the model's default)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  app.add_option("--num-classes", num_classes, "classes (0: 10 on CPU, 1000 on CUDA)")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  CLI11_PARSE(app, argc, argv);
  const dw::DeviceSpec device = Check(dw::ParseDevice(device_text));
  auto context = Check(dw::MakeDeviceContext(device));
  if (!device.cuda) torch::set_num_threads(1);
  std::vector<Case> cases;
  for (const std::string& text : case_texts) cases.push_back(ParseCase(text));
  if (cases.empty() && device.cuda) {
    cases = {{"vgg16", 32}, {"resnet50", 32}, {"inception_v3", 32}, {"wide_resnet101_2", 16}};
  } else if (cases.empty()) {
    cases = {{"small_cnn", 32}, {"small_cnn", 128}, {"mlp", 64}};
  }
  if (num_classes == 0) num_classes = device.cuda ? 1000 : 10;
  auto comm = ConnectOneRank(device);
  std::printf("device %s\n", device.ToString().c_str());
  std::printf(
      "| model | batch | plain wall ms/iter | executor wall ms/iter | wall ratio | "
      "plain CPU ms/iter | executor CPU ms/iter | CPU ratio |%s\n",
      device.cuda ? " executor, pageable batches, wall ms/iter | pinned / pageable |" : "");
  std::printf("|---|---|---|---|---|---|---|---|%s\n", device.cuda ? "---|---|" : "");
  for (const Case& c : cases) {
    dp::zoo::ModelOptions model_options;
    model_options.num_classes = num_classes;
    model_options.image_size = image_size;
    auto graph = Check(dp::zoo::BuildModel(c.model, model_options));
    PlainLoop plain_loop(graph, c.batch, context->device());
    ExecutorLoop executor_loop(graph, c.batch, comm.get(), context.get());
    std::optional<ExecutorLoop> pageable_loop;
    if (device.cuda) {
      pageable_loop.emplace(graph, c.batch, comm.get(), context.get(), dw::HostMemory::kPageable);
    }
    TimeLoop(plain_loop, 5, 0);  // warm-up: allocator pages, weights' gradients, momentum
    TimeLoop(executor_loop, 5, 0);
    if (pageable_loop) TimeLoop(*pageable_loop, 5, 0);
    std::vector<double> plain_wall, executor_wall, wall_ratio, plain_cpu, executor_cpu, cpu_ratio;
    std::vector<double> pageable_wall, pinned_ratio;
    for (int t = 0; t < trials; ++t) {
      int64_t start = 10 + static_cast<int64_t>(t) * iterations;  // same batches on every side
      StepTiming plain, executor, pageable;
      // Each side takes each place in the order in turn.
      std::vector<std::function<void()>> sides = {
          [&] { plain = TimeLoop(plain_loop, iterations, start); },
          [&] { executor = TimeLoop(executor_loop, iterations, start); }};
      if (pageable_loop) {
        sides.push_back([&] { pageable = TimeLoop(*pageable_loop, iterations, start); });
      }
      std::rotate(sides.begin(), sides.begin() + t % static_cast<int>(sides.size()), sides.end());
      for (const auto& side : sides) side();
      if (pageable_loop) {
        pageable_wall.push_back(pageable.wall_ms);
        pinned_ratio.push_back(executor.wall_ms / pageable.wall_ms);
      }
      plain_wall.push_back(plain.wall_ms);
      executor_wall.push_back(executor.wall_ms);
      wall_ratio.push_back(executor.wall_ms / plain.wall_ms);
      plain_cpu.push_back(plain.cpu_ms);
      executor_cpu.push_back(executor.cpu_ms);
      cpu_ratio.push_back(executor.cpu_ms / plain.cpu_ms);
    }
    std::printf("| %s | %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |", c.model.c_str(),
                static_cast<long long>(c.batch), Median(plain_wall), Median(executor_wall),
                Median(wall_ratio), Median(plain_cpu), Median(executor_cpu), Median(cpu_ratio));
    if (pageable_loop) std::printf(" %.3f | %.3f |", Median(pageable_wall), Median(pinned_ratio));
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
