// Layers on a real GPU (label "gpu"; skipped without one): dropout draws its masks on the host
// into page-locked memory and queues their copy, so a GPU run must apply exactly the masks a CPU
// run does, also when many forwards are queued before anything waits (each queued copy must
// still read its own mask).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <vector>

#include "planner/graph.h"
#include "tests/runtime/gpu_test_util.h"
#include "worker/runtime/layers/layer_module.h"

namespace deepool::worker {
namespace {

std::shared_ptr<LayerModule> Dropout(const planner::Graph& graph) {
  auto module = BuildLayerModule(graph, 0, 9);
  INFO(module.status().ToString());
  REQUIRE(module.ok());
  return std::move(module).value();
}

TEST_CASE("dropout on a GPU applies the CPU's masks, forwards queued", "[gpu][dropout]") {
  if (!testing::HaveGpus(1)) return;
  planner::Layer drop;
  drop.name = "drop";
  drop.op = planner::Op::kDropout;
  drop.inputs = {"input"};
  drop.attrs.p = 0.5;
  auto graph = planner::Graph::Create("test", {3, 64, 64}, {drop}, {});
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  auto on_cpu = Dropout(*graph);
  auto on_gpu = Dropout(*graph);
  on_gpu->to(torch::kCUDA);

  torch::manual_seed(3);
  torch::Tensor x = torch::randn({16, 3, 64, 64});
  torch::Tensor x_gpu = x.to(torch::kCUDA);
  std::vector<torch::Tensor> queued;
  for (int64_t iteration = 0; iteration < 20; ++iteration) {
    on_gpu->set_step({iteration, /*first_sample=*/5});
    // A long kernel ahead keeps the copies queued behind it.
    torch::mm(torch::ones({2048, 2048}, torch::kCUDA), torch::ones({2048, 2048}, torch::kCUDA));
    queued.push_back(on_gpu->Forward({x_gpu}));
  }
  for (int64_t iteration = 0; iteration < 20; ++iteration) {
    on_cpu->set_step({iteration, 5});
    torch::Tensor want = on_cpu->Forward({x});
    INFO("iteration " << iteration);
    CHECK(torch::equal(queued[static_cast<size_t>(iteration)].cpu(), want));
  }
}

}  // namespace
}  // namespace deepool::worker
