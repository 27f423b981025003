// The analytical work of the token ops (planner/transformer_work.h), reached through the device
// model's per-op rules: attention FLOPs grow with the square of the sequence, an embedding is a
// gather with no GEMM, dropout on attention weights materialises T x T scores, and a linear
// layer over [T, D] is one GEMM with T rows per sample. The vision transformer's tensor ops:
// a transpose is a copy, select is a view forward, the class token's gradient is a batch sum,
// dropout with p = 0 costs nothing.
#include "planner/transformer_work.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "planner/device_model.h"
#include "planner/graph.h"

namespace deepool::planner {
namespace {

constexpr int64_t kDim = 64;
constexpr int64_t kHeads = 4;
constexpr int64_t kVocab = 256;

// ids [T] -> embedding -> position embedding -> attention -> linear head.
Graph TokenGraph(int64_t tokens, double attention_dropout = 0.0) {
  auto layer = [](std::string name, Op op, std::string input) {
    Layer l;
    l.name = std::move(name);
    l.op = op;
    l.inputs = {std::move(input)};
    return l;
  };
  std::vector<Layer> layers;
  layers.push_back(layer("wte", Op::kEmbedding, "input"));
  layers.back().attrs.num_embeddings = kVocab;
  layers.back().attrs.embedding_dim = kDim;
  layers.push_back(layer("wpe", Op::kPositionEmbedding, "wte"));
  layers.back().attrs.max_positions = tokens;
  layers.push_back(layer("attn", Op::kMultiheadAttention, "wpe"));
  layers.back().attrs.num_heads = kHeads;
  layers.back().attrs.causal = true;
  layers.back().attrs.dropout = attention_dropout;
  layers.push_back(layer("head", Op::kLinear, "attn"));
  layers.back().attrs.out_features = kVocab;
  layers.back().attrs.bias = false;
  auto graph = Graph::Create("tokens", {tokens}, std::move(layers), {}, DType::kInt64);
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

LayerWork Work(const Graph& graph, const std::string& layer, int64_t batch) {
  return EstimateLayerWork(graph, *graph.FindLayer(layer), batch);
}

TEST_CASE("attention FLOPs grow with the square of the tokens", "[device_model][tokens]") {
  const int64_t batch = 3;
  for (int64_t t : {16, 64, 256}) {
    INFO("T = " << t);
    const LayerWork one = Work(TokenGraph(t), "attn", batch);
    const LayerWork two = Work(TokenGraph(2 * t), "attn", batch);
    // f(T) = a T^2 + b T per sample with a = 4D (QK^T, AV) + 4H (scale, softmax): doubling T
    // adds exactly 2 a T^2 beyond twice the work.
    const double a = 4.0 * kDim + 4.0 * kHeads;
    CHECK(two.forward_flops - 2 * one.forward_flops == Approx(2 * a * t * t * batch));
    // QK^T and AV are one GEMM part of 2 x 2 T^2 D: four times as large at twice the tokens.
    CHECK(one.forward_gemms[1].flops == Approx(4.0 * t * t * kDim * batch));
    CHECK(two.forward_gemms[1].flops == Approx(4 * one.forward_gemms[1].flops));
    // Projections: in (3D) and out (D), depth D, linear in T.
    CHECK(one.forward_gemms[0].flops == Approx(8.0 * t * kDim * kDim * batch));
    CHECK(one.forward_gemms[0].depth == kDim);
    CHECK(two.backward_flops > 2 * one.backward_flops);
  }
  // On a device the quadratic term shows in long sequences: 4x the tokens, over 6x the time
  // (linear work would take 4x).
  const auto h100 = DevicePreset("h100");
  REQUIRE(h100.ok());
  const LayerTime short_seq = RooflineTime(*h100, Work(TokenGraph(512), "attn", 8));
  const LayerTime long_seq = RooflineTime(*h100, Work(TokenGraph(2048), "attn", 8));
  CHECK(long_seq.forward_ms > 6 * short_seq.forward_ms);
  CHECK(long_seq.backward_ms > 6 * short_seq.backward_ms);
}

TEST_CASE("the attention core's GEMM depth lies between the head size and the tokens",
          "[device_model][tokens]") {
  const LayerWork work = Work(TokenGraph(128), "attn", 2);
  const double head_dim = kDim / kHeads;
  // The harmonic mean of d (QK^T) and T (AV).
  CHECK(work.forward_gemms[1].depth == Approx(2.0 / (1.0 / head_dim + 1.0 / 128)));
  CHECK(work.backward_gemms[1].depth > head_dim);
  CHECK(work.backward_gemms[1].depth < 128);
}

TEST_CASE("attention dropout materialises the T x T scores and the fused kernel does not",
          "[device_model][tokens]") {
  auto extra_bytes = [](int64_t t) {
    return Work(TokenGraph(t, 0.1), "attn", 2).forward_bytes -
           Work(TokenGraph(t, 0.0), "attn", 2).forward_bytes;
  };
  CHECK(extra_bytes(64) > 0);
  // H x T x T floats: four times the bytes at twice the tokens (less the fused kernel's row
  // statistics, linear in T).
  CHECK(extra_bytes(128) == Approx(4 * extra_bytes(64)).epsilon(0.01));
  CHECK(Work(TokenGraph(64, 0.1), "attn", 2).forward_kernels >
        Work(TokenGraph(64), "attn", 2).forward_kernels);
}

TEST_CASE("an embedding is a gather: bytes and no GEMM, and its backward fills the table",
          "[device_model][tokens]") {
  const Graph graph = TokenGraph(64);
  const LayerWork one = Work(graph, "wte", 1);
  const LayerWork four = Work(graph, "wte", 4);
  CHECK(one.forward_flops == 0);
  CHECK(one.forward_gemms[0].flops == 0);
  CHECK(one.backward_gemms[0].flops == 0);
  CHECK(four.forward_bytes == Approx(4 * one.forward_bytes));
  // The V x D gradient is written whatever the batch: backward bytes are not proportional.
  const double table = kVocab * kDim * 4.0;
  CHECK(one.backward_bytes > table);
  CHECK(four.backward_bytes < 4 * one.backward_bytes);
  CHECK(one.backward_flops == 64.0 * kDim);  // the scatter-add
  const LayerWork wpe = Work(graph, "wpe", 2);
  CHECK(wpe.forward_flops == 2.0 * 64 * kDim);
  CHECK(wpe.forward_gemms[0].flops == 0);
}

TEST_CASE("a linear layer over tokens is one GEMM with T rows per sample",
          "[device_model][tokens]") {
  const int64_t t = 64;
  const LayerWork work = Work(TokenGraph(t), "head", 3);
  CHECK(work.forward_gemms[0].flops == Approx(2.0 * 3 * t * kDim * kVocab));
  CHECK(work.forward_gemms[0].depth == kDim);
  // grad-weight reduces over the batch's 3 x T rows; grad-input over the output features.
  CHECK(work.backward_flops == Approx(2 * work.forward_gemms[0].flops));
}

TEST_CASE("TransformerLayerWork leaves other ops to the device model", "[device_model][tokens]") {
  const LayerWork work = TransformerLayerWork(TokenGraph(8), 3, 2);  // the linear head
  CHECK(work.forward_flops == 0);
  CHECK(work.forward_kernels == 0);
}

TEST_CASE("the vision transformer's tensor ops: copies, views and batch sums",
          "[device_model][vit]") {
  auto graph = ParseGraphJson(R"({"version": 1, "input": {"shape": [8, 4, 4]}, "layers": [
    {"name": "reshape", "op": "flatten", "inputs": ["input"], "start_dim": 2},
    {"name": "permute", "op": "transpose", "inputs": ["reshape"], "dim0": 1, "dim1": 2},
    {"name": "class_token", "op": "class_token", "inputs": ["permute"]},
    {"name": "drop", "op": "dropout", "inputs": ["class_token"], "p": 0.0},
    {"name": "mean", "op": "mean", "inputs": ["drop"], "dim": 1},
    {"name": "getitem", "op": "select", "inputs": ["drop"], "dim": 1, "index": 0},
    {"name": "sum", "op": "add", "inputs": ["mean", "getitem"]}]})");
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  const int64_t n = 3;
  const double tokens = 16, dim = 8;
  const LayerWork transpose = Work(*graph, "permute", n);
  CHECK(transpose.forward_bytes == Approx(2 * n * tokens * dim * 4));
  CHECK(transpose.backward_bytes == Approx(2 * n * tokens * dim * 4));
  CHECK(transpose.forward_flops == 0);
  const LayerWork token = Work(*graph, "class_token", n);
  CHECK(token.forward_bytes == Approx(n * (2 * tokens + 1) * dim * 4 + dim * 4));
  CHECK(token.backward_flops == Approx(n * dim));  // the token's gradient: a sum over the batch
  const LayerWork select = Work(*graph, "getitem", n);
  CHECK(select.forward_bytes == 0);  // a view
  CHECK(select.forward_kernels == 1);
  CHECK(select.backward_bytes == Approx(n * (tokens + 2) * dim * 4));
  const LayerWork mean = Work(*graph, "mean", n);
  CHECK(mean.forward_flops == Approx(n * (tokens + 1) * dim));
  CHECK(mean.backward_flops == mean.forward_flops);
  const LayerWork drop = Work(*graph, "drop", n);
  CHECK(drop.forward_flops == 0);
  CHECK(drop.forward_bytes == 0);
  CHECK(drop.forward_kernels == 0);
  CHECK(drop.backward_kernels == 0);
}

}  // namespace
}  // namespace deepool::planner
