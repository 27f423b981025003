// Roofline work of the token ops; the rules and their reasons are in transformer_work.h.
#include "planner/transformer_work.h"

#include <algorithm>
#include <initializer_list>

namespace deepool::planner {
namespace {

constexpr double kWeightBytes = 4;  // weights and their gradients stay fp32
constexpr double kIdBytes = 8;      // int64 token ids

const Shape& FirstInputShape(const Graph& graph, const Layer& layer) {
  const int id = layer.input_ids.at(0);
  return id == kGraphInputId ? graph.input_shape() : graph.layer(id).output_shape;
}

// Several GEMMs of equal flops as one part: the depth whose roofline depth term
// (1 + half_depth / depth) equals theirs summed, i.e. the harmonic mean of the depths.
GemmPart EqualGemms(double total_flops, std::initializer_list<double> depths) {
  double inverse = 0;
  for (double depth : depths) inverse += 1.0 / std::max(depth, 1.0);
  return {total_flops, static_cast<double>(depths.size()) / inverse};
}

LayerWork EmbeddingWork(const Graph& graph, const Layer& layer, double batch, double bytes) {
  const double tokens = static_cast<double>(NumElements(FirstInputShape(graph, layer))) * batch;
  const double dim = static_cast<double>(layer.attrs.embedding_dim);
  const double table = static_cast<double>(layer.params) * kWeightBytes;
  LayerWork work;
  work.forward_bytes = tokens * (kIdBytes + dim * kWeightBytes + dim * bytes);
  work.forward_kernels = 1;
  // Zero the V x D gradient, read ids and output gradient, read-modify-write the rows, then
  // accumulate into .grad (read, read, write).
  work.backward_flops = tokens * dim;
  work.backward_bytes = tokens * (kIdBytes + dim * bytes + 2 * dim * kWeightBytes) + 4 * table;
  work.backward_kernels = 4;
  return work;
}

LayerWork PositionEmbeddingWork(const Layer& layer, double batch, double bytes) {
  const double elements = static_cast<double>(NumElements(layer.output_shape));
  const double table = static_cast<double>(layer.params) * kWeightBytes;
  LayerWork work;
  work.forward_flops = elements * batch;
  work.forward_bytes = 2 * batch * elements * bytes + elements * kWeightBytes;
  work.forward_kernels = 1;
  // The input gradient is the output gradient; the table's is its sum over the batch, written
  // into a zeroed [max_positions, D] tensor and accumulated into .grad.
  work.backward_flops = elements * batch;
  work.backward_bytes = batch * elements * bytes + 4 * table;
  work.backward_kernels = 3;
  return work;
}

// The bytes of `elements` per-sample elements at `batch` samples.
double Bytes(double elements, double batch, double bytes) { return elements * batch * bytes; }

LayerWork TensorOpWork(const Graph& graph, const Layer& layer, double batch, double bytes) {
  const double in =
      Bytes(static_cast<double>(NumElements(FirstInputShape(graph, layer))), batch, bytes);
  const double out = Bytes(static_cast<double>(NumElements(layer.output_shape)), batch, bytes);
  const double weights = static_cast<double>(layer.params) * kWeightBytes;
  LayerWork work;
  work.forward_kernels = 1;
  work.backward_kernels = 1;
  switch (layer.op) {
    case Op::kTranspose:
      work.forward_bytes = in + out;
      work.backward_bytes = in + out;
      break;
    case Op::kClassToken:
      work.forward_bytes = in + out + weights;
      work.backward_bytes =
          out + in + Bytes(static_cast<double>(layer.params), batch, bytes) + 3 * weights;
      work.backward_flops = static_cast<double>(layer.params) * batch;
      work.backward_kernels = 3;
      break;
    case Op::kSelect:
      work.backward_bytes = in + out;
      work.backward_kernels = 2;
      break;
    case Op::kMean:
      work.forward_flops = static_cast<double>(layer.forward_flops) * batch;
      work.backward_flops = work.forward_flops;
      work.forward_bytes = in + out;
      work.backward_bytes = in + out;
      break;
    default:
      return LayerWork{};
  }
  return work;
}

LayerWork AttentionWork(const Layer& layer, double batch, double bytes) {
  const LayerAttrs& a = layer.attrs;
  const double tokens = static_cast<double>(layer.output_shape.at(0));
  const double dim = static_cast<double>(layer.output_shape.at(1));
  const double heads = static_cast<double>(std::max<int64_t>(a.num_heads, 1));
  const double head_dim = dim / heads;
  const double weights = static_cast<double>(layer.params) * kWeightBytes;
  const double activation = batch * tokens * dim * bytes;         // one [n, T, D] tensor
  const double scores = batch * heads * tokens * tokens * bytes;  // one [n, H, T, T]
  const bool fused = a.dropout <= 0;

  const double projections = batch * 8 * tokens * dim * dim;  // in (3D) and out (D)
  const double core = batch * 2 * tokens * tokens * dim;      // one of QK^T, AV
  const double total = static_cast<double>(layer.forward_flops) * batch;
  const double rest = std::max(total - projections - 2 * core, 0.0);  // biases, softmax
  LayerWork work;
  work.forward_flops = total;
  work.forward_gemms[0] = {projections, dim};
  work.forward_gemms[1] = EqualGemms(2 * core, {head_dim, tokens});
  // Backward: grad-input and grad-weight of both projections (grad-weight reduces over the
  // batch's tokens); dP (depth d), dV, dQ, dK (depth T), and for the fused kernel QK^T again.
  const double weight_grad_depth = std::min(dim, batch * tokens);
  work.backward_gemms[0] = EqualGemms(2 * projections, {dim, weight_grad_depth});
  work.backward_gemms[1] = fused
                               ? EqualGemms(5 * core, {head_dim, head_dim, tokens, tokens, tokens})
                               : EqualGemms(4 * core, {head_dim, tokens, tokens, tokens});
  work.backward_flops = work.backward_gemms[0].flops + work.backward_gemms[1].flops + 2 * rest;
  // Forward activations: read x, write and read q/k/v, write the attention output, copy it
  // back to [n, T, D], read it into the out-projection, write the result: 12 passes; the fused
  // kernel also keeps a log-sum-exp per (head, token). Backward moves about twice that, and
  // reads and accumulates the weights' gradients as linear does.
  const double row_stats = batch * heads * tokens * bytes;
  work.forward_bytes = 12 * activation + weights + (fused ? row_stats : 7 * scores);
  work.backward_bytes = 24 * activation + 4 * weights + (fused ? 2 * row_stats : 9 * scores);
  work.forward_kernels = fused ? 4 : 9;
  work.backward_kernels = fused ? 9 : 16;
  return work;
}

}  // namespace

LayerWork TransformerLayerWork(const Graph& graph, int layer_id, int64_t batch,
                               double activation_bytes) {
  const Layer& layer = graph.layer(layer_id);
  const double n = static_cast<double>(batch);
  switch (layer.op) {
    case Op::kEmbedding:
      return EmbeddingWork(graph, layer, n, activation_bytes);
    case Op::kPositionEmbedding:
      return PositionEmbeddingWork(layer, n, activation_bytes);
    case Op::kMultiheadAttention:
      return AttentionWork(layer, n, activation_bytes);
    case Op::kTranspose:
    case Op::kClassToken:
    case Op::kSelect:
    case Op::kMean:
      return TensorOpWork(graph, layer, n, activation_bytes);
    default:
      return LayerWork{};
  }
}

}  // namespace deepool::planner
