// A small helper that keeps the zoo's model code short: each call appends one planner::Layer
// and returns the new layer's name, so a model reads as a chain of calls that thread names
// through. Shapes, parameter counts and FLOPs are left to Graph::Create, which also checks
// every channel count given here against the shape it infers.
// Threading: a builder is used by one thread at a time; it is cheap and meant to be local.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "planner/graph.h"

namespace deepool::planner::zoo {

using Pair = std::array<int64_t, 2>;

// {n, n}: a square kernel, stride or padding.
constexpr Pair Sq(int64_t n) { return Pair{n, n}; }

// A conv2d's settings, written as ConvSpec(in, out, Sq(3)).Stride(Sq(2)).Padding(Sq(1)).NoBias().
struct ConvSpec {
  ConvSpec(int64_t in, int64_t out, Pair kernel_size)
      : in_channels(in), out_channels(out), kernel(kernel_size) {}
  ConvSpec& Stride(Pair s) {
    stride = s;
    return *this;
  }
  ConvSpec& Padding(Pair p) {
    padding = p;
    return *this;
  }
  ConvSpec& Dilation(Pair d) {
    dilation = d;
    return *this;
  }
  ConvSpec& Groups(int64_t g) {
    groups = g;
    return *this;
  }
  ConvSpec& NoBias() {
    bias = false;
    return *this;
  }

  int64_t in_channels;
  int64_t out_channels;
  Pair kernel;
  Pair stride{1, 1};
  Pair padding{0, 0};
  Pair dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

class LayerListBuilder {
 public:
  std::string Conv2d(std::string name, std::string input, const ConvSpec& spec);
  // The channel count comes from the input, as BatchNorm2d(num_features) must match it anyway.
  std::string BatchNorm2d(std::string name, std::string input, double eps = 1e-5);
  std::string Relu(std::string name, std::string input);
  std::string MaxPool2d(std::string name, std::string input, Pair kernel, Pair stride,
                        Pair padding = Sq(0));
  std::string AvgPool2d(std::string name, std::string input, Pair kernel, Pair stride,
                        Pair padding = Sq(0));
  std::string AdaptiveAvgPool2d(std::string name, std::string input, Pair output_size);
  std::string Flatten(std::string name, std::string input);
  // torch.flatten(x, start_dim, end_dim), dimensions counting the batch as 0.
  std::string Flatten(std::string name, std::string input, int64_t start_dim, int64_t end_dim);
  // torch.transpose(x, dim0, dim1), dimensions counting the batch as 0.
  std::string Transpose(std::string name, std::string input, int64_t dim0, int64_t dim1);
  // A learned [1, 1, D] token prepended to [T, D] (torchvision ViT's class_token).
  std::string ClassToken(std::string name, std::string input);
  // torch.select(x, dim, index) (x[:, 0] is dim 1, index 0).
  std::string Select(std::string name, std::string input, int64_t dim, int64_t index);
  // torch.mean(x, dim).
  std::string Mean(std::string name, std::string input, int64_t dim);
  std::string Dropout(std::string name, std::string input, double p);
  std::string Linear(std::string name, std::string input, int64_t in_features, int64_t out_features,
                     bool bias = true);
  // Concatenation along channels, in the order given (torch.cat(inputs, 1)).
  std::string Concat(std::string name, std::vector<std::string> inputs);
  // Elementwise sum (a residual add).
  std::string Add(std::string name, std::vector<std::string> inputs);
  // Over the last dimension of size `features` (nn.LayerNorm(features)).
  std::string LayerNorm(std::string name, std::string input, int64_t features, double eps = 1e-5);
  // approximate: "none" or "tanh".
  std::string Gelu(std::string name, std::string input, std::string approximate = "none");
  // Token ids -> [.., embedding_dim] (nn.Embedding(num_embeddings, embedding_dim)).
  std::string Embedding(std::string name, std::string input, int64_t num_embeddings,
                        int64_t embedding_dim);
  // [T, D] + a learned [max_positions, D] table's first T rows.
  std::string PositionEmbedding(std::string name, std::string input, int64_t max_positions);
  // [T, D] + a learned bare [1, T, D] parameter (torchvision ViT's encoder.pos_embedding).
  std::string BarePositionEmbedding(std::string name, std::string input, int64_t tokens);
  // Self-attention over [T, embed_dim] with biases (nn.MultiheadAttention).
  std::string MultiheadAttention(std::string name, std::string input, int64_t embed_dim,
                                 int64_t num_heads, bool causal, double dropout = 0.0);

  std::vector<Layer> Take() && { return std::move(layers_); }

 private:
  std::string Append(std::string name, Op op, std::vector<std::string> inputs,
                     const LayerAttrs& attrs);
  std::vector<Layer> layers_;
};

}  // namespace deepool::planner::zoo
