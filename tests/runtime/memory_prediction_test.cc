// The planner's memory model (planner/memory_model.h) against what one CPU rank's training
// really takes: the process's peak resident set (VmHWM, reset through /proc/self/clear_refs
// before the run) less its resident set before the rank was built, over two SGD steps with
// momentum. The tolerance is what these models measured (docs/benchmarks.md, "Memory: the
// model against a CPU rank's peak").
#include <malloc.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "planner/memory_model.h"
#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/devices/device.h"

namespace deepool::worker::testing {
namespace {

namespace zoo = planner::zoo;

// A /proc/self/status figure in bytes ("VmRSS", "VmHWM"), or -1 where there is none.
int64_t ProcStatusBytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return -1;
}

// Resets VmHWM to the current resident set.
void ResetPeakResident() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

struct Footprint {
  int64_t predicted = 0;
  int64_t measured = 0;
  double ratio() const { return static_cast<double>(measured) / static_cast<double>(predicted); }
};

Footprint TrainOneRank(const planner::Graph& graph, int64_t batch) {
  const planner::Plan plan = planner::DataParallelLayout(graph, batch, 1);
  planner::MemoryModelOptions options;
  options.optimizer = planner::OptimizerMemory::kSgdMomentum;
  const planner::MemoryModel model(graph, batch, options);
  Footprint footprint;
  footprint.predicted = model.PerDevice(plan).front().total();
  // Freed memory glibc still holds (an earlier case's) would be reused by this run and hide
  // from the peak less the baseline: hand it back first.
  malloc_trim(0);
  ResetPeakResident();
  const int64_t before = ProcStatusBytes("VmRSS");
  const std::vector<RankRun> runs = RunRanks(graph, plan, 2, Sgd(), 1, 2, FakeComms(1));
  const int64_t peak = ProcStatusBytes("VmHWM");
  REQUIRE(runs.front().status.ok());
  REQUIRE(before > 0);
  footprint.measured = peak - before;
  return footprint;
}

// Activations dominate: an MLP of 2048 -> 1024 -> 1024 -> 10 at batch 4096.
planner::Graph WideMlp() {
  zoo::LayerListBuilder b;
  std::string x = b.Linear("fc1", "input", 2048, 1024);
  x = b.Relu("relu1", x);
  x = b.Linear("fc2", x, 1024, 1024);
  x = b.Relu("relu2", x);
  x = b.Linear("fc3", x, 1024, 10);
  return BuildGraph("wide_mlp", {2048}, std::move(b), x);
}

// Convolutions on 64x64 images: conv 3->32, relu, max pool, conv 32->64, relu, pool, linear.
planner::Graph ConvNet() {
  zoo::LayerListBuilder b;
  std::string x = b.Conv2d("conv1", "input", zoo::ConvSpec(3, 32, zoo::Sq(3)).Padding(zoo::Sq(1)));
  x = b.Relu("relu1", x);
  x = b.MaxPool2d("pool1", x, zoo::Sq(2), zoo::Sq(2));
  x = b.Conv2d("conv2", x, zoo::ConvSpec(32, 64, zoo::Sq(3)).Padding(zoo::Sq(1)));
  x = b.Relu("relu2", x);
  x = b.AdaptiveAvgPool2d("pool2", x, zoo::Sq(1));
  x = b.Flatten("flatten", x);
  x = b.Linear("fc", x, 64, 10);
  return BuildGraph("conv_net", {3, 64, 64}, std::move(b), x);
}

TEST_CASE("The memory model predicts a CPU rank's peak memory") {
  const Footprint mlp = TrainOneRank(WideMlp(), 4096);
  const Footprint conv = TrainOneRank(ConvNet(), 128);
  WARN("wide_mlp B=4096: predicted " << planner::GiBString(mlp.predicted) << ", measured "
                                     << planner::GiBString(mlp.measured) << ", ratio "
                                     << mlp.ratio());
  WARN("conv_net B=128: predicted " << planner::GiBString(conv.predicted) << ", measured "
                                    << planner::GiBString(conv.measured) << ", ratio "
                                    << conv.ratio());
  // Measured on the 2-core VM (2026-12-05): 1.53 and 0.88. The MLP's excess is the host side
  // of a CPU rank that the model leaves out (the data source's global batch, 32 MiB here, the
  // allocator's slack); the convolutions' shortfall is the im2col workspace oneDNN does not take.
  CHECK(mlp.ratio() > 0.7);
  CHECK(mlp.ratio() < 1.7);
  CHECK(conv.ratio() > 0.7);
  CHECK(conv.ratio() < 1.7);
}

// After the prediction case, whose measurement its 64 MiB would disturb (glibc keeps freed
// memory).
TEST_CASE("A CPU rank's peak memory is the process's peak resident set") {
  ResetPeakResident();
  const int64_t before = PeakMemoryBytes(torch::kCPU);
  REQUIRE(before > 0);
  CHECK(before == ProcStatusBytes("VmHWM"));
  {
    torch::Tensor touched = torch::ones({64 << 20}, torch::kUInt8);  // 64 MiB, written
    CHECK(PeakMemoryBytes(torch::kCPU) >= ProcStatusBytes("VmRSS"));
  }
  CHECK(PeakMemoryBytes(torch::kCPU) >= before + (64 << 20) / 2);
}

}  // namespace
}  // namespace deepool::worker::testing
