// Token models train under burst plans exactly as on one device (issue 41): gpt_tiny (int64 token
// ids in, embeddings, causal multi-head attention, pre-LN blocks, an lm head scored on every
// token) under a hand-made uneven 3-rank plan equals single-device training for 5 SGD steps, and
// so does a variant with dropout on the attention weights, whose masks must not depend on which
// rank holds a sample. vit_tiny (torchvision's VisionTransformer layout: patch conv, flatten and
// transpose, class token, bare position embedding, the class token's output classified) does the
// same on synthetic images.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "tests/runtime/token_data.h"

namespace deepool::worker::testing {
namespace {

planner::Graph GptTiny() {
  auto graph = planner::zoo::BuildModel("gpt_tiny");
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

// gpt_tiny with dropout p on every attention layer's weights.
planner::Graph GptTinyWithAttentionDropout(double p) {
  const planner::Graph base = GptTiny();
  std::vector<planner::Layer> layers = base.layers();
  for (planner::Layer& layer : layers) {
    if (layer.op == planner::Op::kMultiheadAttention) layer.attrs.dropout = p;
  }
  auto graph = planner::Graph::Create("gpt_tiny_dropout", base.input_shape(), std::move(layers),
                                      base.outputs(), base.input_dtype());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

// Every layer's device set by hand: embeddings, attention, MLP and head each on a different set,
// so activations (and the labels of the head) are re-split between almost every pair of layers.
std::map<std::string, std::vector<int>> UnevenGptPlan() {
  return {{"transformer.wte", {0}},
          {"transformer.wpe", {1, 2}},
          {"transformer.h.0.attn", {2}},
          {"transformer.h.0.add_attn", {0, 1}},
          {"transformer.h.0.ln_2", {1}},
          {"transformer.h.0.mlp.c_fc", {0, 2}},
          {"transformer.h.0.mlp.act", {0, 2}},
          {"transformer.h.0.mlp.c_proj", {1, 2}},
          {"transformer.h.0.add_mlp", {0}},
          {"transformer.h.1.ln_1", {2}},
          {"transformer.h.1.attn", {0, 1}},
          {"transformer.h.1.mlp.c_fc", {2}},
          {"transformer.ln_f", {1, 2}},
          {"lm_head", {0, 2}}};
}

constexpr int64_t kBatch = 7;  // 3/2/2 over three ranks, 4/3 over two
constexpr int kIterations = 5;

void RequirePlanMatchesOneDevice(const planner::Graph& graph) {
  torch::set_num_threads(1);
  const int64_t tokens = graph.input_shape().at(0);
  const DataMaker tokens_data = [tokens]() -> StatusOr<std::unique_ptr<DataSource>> {
    return std::unique_ptr<DataSource>(std::make_unique<TokenData>(kBatch, tokens, 256, 31));
  };
  const planner::Plan plan = MakePlan(graph, kBatch, 3, {0, 1, 2}, UnevenGptPlan());
  const TrainResult reference =
      TrainSingleDevice(graph, kBatch, kIterations, Sgd(), 17, tokens_data);
  // The loss starts near ln(256) (uniform predictions over bytes).
  REQUIRE(reference.losses.size() == kIterations);
  CHECK(reference.losses.front() > 4.0);
  RankOptions options;
  options.make_data = tokens_data;
  auto runs = RunRanks(graph, plan, kIterations, Sgd(), 17, 0, FakeComms(3), options);
  RequireMatchesReference(runs, reference, 1e-4, 1e-5);
}

TEST_CASE("gpt_tiny under an uneven 3-rank plan equals one device for 5 SGD steps",
          "[executor][tokens]") {
  RequirePlanMatchesOneDevice(GptTiny());
}

TEST_CASE("gpt_tiny with attention dropout under an uneven 3-rank plan equals one device",
          "[executor][tokens][dropout]") {
  RequirePlanMatchesOneDevice(GptTinyWithAttentionDropout(0.2));
}

// vit_tiny's layers on uneven sets; the class token, the position embedding and the token
// select sit on device sets of their own, so their bare parameters' gradients are averaged over
// sets other than their neighbours'.
std::map<std::string, std::vector<int>> UnevenVitPlan() {
  return {{"conv_proj", {0, 1, 2}},
          {"reshape", {0, 1, 2}},
          {"permute", {1}},
          {"class_token", {0, 2}},
          {"encoder.pos_embedding", {2}},
          {"encoder.layers.encoder_layer_0.self_attention", {0, 1}},
          {"encoder.layers.encoder_layer_0.mlp.0", {2}},
          {"encoder.layers.encoder_layer_1.ln_1", {1, 2}},
          {"encoder.layers.encoder_layer_1.self_attention", {0}},
          {"encoder.ln", {0, 2}},
          {"getitem", {1}},
          {"heads.head", {0, 1, 2}}};
}

TEST_CASE("vit_tiny under an uneven 3-rank plan equals one device for 5 SGD steps",
          "[executor][vit]") {
  torch::set_num_threads(1);
  planner::zoo::ModelOptions options;
  options.num_classes = 10;
  auto graph = planner::zoo::BuildModel("vit_tiny", options);
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  const planner::Plan plan = MakePlan(*graph, kBatch, 3, {0, 1, 2}, UnevenVitPlan());
  const TrainResult reference = TrainSingleDevice(*graph, kBatch, kIterations, Sgd(), 17, 3);
  REQUIRE(reference.losses.size() == kIterations);
  auto runs = RunRanks(*graph, plan, kIterations, Sgd(), 17, 3, FakeComms(3));
  RequireMatchesReference(runs, reference, 1e-4, 1e-5);
}

}  // namespace
}  // namespace deepool::worker::testing
