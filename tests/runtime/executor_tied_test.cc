// Tied parameters (issue 41, point 3): gpt_tiny with lm_head.weight tied to transformer.wte.weight,
// as GPT-2 ties them, trains under an uneven 3-rank plan that puts the two uses on disjoint device
// sets exactly as PyTorch trains one shared tensor: the reference below shares the storage and
// steps it with the sum of both uses' gradients, which is what autograd accumulates into a
// shared nn.Parameter. Both copies are equal after every step. (With the executor's sum of the
// two uses dropped, each copy steps with its own use's gradient and the comparison fails.)
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "tests/runtime/token_data.h"

namespace deepool::worker::testing {
namespace {

constexpr char kTiedKey[] = "lm_head.weight";
constexpr char kSourceKey[] = "transformer.wte.weight";
constexpr int64_t kBatch = 7;
constexpr int kIterations = 5;

planner::Graph TiedGptTiny() {
  auto base = planner::zoo::BuildModel("gpt_tiny");
  REQUIRE(base.ok());
  std::vector<planner::Layer> layers = base->layers();
  for (planner::Layer& layer : layers) {
    if (layer.name == "lm_head") layer.tied.push_back({"weight", kSourceKey});
  }
  auto graph = planner::Graph::Create("gpt_tiny_tied", base->input_shape(), std::move(layers),
                                      base->outputs(), base->input_dtype());
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

DataMaker Tokens(const planner::Graph& graph) {
  const int64_t tokens = graph.input_shape().at(0);
  return [tokens]() -> StatusOr<std::unique_ptr<DataSource>> {
    return std::unique_ptr<DataSource>(std::make_unique<TokenData>(kBatch, tokens, 256, 31));
  };
}

// PyTorch's training of a tied model on one device: lm_head's weight is wte's storage, and the
// one tensor steps with the sum of both uses' gradients.
TrainResult TrainTiedReference(const planner::Graph& graph, const OptimizerSpec& optimizer) {
  auto modules = BuildAllLayerModules(graph, 17);
  REQUIRE(modules.ok());
  const int tied_id = *graph.FindLayer("lm_head");
  const int source_id = *graph.FindLayer("transformer.wte");
  torch::Tensor tied = (*modules)[static_cast<size_t>(tied_id)]->named_parameters()["weight"];
  torch::Tensor source = (*modules)[static_cast<size_t>(source_id)]->named_parameters()["weight"];
  REQUIRE(torch::equal(tied, source));  // the copies start equal
  {
    torch::NoGradGuard no_grad;
    tied.set_(source);
  }
  std::vector<torch::Tensor> params;  // the shared tensor once, as nn.Module.parameters() has it
  for (auto& module : *modules) {
    module->train();
    for (auto& p : module->parameters()) {
      if (!p.is_same(tied)) params.push_back(p);
    }
  }
  auto opt = MakeOptimizer(optimizer, params);
  REQUIRE(opt.ok());
  auto data = Tokens(graph)();
  REQUIRE(data.ok());
  TrainResult result;
  for (int i = 0; i < kIterations; ++i) {
    auto batch = (*data)->GlobalBatch(i);
    REQUIRE(batch.ok());
    auto outputs = ForwardGraph(graph, *modules, batch->inputs, StepContext{i, 0});
    REQUIRE(outputs.ok());
    torch::Tensor loss = LossPart(outputs->front(), batch->labels, 1.0, kBatch);
    (*opt)->zero_grad();
    tied.mutable_grad() = torch::Tensor();
    loss.backward();
    source.mutable_grad().add_(tied.grad());
    // The shared tensor counts once in the norm, as in torch (params holds it once).
    if (optimizer.clip_grad_norm > 0)
      torch::nn::utils::clip_grad_norm_(params, optimizer.clip_grad_norm);
    (*opt)->step();
    result.losses.push_back(loss.item<double>());
  }
  for (size_t id = 0; id < modules->size(); ++id) {
    for (const auto& item : (*modules)[id]->named_parameters()) {
      result.params[graph.layer(static_cast<int>(id)).name + "." + item.key()] =
          item.value().detach().clone();
    }
  }
  REQUIRE(torch::equal(result.params.at(kTiedKey), result.params.at(kSourceKey)));
  return result;
}

// Records each rank's copies of the tied parameter after every step.
struct CopiesPerStep {
  std::mutex mutex;
  std::map<int, std::vector<torch::Tensor>> by_step;  // step -> every copy held after it
  std::function<Status(int, int, Executor&)> Recorder() {
    return [this](int, int done, Executor& executor) {
      for (const auto& [name, tensor] : executor.NamedParameters()) {
        if (name != kTiedKey && name != kSourceKey) continue;
        std::lock_guard<std::mutex> lock(mutex);
        by_step[done].push_back(tensor.detach().clone());
      }
      return Status::Ok();
    };
  }
};

void RequireTiedTrainingMatches(const planner::Plan& plan, const OptimizerSpec& optimizer) {
  torch::set_num_threads(1);
  const planner::Graph graph = TiedGptTiny();
  const TrainResult reference = TrainTiedReference(graph, optimizer);
  CopiesPerStep copies;
  RankOptions options;
  options.make_data = Tokens(graph);
  options.after_step = copies.Recorder();
  auto runs =
      RunRanks(graph, plan, kIterations, optimizer, 17, 0, FakeComms(plan.num_devices), options);
  RequireMatchesReference(runs, reference, 1e-5, 1e-5);
  REQUIRE(copies.by_step.size() == kIterations);
  for (const auto& [step, held] : copies.by_step) {
    INFO("after step " << step);
    REQUIRE(held.size() >= 2);
    for (const auto& copy : held) REQUIRE(torch::equal(copy, held.front()));
  }
}

TEST_CASE("A tied gpt_tiny under an uneven 3-rank plan trains as one shared tensor",
          "[executor][tied]") {
  const planner::Graph graph = TiedGptTiny();
  // wte on rank 0 alone, lm_head on ranks 1 and 2: the uses share no device.
  const planner::Plan plan = MakePlan(graph, kBatch, 3, {0, 1, 2},
                                      {{"transformer.wte", {0}},
                                       {"transformer.wpe", {1, 2}},
                                       {"transformer.h.0.attn", {2}},
                                       {"transformer.h.0.mlp.c_fc", {0, 2}},
                                       {"transformer.h.1.attn", {0, 1}},
                                       {"transformer.ln_f", {1, 2}},
                                       {"lm_head", {1, 2}}});
  RequireTiedTrainingMatches(plan, Sgd());
}

TEST_CASE("A tied gpt_tiny in a burst plan trains as one shared tensor", "[executor][tied]") {
  const planner::Graph graph = TiedGptTiny();
  // The burst: wte on all three ranks, lm_head on two of them; the rest on rank 0.
  const planner::Plan plan =
      MakePlan(graph, kBatch, 3, {0}, {{"transformer.wte", {0, 1, 2}}, {"lm_head", {1, 2}}});
  RequireTiedTrainingMatches(plan, Sgd());
}

TEST_CASE("A tied gpt_tiny under an uneven 3-rank plan with clipping counts the tie once",
          "[executor][tied][recipes]") {
  const planner::Graph graph = TiedGptTiny();
  const planner::Plan plan =
      MakePlan(graph, kBatch, 3, {0, 1, 2},
               {{"transformer.wte", {0}}, {"transformer.h.0.attn", {2}}, {"lm_head", {1, 2}}});
  OptimizerSpec clipped = Sgd();
  clipped.clip_grad_norm = 0.05;
  RequireTiedTrainingMatches(plan, clipped);
}

TEST_CASE("A tied gpt_tiny on one rank trains as one shared tensor", "[executor][tied]") {
  const planner::Graph graph = TiedGptTiny();
  RequireTiedTrainingMatches(MakePlan(graph, kBatch, 1, {0}), Sgd());
}

}  // namespace
}  // namespace deepool::worker::testing
