// Layer modules built from the IR: output shapes agree with the IR's inference for every op and
// every zoo model layer, parameter counts agree, weights are deterministic in (seed, layer name),
// and dropout masks do not depend on how the batch is split.
#include "worker/runtime/layers/layer_module.h"

#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "planner/graph.h"
#include "planner/zoo/zoo.h"
#include "tests/unit/test_layers.h"

namespace deepool::worker {
namespace {

using deepool::testing::MakeLayer;

using planner::Graph;
using planner::Layer;
using planner::LayerAttrs;
using planner::Op;
using planner::Shape;

Graph MustCreate(Shape input, std::vector<Layer> layers,
                 std::vector<planner::GraphOutput> outputs = {}) {
  auto graph = Graph::Create("test", std::move(input), std::move(layers), std::move(outputs));
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

std::vector<int64_t> Batched(int64_t batch, const Shape& shape) {
  std::vector<int64_t> out{batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

int64_t ParameterCount(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters()) count += p.numel();
  return count;
}

// Runs every layer of `graph` on its own, on random inputs of the IR's input shapes, and checks
// the output shape and the parameter count against the IR.
void CheckEveryLayerAgainstIr(const Graph& graph, int64_t batch, bool training) {
  torch::NoGradGuard no_grad;
  auto modules = BuildAllLayerModules(graph, 7);
  INFO(modules.status().ToString());
  REQUIRE(modules.ok());
  torch::manual_seed(0);
  std::vector<torch::Tensor> outputs(static_cast<size_t>(graph.num_layers()));
  torch::Tensor input =
      graph.input_dtype() == planner::DType::kInt64
          ? torch::randint(0, 4, Batched(batch, graph.input_shape()), torch::kLong)
          : torch::randn(Batched(batch, graph.input_shape()));
  for (int id = 0; id < graph.num_layers(); ++id) {
    const Layer& layer = graph.layer(id);
    INFO("layer " << layer.name << " (" << planner::OpName(layer.op) << ")");
    auto& module = (*modules)[static_cast<size_t>(id)];
    module->train(training);
    std::vector<torch::Tensor> inputs;
    for (int in : layer.input_ids) {
      inputs.push_back(in == planner::kGraphInputId ? input : outputs[static_cast<size_t>(in)]);
    }
    torch::Tensor out = module->Forward(inputs);
    CHECK(out.sizes().vec() == Batched(batch, layer.output_shape));
    CHECK(ParameterCount(*module) == layer.params);
    outputs[static_cast<size_t>(id)] = out;
  }
}

TEST_CASE("every op builds a module whose output shape and parameters match the IR", "[layers]") {
  LayerAttrs conv;
  conv.out_channels = 6;
  conv.kernel_size = {3, 2};
  conv.stride = {2, 1};
  conv.padding = {1, 0};
  conv.dilation = {1, 2};
  conv.groups = 2;
  LayerAttrs conv_nobias = conv;
  conv_nobias.bias = false;
  conv_nobias.groups = 1;
  LayerAttrs bn;
  bn.eps = 1e-3;
  bn.momentum = 0.01;
  LayerAttrs bn_noaffine;
  bn_noaffine.affine = false;
  LayerAttrs maxpool;
  maxpool.kernel_size = {3, 3};
  maxpool.stride = {2, 2};
  maxpool.padding = {1, 1};
  maxpool.dilation = {1, 1};
  maxpool.ceil_mode = true;
  LayerAttrs maxpool_dilated;
  maxpool_dilated.kernel_size = {2, 2};
  maxpool_dilated.stride = {1, 1};
  maxpool_dilated.dilation = {2, 2};
  LayerAttrs avgpool;
  avgpool.kernel_size = {3, 3};
  avgpool.stride = {2, 2};
  avgpool.padding = {1, 1};
  avgpool.ceil_mode = true;
  avgpool.count_include_pad = false;
  LayerAttrs adaptive;
  adaptive.output_size = {3, 2};
  LayerAttrs linear;
  linear.out_features = 5;
  LayerAttrs linear_nobias = linear;
  linear_nobias.bias = false;
  LayerAttrs dropout;
  dropout.p = 0.3;
  LayerAttrs ln;
  ln.normalized_shape = {5};
  LayerAttrs ln_2d;
  ln_2d.normalized_shape = {3, 2};

  // input [4, 9, 8]; every op appears at least once.
  Graph graph = MustCreate(
      {4, 9, 8},
      {
          MakeLayer("conv", Op::kConv2d, {"input"}, conv),                // [6,5,6]
          MakeLayer("conv_nobias", Op::kConv2d, {"input"}, conv_nobias),  // [6,5,6]
          MakeLayer("bn", Op::kBatchNorm2d, {"conv"}, bn),                //
          MakeLayer("bn_noaffine", Op::kBatchNorm2d, {"conv_nobias"}, bn_noaffine),
          MakeLayer("add", Op::kAdd, {"bn", "bn_noaffine"}),  // [6,5,6]
          MakeLayer("relu", Op::kRelu, {"add"}),
          MakeLayer("concat", Op::kConcat, {"relu", "conv", "bn"}),                   // [18,5,6]
          MakeLayer("maxpool", Op::kMaxPool2d, {"concat"}, maxpool),                  // [18,3,3]
          MakeLayer("maxpool_dilated", Op::kMaxPool2d, {"concat"}, maxpool_dilated),  // [18,3,4]
          MakeLayer("avgpool", Op::kAvgPool2d, {"concat"}, avgpool),                  // [18,3,3]
          MakeLayer("adaptive", Op::kAdaptiveAvgPool2d, {"maxpool_dilated"}, adaptive),
          MakeLayer("gelu", Op::kGelu, {"adaptive"}),
          MakeLayer("ln_2d", Op::kLayerNorm, {"gelu"}, ln_2d),
          MakeLayer("flatten", Op::kFlatten, {"ln_2d"}),          // [108]
          MakeLayer("linear", Op::kLinear, {"flatten"}, linear),  // [5]
          MakeLayer("dropout", Op::kDropout, {"linear"}, dropout),
          MakeLayer("ln", Op::kLayerNorm, {"dropout"}, ln),
          MakeLayer("linear_nobias", Op::kLinear, {"ln"}, linear_nobias),
          MakeLayer("linear_3d", Op::kLinear, {"avgpool"}, linear),  // last dim
      },
      {{"linear_nobias", 1.0}, {"linear_3d", 1.0}, {"maxpool", 1.0}});

  // The token ops read int64 ids [7] and [7, D] sequences.
  LayerAttrs embedding;
  embedding.num_embeddings = 4;
  embedding.embedding_dim = 6;
  LayerAttrs position;
  position.max_positions = 9;
  LayerAttrs attention;
  attention.num_heads = 3;
  attention.causal = true;
  attention.dropout = 0.2;
  LayerAttrs gelu_tanh;
  gelu_tanh.approximate = "tanh";
  auto tokens = Graph::Create("tokens", {7},
                              {MakeLayer("wte", Op::kEmbedding, {"input"}, embedding),
                               MakeLayer("wpe", Op::kPositionEmbedding, {"wte"}, position),
                               MakeLayer("attn", Op::kMultiheadAttention, {"wpe"}, attention),
                               MakeLayer("act", Op::kGelu, {"attn"}, gelu_tanh),
                               MakeLayer("head", Op::kLinear, {"act"}, linear)},
                              {}, planner::DType::kInt64);
  INFO(tokens.status().ToString());
  REQUIRE(tokens.ok());

  // A vision transformer's reshapes: [4, 3, 6] -> flatten from 2 [4, 18] -> transpose [18, 4] ->
  // class token [19, 4] -> a bare position embedding -> its token 0 and its mean over tokens.
  LayerAttrs flatten_2;
  flatten_2.start_dim = 2;
  LayerAttrs transpose;
  transpose.dim0 = 1;
  transpose.dim1 = 2;
  LayerAttrs bare_position;
  bare_position.max_positions = 19;
  bare_position.bare_parameter = true;
  LayerAttrs token_0;
  token_0.dim = 1;
  token_0.index = 0;
  LayerAttrs over_tokens;
  over_tokens.dim = 1;
  Graph vision = MustCreate(
      {4, 3, 6},
      {MakeLayer("reshape", Op::kFlatten, {"input"}, flatten_2),
       MakeLayer("permute", Op::kTranspose, {"reshape"}, transpose),
       MakeLayer("class_token", Op::kClassToken, {"permute"}),
       MakeLayer("pos_embedding", Op::kPositionEmbedding, {"class_token"}, bare_position),
       MakeLayer("getitem", Op::kSelect, {"pos_embedding"}, token_0),
       MakeLayer("mean", Op::kMean, {"pos_embedding"}, over_tokens)},
      {{"getitem", 1.0}, {"mean", 1.0}});

  std::map<Op, int> seen;
  for (const Graph* g : {&graph, &*tokens, &vision}) {
    for (const auto& layer : g->layers()) seen[layer.op]++;
  }
  for (Op op : planner::AllOps()) {
    INFO(planner::OpName(op));
    CHECK(seen.count(op) == 1);
  }
  for (const Graph* g : {&graph, &*tokens, &vision}) {
    CheckEveryLayerAgainstIr(*g, 3, /*training=*/true);
    CheckEveryLayerAgainstIr(*g, 2, /*training=*/false);
  }
}

TEST_CASE("parameter and buffer names follow torch.nn", "[layers]") {
  LayerAttrs conv;
  conv.out_channels = 4;
  LayerAttrs linear;
  linear.out_features = 3;
  linear.bias = false;
  Graph graph = MustCreate(
      {2, 4, 4},
      {MakeLayer("c", Op::kConv2d, {"input"}, conv), MakeLayer("b", Op::kBatchNorm2d, {"c"}),
       MakeLayer("f", Op::kFlatten, {"b"}), MakeLayer("l", Op::kLinear, {"f"}, linear)});
  auto names = [&](int id) {
    auto module = BuildLayerModule(graph, id, 1);
    REQUIRE(module.ok());
    std::vector<std::string> params, buffers;
    for (const auto& p : (*module)->named_parameters()) params.push_back(p.key());
    for (const auto& b : (*module)->named_buffers()) buffers.push_back(b.key());
    return std::make_pair(params, buffers);
  };
  using V = std::vector<std::string>;
  CHECK(names(0) == std::make_pair(V{"weight", "bias"}, V{}));
  CHECK(names(1) == std::make_pair(V{"weight", "bias"},
                                   V{"running_mean", "running_var", "num_batches_tracked"}));
  CHECK(names(2) == std::make_pair(V{}, V{}));
  CHECK(names(3) == std::make_pair(V{"weight"}, V{}));
}

TEST_CASE("every zoo model layer matches the IR's shapes and parameter counts", "[layers][zoo]") {
  struct Case {
    std::string model;
    int64_t image_size;
    bool aux_logits;
  };
  // Small images keep this fast on a CPU; inception_v3 needs 75 px, 299 with its aux head.
  std::vector<Case> cases = {{"mlp", 0, true},
                             {"small_cnn", 0, true},
                             {"vgg16", 32, true},
                             {"resnet50", 64, true},
                             {"wide_resnet101_2", 32, true},
                             {"inception_v3", 75, false},
                             {"inception_v3", 299, true},
                             {"gpt_tiny", 0, true},
                             {"gpt2", 8, true},
                             {"vit_b_16", 32, true},
                             {"vit_tiny", 0, true}};
  std::vector<std::string> covered;
  for (const auto& c : cases) {
    SECTION(c.model + " at " + std::to_string(c.image_size) +
            (c.aux_logits ? "" : " without aux")) {
      planner::zoo::ModelOptions options;
      options.image_size = c.image_size;
      options.aux_logits = c.aux_logits;
      options.num_classes = 10;
      auto graph = planner::zoo::BuildModel(c.model, options);
      INFO(graph.status().ToString());
      REQUIRE(graph.ok());
      CheckEveryLayerAgainstIr(*graph, 2, /*training=*/true);
    }
    covered.push_back(c.model);
  }
  for (const auto& name : planner::zoo::ModelNames()) {
    INFO("zoo model without a case here: " << name);
    CHECK(std::find(covered.begin(), covered.end(), name) != covered.end());
  }
}

// All parameters and buffers of a model, keyed "<layer>.<name>".
std::map<std::string, torch::Tensor> StateOf(
    const Graph& graph, const std::vector<std::shared_ptr<LayerModule>>& modules) {
  std::map<std::string, torch::Tensor> state;
  for (int id = 0; id < graph.num_layers(); ++id) {
    for (const auto& p : modules[static_cast<size_t>(id)]->named_parameters()) {
      state[graph.layer(id).name + "." + p.key()] = p.value();
    }
    for (const auto& b : modules[static_cast<size_t>(id)]->named_buffers()) {
      state[graph.layer(id).name + "." + b.key()] = b.value();
    }
  }
  return state;
}

TEST_CASE("weights depend only on the seed and the layer name", "[layers][init]") {
  auto graph = planner::zoo::BuildModel("small_cnn");
  REQUIRE(graph.ok());
  auto forward_order = BuildAllLayerModules(*graph, 42);
  REQUIRE(forward_order.ok());
  // Build in reverse order, with the global torch RNG disturbed in between.
  std::vector<std::shared_ptr<LayerModule>> reverse_order(static_cast<size_t>(graph->num_layers()));
  for (int id = graph->num_layers() - 1; id >= 0; --id) {
    torch::manual_seed(static_cast<uint64_t>(id) * 1000 + 3);
    auto module = BuildLayerModule(*graph, id, 42);
    REQUIRE(module.ok());
    reverse_order[static_cast<size_t>(id)] = *module;
  }
  auto a = StateOf(*graph, *forward_order);
  auto b = StateOf(*graph, reverse_order);
  REQUIRE(a.size() == b.size());
  REQUIRE(!a.empty());
  for (const auto& [key, tensor] : a) {
    INFO(key);
    REQUIRE(b.count(key) == 1);
    CHECK(torch::equal(tensor, b.at(key)));
  }

  SECTION("a layer of the same name and shape in another graph gets the same weights") {
    LayerAttrs fc;
    fc.out_features = graph->layer(*graph->FindLayer("fc")).attrs.out_features;
    Graph other = MustCreate({16}, {MakeLayer("fc", Op::kLinear, {"input"}, fc)});
    auto module = BuildLayerModule(other, 0, 42);
    REQUIRE(module.ok());
    CHECK(torch::equal((*module)->named_parameters()["weight"], a.at("fc.weight")));
    CHECK(torch::equal((*module)->named_parameters()["bias"], a.at("fc.bias")));
  }
  SECTION("another seed gives other weights") {
    auto other = BuildAllLayerModules(*graph, 43);
    REQUIRE(other.ok());
    auto c = StateOf(*graph, *other);
    CHECK_FALSE(torch::equal(a.at("stem.conv.weight"), c.at("stem.conv.weight")));
    CHECK_FALSE(torch::equal(a.at("fc.weight"), c.at("fc.weight")));
  }
  SECTION("layers of one graph differ from each other") {
    CHECK_FALSE(torch::equal(a.at("branch1x1.conv.bias"), a.at("branch3x3.conv.bias")));
  }
}

TEST_CASE("initial weights follow torch.nn's default distributions", "[layers][init]") {
  LayerAttrs conv;
  conv.out_channels = 64;
  conv.kernel_size = {3, 3};
  LayerAttrs linear;
  linear.out_features = 300;
  Graph graph = MustCreate({32, 5, 5}, {MakeLayer("conv", Op::kConv2d, {"input"}, conv),
                                        MakeLayer("bn", Op::kBatchNorm2d, {"conv"}),
                                        MakeLayer("flatten", Op::kFlatten, {"bn"}),
                                        MakeLayer("fc", Op::kLinear, {"flatten"}, linear)});
  auto modules = BuildAllLayerModules(graph, 5);
  REQUIRE(modules.ok());
  auto state = StateOf(graph, *modules);
  // U(-b, b) with b = 1/sqrt(fan_in): max |w| <= b and std = b/sqrt(3).
  auto check_uniform = [](const torch::Tensor& t, int64_t fan_in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    CHECK(t.abs().max().item<double>() <= bound);
    CHECK(t.abs().max().item<double>() > 0.9 * bound);
    CHECK(t.std().item<double>() == Approx(bound / std::sqrt(3.0)).epsilon(0.05));
    CHECK(std::abs(t.mean().item<double>()) < 0.05 * bound);
  };
  check_uniform(state.at("conv.weight"), 32 * 9);
  check_uniform(state.at("fc.weight"), 64 * 3 * 3);
  const double conv_bound = 1.0 / std::sqrt(32.0 * 9.0);
  CHECK(state.at("conv.bias").abs().max().item<double>() <= conv_bound);
  CHECK(torch::equal(state.at("bn.weight"), torch::ones({64})));
  CHECK(torch::equal(state.at("bn.bias"), torch::zeros({64})));
  CHECK(torch::equal(state.at("bn.running_mean"), torch::zeros({64})));
  CHECK(torch::equal(state.at("bn.running_var"), torch::ones({64})));
  CHECK(state.at("bn.num_batches_tracked").dtype() == torch::kLong);
  CHECK(state.at("bn.num_batches_tracked").item<int64_t>() == 0);
}

TEST_CASE("batch norm tracks running statistics in training only", "[layers]") {
  LayerAttrs bn;
  bn.momentum = 0.5;
  Graph graph = MustCreate({2, 3, 3}, {MakeLayer("bn", Op::kBatchNorm2d, {"input"}, bn)});
  auto module = BuildLayerModule(graph, 0, 1);
  REQUIRE(module.ok());
  torch::Tensor x = torch::full({4, 2, 3, 3}, 3.0);
  (*module)->train(true);
  torch::Tensor y = (*module)->Forward({x});
  CHECK(y.abs().max().item<double>() < 1e-3);  // normalised with the batch's own statistics
  auto buffers = (*module)->named_buffers();
  CHECK(buffers["num_batches_tracked"].item<int64_t>() == 1);
  CHECK(buffers["running_mean"][0].item<double>() == Approx(1.5));
  (*module)->eval();
  (*module)->Forward({x});
  CHECK(buffers["num_batches_tracked"].item<int64_t>() == 1);
  CHECK(buffers["running_mean"][0].item<double>() == Approx(1.5));
}

TEST_CASE("dropout masks depend on the global sample, not on the split", "[layers][dropout]") {
  LayerAttrs attrs;
  attrs.p = 0.5;
  Graph graph = MustCreate({200}, {MakeLayer("drop", Op::kDropout, {"input"}, attrs)});
  auto whole = BuildLayerModule(graph, 0, 9);
  auto part = BuildLayerModule(graph, 0, 9);
  REQUIRE(whole.ok());
  REQUIRE(part.ok());
  torch::Tensor x = torch::ones({6, 200});

  (*whole)->set_step({/*iteration=*/3, /*first_sample=*/0});
  torch::Tensor full = (*whole)->Forward({x});
  // The same six samples split 2 + 4 over two "ranks".
  (*part)->set_step({3, 0});
  torch::Tensor first = (*part)->Forward({x.slice(0, 0, 2)});
  (*part)->set_step({3, 2});
  torch::Tensor second = (*part)->Forward({x.slice(0, 2, 6)});
  CHECK(torch::equal(full, torch::cat({first, second}, 0)));

  // Inverted dropout: kept values are scaled by 1/(1-p); about half are dropped.
  torch::Tensor kept = full.ne(0);
  CHECK(torch::allclose(full.masked_select(kept), torch::full({1}, 2.0)));
  const double dropped = 1.0 - kept.to(torch::kDouble).mean().item<double>();
  CHECK(dropped == Approx(0.5).margin(0.06));
  // Different samples and different iterations get different masks.
  CHECK_FALSE(torch::equal(full[0], full[1]));
  (*whole)->set_step({4, 0});
  CHECK_FALSE(torch::equal(full, (*whole)->Forward({x})));
  // Gradients flow through the same mask.
  torch::Tensor xg = torch::ones({6, 200}, torch::requires_grad());
  (*whole)->set_step({3, 0});
  (*whole)->Forward({xg}).sum().backward();
  CHECK(torch::equal(xg.grad(), full));
  // Evaluation is the identity.
  (*whole)->eval();
  CHECK(torch::equal((*whole)->Forward({x}), x));
}

TEST_CASE("gradients reach every parameter of a zoo model", "[layers]") {
  auto graph = planner::zoo::BuildModel("small_cnn");
  REQUIRE(graph.ok());
  auto modules = BuildAllLayerModules(*graph, 3);
  REQUIRE(modules.ok());
  torch::manual_seed(1);
  auto outputs = ForwardGraph(*graph, *modules, torch::randn(Batched(4, graph->input_shape())));
  INFO(outputs.status().ToString());
  REQUIRE(outputs.ok());
  REQUIRE(outputs->size() == 1);
  CHECK((*outputs)[0].sizes().vec() ==
        Batched(4, graph->layer(graph->output_ids()[0]).output_shape));
  (*outputs)[0].pow(2).sum().backward();
  int64_t with_grad = 0;
  for (const auto& module : *modules) {
    for (const auto& p : module->parameters()) {
      REQUIRE(p.grad().defined());
      CHECK(p.grad().abs().sum().item<double>() > 0);
      with_grad += p.numel();
    }
  }
  CHECK(with_grad == graph->total_params());
}

TEST_CASE("bad layer ids and failing forwards are errors, not exceptions", "[layers]") {
  auto graph = planner::zoo::BuildModel("mlp");
  REQUIRE(graph.ok());
  CHECK(BuildLayerModule(*graph, -1, 0).status().code() == StatusCode::kOutOfRange);
  CHECK(BuildLayerModule(*graph, graph->num_layers(), 0).status().code() ==
        StatusCode::kOutOfRange);
  auto modules = BuildAllLayerModules(*graph, 0);
  REQUIRE(modules.ok());
  auto wrong_width = ForwardGraph(*graph, *modules, torch::randn({2, 7}));
  REQUIRE_FALSE(wrong_width.ok());
  CHECK(wrong_width.status().message().find("fc1") != std::string::npos);
}

}  // namespace
}  // namespace deepool::worker
