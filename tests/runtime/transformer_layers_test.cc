// The token layers against torch.nn with the same weights, forward and backward:
// embedding vs nn::Embedding, position_embedding vs x + weight[:T], multihead_attention vs
// nn::MultiheadAttention (batch_first via transposes, need_weights false, a causal attn_mask),
// layernorm, linear and gelu (both approximations) over [n, T, D]; attention dropout that does
// not depend on the batch split; and the sequence loss (mean over every token). The vision
// transformer's ops against plain libtorch: flatten from dimension 2 and transpose (torchvision's
// reshape and permute), class_token (cat of the expanded token), the bare position embedding,
// select (x[:, 0]) and mean over tokens, with their bare parameters' state_dict keys.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "planner/graph.h"
#include "tests/unit/test_layers.h"
#include "worker/runtime/layers/layer_module.h"
#include "worker/runtime/layers/loss.h"

namespace deepool::worker {
namespace {

using deepool::testing::MakeLayer;

using planner::DType;
using planner::Graph;
using planner::Layer;
using planner::LayerAttrs;
using planner::Op;
using planner::Shape;

constexpr int64_t kTokens = 6;
constexpr int64_t kDim = 8;
constexpr int64_t kVocab = 11;

// The module of a one-layer graph over a [kTokens, kDim] float input (or [kTokens] ids).
std::shared_ptr<LayerModule> OneLayer(const Layer& layer, DType dtype = DType::kFloat32) {
  const Shape input = dtype == DType::kInt64 ? Shape{kTokens} : Shape{kTokens, kDim};
  auto graph = Graph::Create("one", input, {layer}, {}, dtype);
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  auto module = BuildLayerModule(*graph, 0, 5);
  INFO(module.status().ToString());
  REQUIRE(module.ok());
  return *module;
}

std::map<std::string, torch::Tensor> Params(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : module.named_parameters()) params[p.key()] = p.value();
  return params;
}

// Copies `from`'s parameters into `to`'s of the same names; both must have the same set.
void CopyParams(const torch::nn::Module& from, torch::nn::Module& to) {
  auto source = Params(from);
  auto target = Params(to);
  REQUIRE(source.size() == target.size());
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : target) {
    INFO(name);
    REQUIRE(source.count(name) == 1);
    tensor.copy_(source.at(name));
  }
}

void RequireClose(const torch::Tensor& got, const torch::Tensor& want, double tolerance = 1e-5) {
  REQUIRE(got.sizes() == want.sizes());
  INFO("max diff " << (got - want).abs().max().item<double>());
  REQUIRE(torch::allclose(got, want, tolerance, tolerance));
}

// Every parameter's gradient in `ours` equals the same-named one in `theirs`.
void RequireSameGrads(const torch::nn::Module& ours, const torch::nn::Module& theirs) {
  auto mine = Params(ours);
  auto reference = Params(theirs);
  for (const auto& [name, tensor] : mine) {
    INFO(name);
    REQUIRE(tensor.grad().defined());
    RequireClose(tensor.grad(), reference.at(name).grad());
  }
}

TEST_CASE("embedding equals nn::Embedding forward and backward", "[layers][tokens]") {
  LayerAttrs attrs;
  attrs.num_embeddings = kVocab;
  attrs.embedding_dim = kDim;
  auto ours = OneLayer(MakeLayer("wte", Op::kEmbedding, {"input"}, attrs), DType::kInt64);
  CHECK(Params(*ours).size() == 1);
  const torch::Tensor weight = Params(*ours).at("weight");
  CHECK(weight.sizes() == torch::IntArrayRef({kVocab, kDim}));
  // nn.Embedding's N(0, 1) init.
  CHECK(std::abs(weight.std().item<double>() - 1.0) < 0.25);
  torch::nn::Embedding theirs(kVocab, kDim);
  CopyParams(*ours, *theirs);

  torch::manual_seed(1);
  torch::Tensor ids = torch::randint(0, kVocab, {3, kTokens}, torch::kLong);
  torch::Tensor out = ours->Forward({ids});
  torch::Tensor want = theirs(ids);
  RequireClose(out, want);
  torch::Tensor grad = torch::randn(out.sizes());
  out.backward(grad);
  want.backward(grad);
  RequireSameGrads(*ours, *theirs);
  // Float input is refused with a message.
  CHECK_THROWS_WITH(ours->Forward({torch::zeros({1, kTokens})}), Catch::Contains("int64"));
}

TEST_CASE("position_embedding adds the first T rows of its table", "[layers][tokens]") {
  LayerAttrs attrs;
  attrs.max_positions = kTokens + 3;
  auto ours = OneLayer(MakeLayer("wpe", Op::kPositionEmbedding, {"input"}, attrs));
  torch::Tensor weight = Params(*ours).at("weight");
  CHECK(weight.sizes() == torch::IntArrayRef({kTokens + 3, kDim}));
  torch::manual_seed(2);
  torch::Tensor x = torch::randn({4, kTokens, kDim}, torch::requires_grad());
  torch::Tensor out = ours->Forward({x});
  RequireClose(out, x + weight.narrow(0, 0, kTokens).unsqueeze(0));
  torch::Tensor grad = torch::randn(out.sizes());
  out.backward(grad);
  RequireClose(x.grad(), grad);
  RequireClose(weight.grad().narrow(0, 0, kTokens), grad.sum(0));
  CHECK(weight.grad().narrow(0, kTokens, 3).abs().max().item<double>() == 0.0);
}

struct AttentionCase {
  bool causal;
  bool bias;
  bool training;
};

LayerAttrs Attention(int64_t heads, bool causal, bool bias = true, double dropout = 0.0) {
  LayerAttrs attrs;
  attrs.num_heads = heads;
  attrs.causal = causal;
  attrs.bias = bias;
  attrs.dropout = dropout;
  return attrs;
}

TEST_CASE("multihead_attention equals nn::MultiheadAttention forward and backward",
          "[layers][tokens]") {
  const int64_t heads = 2;
  for (const AttentionCase& c : {AttentionCase{true, true, true}, AttentionCase{false, true, true},
                                 AttentionCase{true, false, false}}) {
    INFO("causal " << c.causal << " bias " << c.bias << " training " << c.training);
    auto ours = OneLayer(
        MakeLayer("attn", Op::kMultiheadAttention, {"input"}, Attention(heads, c.causal, c.bias)));
    torch::nn::MultiheadAttention theirs(
        torch::nn::MultiheadAttentionOptions(kDim, heads).bias(c.bias));
    CopyParams(*ours, *theirs);
    ours->train(c.training);
    theirs->train(c.training);

    torch::manual_seed(3);
    torch::Tensor x = torch::randn({3, kTokens, kDim}, torch::requires_grad());
    torch::Tensor x_ref = x.detach().clone().requires_grad_(true);
    torch::Tensor out = ours->Forward({x});
    torch::Tensor mask;
    if (c.causal) {
      mask = torch::full({kTokens, kTokens}, -std::numeric_limits<float>::infinity()).triu(1);
    }
    torch::Tensor seq_first = x_ref.transpose(0, 1);  // nn::MultiheadAttention is [T, n, D]
    torch::Tensor want =
        std::get<0>(theirs->forward(seq_first, seq_first, seq_first, {}, false, mask))
            .transpose(0, 1);
    RequireClose(out, want);
    torch::Tensor grad = torch::randn(out.sizes());
    out.backward(grad);
    want.backward(grad);
    RequireClose(x.grad(), x_ref.grad());
    RequireSameGrads(*ours, *theirs);
  }
}

TEST_CASE("multihead_attention has torch's parameter names and init", "[layers][tokens][init]") {
  const int64_t dim = 64;
  LayerAttrs attrs = Attention(4, true);
  auto graph = Graph::Create("one", {kTokens, dim},
                             {MakeLayer("attn", Op::kMultiheadAttention, {"input"}, attrs)});
  REQUIRE(graph.ok());
  auto module = BuildLayerModule(*graph, 0, 9);
  REQUIRE(module.ok());
  std::vector<std::string> names;
  for (const auto& p : (*module)->named_parameters()) names.push_back(p.key());
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                          "out_proj.bias"});
  auto params = Params(**module);
  CHECK(params.at("in_proj_weight").sizes() == torch::IntArrayRef({3 * dim, dim}));
  CHECK(params.at("out_proj.weight").sizes() == torch::IntArrayRef({dim, dim}));
  CHECK(params.at("in_proj_bias").abs().max().item<double>() == 0.0);
  CHECK(params.at("out_proj.bias").abs().max().item<double>() == 0.0);
  // xavier_uniform_ on [3D, D]: U(-b, b), b = sqrt(6 / (D + 3D)); out_proj as nn.Linear:
  // U(-1/sqrt(D), 1/sqrt(D)).
  const double xavier = std::sqrt(6.0 / (4.0 * dim));
  const torch::Tensor in_proj = params.at("in_proj_weight");
  CHECK(in_proj.abs().max().item<double>() <= xavier);
  CHECK(in_proj.abs().max().item<double>() > 0.95 * xavier);
  const torch::Tensor out_proj = params.at("out_proj.weight");
  CHECK(out_proj.abs().max().item<double>() <= 1.0 / std::sqrt(dim));
  CHECK(out_proj.abs().max().item<double>() > 0.95 / std::sqrt(dim));
  CHECK((*module)->parameters().size() == 4);
  int64_t count = 0;
  for (const auto& p : (*module)->parameters()) count += p.numel();
  CHECK(count == graph->layer(0).params);
}

TEST_CASE("attention dropout does not depend on the batch split", "[layers][tokens][dropout]") {
  auto module = OneLayer(
      MakeLayer("attn", Op::kMultiheadAttention, {"input"}, Attention(2, true, true, 0.3)));
  module->train();
  torch::manual_seed(4);
  torch::Tensor x = torch::randn({4, kTokens, kDim});
  torch::NoGradGuard no_grad;
  module->set_step({7, 10});
  torch::Tensor whole = module->Forward({x});
  module->set_step({7, 10});
  torch::Tensor first = module->Forward({x.narrow(0, 0, 1)});
  module->set_step({7, 11});
  torch::Tensor rest = module->Forward({x.narrow(0, 1, 3)});
  RequireClose(torch::cat({first, rest}, 0), whole, 1e-6);
  // The masks change with the iteration and are off in eval.
  module->set_step({8, 10});
  CHECK_FALSE(torch::allclose(module->Forward({x}), whole));
  module->eval();
  torch::Tensor eval = module->Forward({x});
  CHECK_FALSE(torch::allclose(eval, whole));
  // With a vanishing rate (nothing dropped) the explicit path equals SDPA's.
  auto almost = OneLayer(
      MakeLayer("attn", Op::kMultiheadAttention, {"input"}, Attention(2, true, true, 1e-12)));
  almost->train();
  RequireClose(almost->Forward({x}), eval);
  // An empty batch (a rank with no samples of this layer) is fine.
  CHECK(almost->Forward({x.narrow(0, 0, 0)}).sizes() == torch::IntArrayRef({0, kTokens, kDim}));
}

TEST_CASE("layernorm and linear and gelu over tokens equal torch.nn", "[layers][tokens]") {
  torch::manual_seed(5);
  torch::Tensor x = torch::randn({3, kTokens, kDim}, torch::requires_grad());
  auto check = [&](std::shared_ptr<LayerModule> ours, torch::nn::AnyModule theirs,
                   torch::nn::Module& theirs_module) {
    CopyParams(*ours, theirs_module);
    torch::Tensor x_ref = x.detach().clone().requires_grad_(true);
    torch::Tensor out = ours->Forward({x});
    torch::Tensor want = theirs.forward(x_ref);
    RequireClose(out, want);
    torch::Tensor grad = torch::randn(out.sizes());
    out.backward(grad);
    want.backward(grad);
    RequireClose(x.grad(), x_ref.grad());
    RequireSameGrads(*ours, theirs_module);
    x.mutable_grad() = torch::Tensor();
  };
  SECTION("layernorm") {
    LayerAttrs attrs;
    attrs.normalized_shape = {kDim};
    torch::nn::LayerNorm ln(torch::nn::LayerNormOptions({kDim}));
    check(OneLayer(MakeLayer("ln", Op::kLayerNorm, {"input"}, attrs)), torch::nn::AnyModule(ln),
          *ln);
  }
  SECTION("linear") {
    LayerAttrs attrs;
    attrs.out_features = 5;
    torch::nn::Linear fc(kDim, 5);
    check(OneLayer(MakeLayer("fc", Op::kLinear, {"input"}, attrs)), torch::nn::AnyModule(fc), *fc);
  }
  for (const char* approximate : {"none", "tanh"}) {
    SECTION(std::string("gelu ") + approximate) {
      LayerAttrs attrs;
      attrs.approximate = approximate;
      torch::nn::GELU gelu(torch::nn::GELUOptions().approximate(approximate));
      check(OneLayer(MakeLayer("act", Op::kGelu, {"input"}, attrs)), torch::nn::AnyModule(gelu),
            *gelu);
    }
  }
}

TEST_CASE("gelu's two approximations differ", "[layers][tokens]") {
  LayerAttrs tanh_attrs;
  tanh_attrs.approximate = "tanh";
  torch::Tensor x = torch::linspace(-3, 3, kTokens * kDim).reshape({1, kTokens, kDim});
  torch::Tensor exact = OneLayer(MakeLayer("a", Op::kGelu, {"input"}))->Forward({x});
  torch::Tensor tanh = OneLayer(MakeLayer("a", Op::kGelu, {"input"}, tanh_attrs))->Forward({x});
  CHECK_FALSE(torch::allclose(exact, tanh, 1e-6, 1e-6));
  RequireClose(tanh, torch::gelu(x, "tanh"));
}

TEST_CASE("the sequence loss is the mean over every token and its parts add up",
          "[layers][tokens][loss]") {
  torch::manual_seed(6);
  const int64_t batch = 5;
  torch::Tensor logits = torch::randn({batch, kTokens, kVocab}, torch::requires_grad());
  torch::Tensor labels = torch::randint(0, kVocab, {batch, kTokens}, torch::kLong);
  namespace F = torch::nn::functional;
  torch::Tensor want = 0.5 * F::cross_entropy(logits.reshape({-1, kVocab}), labels.reshape({-1}));
  torch::Tensor whole = LossPart(logits, labels, 0.5, batch);
  CHECK(whole.item<double>() == Approx(want.item<double>()).epsilon(1e-6));
  torch::Tensor parts = LossPart(logits.narrow(0, 0, 2), labels.narrow(0, 0, 2), 0.5, batch) +
                        LossPart(logits.narrow(0, 2, 3), labels.narrow(0, 2, 3), 0.5, batch);
  CHECK(parts.item<double>() == Approx(want.item<double>()).epsilon(1e-6));
  // Classification keeps its mean over samples.
  torch::Tensor flat = logits.detach().select(1, 0);
  torch::Tensor flat_labels = labels.select(1, 0);
  CHECK(LossPart(flat, flat_labels, 1.0, batch).item<double>() ==
        Approx(F::cross_entropy(flat, flat_labels).item<double>()).epsilon(1e-6));
  CHECK_THROWS_WITH(LossPart(flat, labels, 1.0, batch), Catch::Contains("labels [n, T]"));
}

// The module of a one-layer graph over a float input of per-sample shape `input`.
std::shared_ptr<LayerModule> OneLayerOver(const Layer& layer, const Shape& input) {
  auto graph = Graph::Create("one", input, {layer});
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  auto module = BuildLayerModule(*graph, 0, 5);
  INFO(module.status().ToString());
  REQUIRE(module.ok());
  return *module;
}

TEST_CASE("flatten from dimension 2 and transpose are torchvision's reshape and permute",
          "[layers][vit]") {
  LayerAttrs flatten;
  flatten.start_dim = 2;
  LayerAttrs transpose;
  transpose.dim0 = 1;
  transpose.dim1 = -1;
  auto reshape = OneLayerOver(MakeLayer("reshape", Op::kFlatten, {"input"}, flatten), {kDim, 2, 3});
  auto permute =
      OneLayerOver(MakeLayer("permute", Op::kTranspose, {"input"}, transpose), {kDim, 6});
  torch::manual_seed(7);
  torch::Tensor x = torch::randn({3, kDim, 2, 3}, torch::requires_grad());
  torch::Tensor out = permute->Forward({reshape->Forward({x})});
  torch::Tensor want = x.reshape({3, kDim, 6}).permute({0, 2, 1});
  RequireClose(out, want, 0);
  CHECK(out.is_contiguous());
  torch::Tensor grad = torch::randn(out.sizes());
  out.backward(grad);
  RequireClose(x.grad(), grad.permute({0, 2, 1}).reshape({3, kDim, 2, 3}), 0);
}

TEST_CASE("class_token prepends one learned token to every sample", "[layers][vit]") {
  auto ours = OneLayer(MakeLayer("class_token", Op::kClassToken, {"input"}));
  // One bare parameter, zeros as torchvision initialises it; its state_dict key is the layer's.
  REQUIRE(Params(*ours).size() == 1);
  torch::Tensor token = Params(*ours).at(kBareParameterName);
  CHECK(token.sizes() == torch::IntArrayRef({1, 1, kDim}));
  CHECK(token.abs().max().item<double>() == 0.0);
  CHECK(StateKey("class_token", kBareParameterName) == "class_token");
  CHECK(StateKey("conv_proj", "weight") == "conv_proj.weight");
  {
    torch::NoGradGuard no_grad;
    token.copy_(torch::randn({1, 1, kDim}));
  }
  torch::manual_seed(3);
  torch::Tensor x = torch::randn({4, kTokens, kDim}, torch::requires_grad());
  torch::Tensor out = ours->Forward({x});
  RequireClose(out, torch::cat({token.expand({4, -1, -1}), x}, 1), 0);
  torch::Tensor grad = torch::randn(out.sizes());
  out.backward(grad);
  RequireClose(x.grad(), grad.narrow(1, 1, kTokens), 0);
  RequireClose(token.grad(), grad.narrow(1, 0, 1).sum(0, /*keepdim=*/true));
}

TEST_CASE("a bare position embedding is torchvision's pos_embedding added whole", "[layers][vit]") {
  LayerAttrs attrs;
  attrs.max_positions = kTokens;
  attrs.bare_parameter = true;
  auto ours =
      OneLayer(MakeLayer("encoder.pos_embedding", Op::kPositionEmbedding, {"input"}, attrs));
  REQUIRE(Params(*ours).size() == 1);
  torch::Tensor weight = Params(*ours).at(kBareParameterName);
  CHECK(weight.sizes() == torch::IntArrayRef({1, kTokens, kDim}));
  CHECK(std::abs(weight.std().item<double>() - 0.02) < 0.01);  // torchvision's normal_(std=0.02)
  torch::manual_seed(4);
  torch::Tensor x = torch::randn({3, kTokens, kDim}, torch::requires_grad());
  torch::Tensor out = ours->Forward({x});
  RequireClose(out, x + weight, 0);
  torch::Tensor grad = torch::randn(out.sizes());
  out.backward(grad);
  RequireClose(x.grad(), grad, 0);
  RequireClose(weight.grad(), grad.sum(0, /*keepdim=*/true));
}

TEST_CASE("select and mean are x[:, i] and x.mean(dim)", "[layers][vit]") {
  LayerAttrs token_0;
  token_0.dim = 1;
  token_0.index = 0;
  LayerAttrs last_feature;
  last_feature.dim = -1;
  last_feature.index = -1;
  LayerAttrs over_tokens;
  over_tokens.dim = 1;
  auto first = OneLayer(MakeLayer("getitem", Op::kSelect, {"input"}, token_0));
  auto last = OneLayer(MakeLayer("getitem", Op::kSelect, {"input"}, last_feature));
  auto mean = OneLayer(MakeLayer("mean", Op::kMean, {"input"}, over_tokens));
  CHECK(Params(*first).empty());
  CHECK(Params(*mean).empty());
  torch::manual_seed(5);
  torch::Tensor x = torch::randn({3, kTokens, kDim}, torch::requires_grad());
  torch::Tensor a = first->Forward({x});
  torch::Tensor b = last->Forward({x});
  torch::Tensor c = mean->Forward({x});
  RequireClose(a, x.select(1, 0), 0);
  RequireClose(b, x.select(2, kDim - 1), 0);
  RequireClose(c, x.mean(1));
  torch::Tensor ga = torch::randn(a.sizes()), gc = torch::randn(c.sizes());
  (a * ga).sum().add((c * gc).sum()).backward();
  torch::Tensor want =
      (gc / static_cast<double>(kTokens)).unsqueeze(1).expand({3, kTokens, kDim}).clone();
  want.select(1, 0).add_(ga);
  RequireClose(x.grad(), want);
}

}  // namespace
}  // namespace deepool::worker
