// The layer-graph IR: a validated DAG of named layers with inferred shapes and per-layer costs.
//
// A Graph is immutable once built: Graph::Create validates the layers (unknown or missing inputs,
// cycles, duplicate names, non-positive sizes, shape mismatches), orders them topologically and
// infers every layer's output shape, parameter count, forward FLOPs and activation bytes.
// All shapes are per sample: the batch dimension is never part of a Shape.
// Threading: a built Graph is read-only and may be shared between threads.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace deepool::planner {

enum class Op {
  kConv2d,
  kBatchNorm2d,
  kRelu,
  kMaxPool2d,
  kAvgPool2d,
  kAdaptiveAvgPool2d,
  kLinear,
  kFlatten,
  kDropout,
  kConcat,  // along channels (the first per-sample dimension)
  kAdd,     // elementwise sum of equal shapes (residual)
  kLayerNorm,
  kGelu,
  // Token models (docs/formats.md): [T] int64 ids -> [T, D]; adds a learned [max_positions, D]
  // table's first T rows to [T, D]; multi-head self-attention over [T, D].
  kEmbedding,
  kPositionEmbedding,
  kMultiheadAttention,
  // Vision transformers (docs/formats.md): torch.transpose of two per-sample dimensions; a
  // learned [1, 1, D] token prepended to [T, D]; torch.select of one index of a dimension;
  // torch.mean over a dimension. (The patch tokens are conv2d, flatten from dimension 2 and a
  // transpose of dimensions 1 and 2, as torchvision's ViT reshapes and permutes.)
  kTranspose,
  kClassToken,
  kSelect,
  kMean,
};

// The JSON spelling, e.g. "conv2d", "adaptive_avgpool2d".
const char* OpName(Op op);
std::optional<Op> OpFromName(std::string_view name);
std::vector<Op> AllOps();

using Shape = std::vector<int64_t>;  // per sample, no batch dimension
std::string ShapeToString(const Shape& shape);
int64_t NumElements(const Shape& shape);

// The element type of the graph's input. Every layer's output is float32; an int64 input holds
// token ids and may be read only by embedding layers, which are the only layers that read int64.
enum class DType { kFloat32, kInt64 };
const char* DTypeName(DType dtype);  // "float32", "int64": the JSON spelling
std::optional<DType> DTypeFromName(std::string_view name);
int64_t DTypeBytes(DType dtype);  // 4, 8

// The name by which layers refer to the graph's input tensor.
inline constexpr std::string_view kGraphInputName = "input";
inline constexpr int kGraphInputId = -1;

// Attributes of every op in one struct; each op reads only its own (see docs/formats.md).
// Field names and defaults follow torch.nn.
struct LayerAttrs {
  // conv2d
  int64_t in_channels = 0;  // 0: taken from the input; otherwise must match it
  int64_t out_channels = 0;
  std::array<int64_t, 2> kernel_size{1, 1};  // conv2d, maxpool2d, avgpool2d
  std::array<int64_t, 2> stride{1, 1};       // pools default to kernel_size when absent
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};  // conv2d, maxpool2d
  int64_t groups = 1;
  bool bias = true;  // conv2d, linear, multihead_attention
  // pools
  bool ceil_mode = false;
  bool count_include_pad = true;             // avgpool2d
  std::array<int64_t, 2> output_size{1, 1};  // adaptive_avgpool2d
  // linear
  int64_t in_features = 0;  // 0: taken from the input; otherwise must match it
  int64_t out_features = 0;
  // batchnorm2d, layernorm
  double eps = 1e-5;
  double momentum = 0.1;                  // batchnorm2d
  bool affine = true;                     // batchnorm2d affine, layernorm elementwise_affine
  std::vector<int64_t> normalized_shape;  // layernorm: trailing dims of the input
  // flatten: torch.flatten's start_dim and end_dim, which count the batch as dimension 0 (so
  // start_dim is at least 1); negative ones count from the end. The defaults join every
  // dimension after the batch, as nn.Flatten does.
  int64_t start_dim = 1;
  int64_t end_dim = -1;
  // transpose (dim0, dim1), select (dim, index), mean (dim): dimensions counted as torch counts
  // them, the batch being 0, which they may not name; negative ones count from the end. A
  // negative index counts from the end of its dimension.
  int64_t dim0 = 1;
  int64_t dim1 = 2;
  int64_t dim = 1;
  int64_t index = 0;
  // dropout
  double p = 0.5;
  // gelu: "none" (the exact erf form) or "tanh" (GPT-2's approximation)
  std::string approximate = "none";
  // embedding (nn.Embedding), position_embedding (GPT-2's wpe: a [max_positions, D] table)
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  int64_t max_positions = 0;  // position_embedding: the longest sequence it takes
  // position_embedding: false, GPT-2's wpe (an nn.Embedding: state_dict key "<layer>.weight",
  // [max_positions, D], its first T rows added); true, torchvision ViT's pos_embedding (a bare
  // nn.Parameter: key "<layer>", [1, max_positions, D], added whole, so T must equal
  // max_positions). class_token's parameter is always bare: key "<layer>", [1, 1, D].
  bool bare_parameter = false;
  // multihead_attention (nn.MultiheadAttention, batch_first; self-attention; `bias` as above)
  int64_t embed_dim = 0;  // also class_token's; 0: taken from the input; otherwise must match it
  int64_t num_heads = 1;  // must divide embed_dim
  bool causal = false;    // a token attends only to itself and earlier tokens
  double dropout = 0.0;   // on the attention weights, in training

  bool operator==(const LayerAttrs& o) const;
};

// A parameter a layer shares with another layer (GPT-2's lm_head.weight is transformer.wte.weight):
// one tensor that both layers use, trained with the sum of both uses' gradients
// (docs/formats.md, "Tied parameters"; planner/tied_parameters.h).
struct TiedParameter {
  TiedParameter() = default;
  TiedParameter(std::string parameter_name, std::string source_key)
      : parameter(std::move(parameter_name)), source(std::move(source_key)) {}
  std::string parameter;  // this layer's parameter, as torch.nn names it: "weight"
  std::string source;     // the state_dict key of the parameter it is: "transformer.wte.weight"
  // Filled in by Graph::Create: the source's layer id, its parameter name, the elements shared.
  int source_layer = -1;
  std::string source_parameter;
  int64_t elements = 0;
  bool operator==(const TiedParameter& o) const {
    return parameter == o.parameter && source == o.source;
  }
};

struct Layer {
  std::string name;
  Op op = Op::kRelu;
  std::vector<std::string> inputs;  // layer names, or kGraphInputName
  LayerAttrs attrs;
  std::vector<TiedParameter> tied;  // parameters this layer shares with others; most have none

  // Filled in by Graph::Create.
  std::vector<int> input_ids;  // index into Graph::layers(), or kGraphInputId
  Shape output_shape;
  int64_t params = 0;         // trainable parameters, tied ones included
  int64_t forward_flops = 0;  // per sample
  int64_t output_bytes = 0;   // per sample, fp32
};

// A graph output the loss is computed on; several outputs sum their weighted losses
// (Inception-v3's auxiliary classifier uses weight 0.4).
struct GraphOutput {
  std::string layer;
  double loss_weight = 1.0;
  bool operator==(const GraphOutput& o) const {
    return layer == o.layer && loss_weight == o.loss_weight;
  }
};

class Graph {
 public:
  // Validates and builds. Layers may come in any order; the result is topologically sorted
  // (a stable order: among ready layers, the one given first comes first). Empty outputs
  // means "the one layer nothing consumes". Errors name the layer and the field. An int64
  // input must be read by embedding layers only, and an embedding must read an int64 input.
  // Layers' ties are resolved and checked (tied_parameters.h).
  static StatusOr<Graph> Create(std::string name, Shape input_shape, std::vector<Layer> layers,
                                std::vector<GraphOutput> outputs = {},
                                DType input_dtype = DType::kFloat32);

  const std::string& name() const { return name_; }
  const Shape& input_shape() const { return input_shape_; }
  DType input_dtype() const { return input_dtype_; }
  // Per sample, in the input's dtype (8 bytes per token id).
  int64_t input_bytes() const { return NumElements(input_shape_) * DTypeBytes(input_dtype_); }
  const std::vector<Layer>& layers() const { return layers_; }
  const Layer& layer(int id) const { return layers_.at(static_cast<size_t>(id)); }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  std::optional<int> FindLayer(std::string_view name) const;
  // Layers that read layer `id`'s output, in topological order.
  const std::vector<int>& consumers(int id) const { return consumers_.at(static_cast<size_t>(id)); }
  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  std::vector<int> output_ids() const;

  int64_t total_params() const;  // each tied parameter counted once, as torch's parameters() do
  int64_t total_forward_flops() const;  // per sample

 private:
  Graph() = default;
  std::string name_;
  Shape input_shape_;
  DType input_dtype_ = DType::kFloat32;
  std::vector<Layer> layers_;
  std::vector<std::vector<int>> consumers_;
  std::vector<GraphOutput> outputs_;
  std::unordered_map<std::string, int> index_;  // layer name -> id
};

// JSON documents: {"format": "deepool.graph", "version": 1, ...} (docs/formats.md).
inline constexpr int kGraphFormatVersion = 1;
StatusOr<Graph> ParseGraphJson(std::string_view text);
std::string GraphToJson(const Graph& graph, int indent = 2);

}  // namespace deepool::planner
