#include "planner/zoo/layer_list_builder.h"

#include <utility>

namespace deepool::planner::zoo {

std::string LayerListBuilder::Append(std::string name, Op op, std::vector<std::string> inputs,
                                     const LayerAttrs& attrs) {
  Layer layer;
  layer.name = std::move(name);
  layer.op = op;
  layer.inputs = std::move(inputs);
  layer.attrs = attrs;
  layers_.push_back(std::move(layer));
  return layers_.back().name;
}

std::string LayerListBuilder::Conv2d(std::string name, std::string input, const ConvSpec& spec) {
  LayerAttrs attrs;
  attrs.in_channels = spec.in_channels;
  attrs.out_channels = spec.out_channels;
  attrs.kernel_size = spec.kernel;
  attrs.stride = spec.stride;
  attrs.padding = spec.padding;
  attrs.dilation = spec.dilation;
  attrs.groups = spec.groups;
  attrs.bias = spec.bias;
  return Append(std::move(name), Op::kConv2d, {std::move(input)}, attrs);
}

std::string LayerListBuilder::BatchNorm2d(std::string name, std::string input, double eps) {
  LayerAttrs attrs;
  attrs.eps = eps;
  return Append(std::move(name), Op::kBatchNorm2d, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Relu(std::string name, std::string input) {
  return Append(std::move(name), Op::kRelu, {std::move(input)}, LayerAttrs{});
}

std::string LayerListBuilder::MaxPool2d(std::string name, std::string input, Pair kernel,
                                        Pair stride, Pair padding) {
  LayerAttrs attrs;
  attrs.kernel_size = kernel;
  attrs.stride = stride;
  attrs.padding = padding;
  return Append(std::move(name), Op::kMaxPool2d, {std::move(input)}, attrs);
}

std::string LayerListBuilder::AvgPool2d(std::string name, std::string input, Pair kernel,
                                        Pair stride, Pair padding) {
  LayerAttrs attrs;
  attrs.kernel_size = kernel;
  attrs.stride = stride;
  attrs.padding = padding;
  return Append(std::move(name), Op::kAvgPool2d, {std::move(input)}, attrs);
}

std::string LayerListBuilder::AdaptiveAvgPool2d(std::string name, std::string input,
                                                Pair output_size) {
  LayerAttrs attrs;
  attrs.output_size = output_size;
  return Append(std::move(name), Op::kAdaptiveAvgPool2d, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Flatten(std::string name, std::string input) {
  return Append(std::move(name), Op::kFlatten, {std::move(input)}, LayerAttrs{});
}

std::string LayerListBuilder::Flatten(std::string name, std::string input, int64_t start_dim,
                                      int64_t end_dim) {
  LayerAttrs attrs;
  attrs.start_dim = start_dim;
  attrs.end_dim = end_dim;
  return Append(std::move(name), Op::kFlatten, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Transpose(std::string name, std::string input, int64_t dim0,
                                        int64_t dim1) {
  LayerAttrs attrs;
  attrs.dim0 = dim0;
  attrs.dim1 = dim1;
  return Append(std::move(name), Op::kTranspose, {std::move(input)}, attrs);
}

std::string LayerListBuilder::ClassToken(std::string name, std::string input) {
  return Append(std::move(name), Op::kClassToken, {std::move(input)}, LayerAttrs{});
}

std::string LayerListBuilder::Select(std::string name, std::string input, int64_t dim,
                                     int64_t index) {
  LayerAttrs attrs;
  attrs.dim = dim;
  attrs.index = index;
  return Append(std::move(name), Op::kSelect, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Mean(std::string name, std::string input, int64_t dim) {
  LayerAttrs attrs;
  attrs.dim = dim;
  return Append(std::move(name), Op::kMean, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Dropout(std::string name, std::string input, double p) {
  LayerAttrs attrs;
  attrs.p = p;
  return Append(std::move(name), Op::kDropout, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Linear(std::string name, std::string input, int64_t in_features,
                                     int64_t out_features, bool bias) {
  LayerAttrs attrs;
  attrs.in_features = in_features;
  attrs.out_features = out_features;
  attrs.bias = bias;
  return Append(std::move(name), Op::kLinear, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Concat(std::string name, std::vector<std::string> inputs) {
  return Append(std::move(name), Op::kConcat, std::move(inputs), LayerAttrs{});
}

std::string LayerListBuilder::Add(std::string name, std::vector<std::string> inputs) {
  return Append(std::move(name), Op::kAdd, std::move(inputs), LayerAttrs{});
}

std::string LayerListBuilder::LayerNorm(std::string name, std::string input, int64_t features,
                                        double eps) {
  LayerAttrs attrs;
  attrs.normalized_shape = {features};
  attrs.eps = eps;
  return Append(std::move(name), Op::kLayerNorm, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Gelu(std::string name, std::string input, std::string approximate) {
  LayerAttrs attrs;
  attrs.approximate = std::move(approximate);
  return Append(std::move(name), Op::kGelu, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Embedding(std::string name, std::string input, int64_t num_embeddings,
                                        int64_t embedding_dim) {
  LayerAttrs attrs;
  attrs.num_embeddings = num_embeddings;
  attrs.embedding_dim = embedding_dim;
  return Append(std::move(name), Op::kEmbedding, {std::move(input)}, attrs);
}

std::string LayerListBuilder::PositionEmbedding(std::string name, std::string input,
                                                int64_t max_positions) {
  LayerAttrs attrs;
  attrs.max_positions = max_positions;
  return Append(std::move(name), Op::kPositionEmbedding, {std::move(input)}, attrs);
}

std::string LayerListBuilder::BarePositionEmbedding(std::string name, std::string input,
                                                    int64_t tokens) {
  LayerAttrs attrs;
  attrs.max_positions = tokens;
  attrs.bare_parameter = true;
  return Append(std::move(name), Op::kPositionEmbedding, {std::move(input)}, attrs);
}

std::string LayerListBuilder::MultiheadAttention(std::string name, std::string input,
                                                 int64_t embed_dim, int64_t num_heads, bool causal,
                                                 double dropout) {
  LayerAttrs attrs;
  attrs.embed_dim = embed_dim;
  attrs.num_heads = num_heads;
  attrs.causal = causal;
  attrs.dropout = dropout;
  return Append(std::move(name), Op::kMultiheadAttention, {std::move(input)}, attrs);
}

}  // namespace deepool::planner::zoo
