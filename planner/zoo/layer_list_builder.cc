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

std::string LayerListBuilder::Dropout(std::string name, std::string input, double p) {
  LayerAttrs attrs;
  attrs.p = p;
  return Append(std::move(name), Op::kDropout, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Linear(std::string name, std::string input, int64_t in_features,
                                     int64_t out_features) {
  LayerAttrs attrs;
  attrs.in_features = in_features;
  attrs.out_features = out_features;
  return Append(std::move(name), Op::kLinear, {std::move(input)}, attrs);
}

std::string LayerListBuilder::Concat(std::string name, std::vector<std::string> inputs) {
  return Append(std::move(name), Op::kConcat, std::move(inputs), LayerAttrs{});
}

std::string LayerListBuilder::Add(std::string name, std::vector<std::string> inputs) {
  return Append(std::move(name), Op::kAdd, std::move(inputs), LayerAttrs{});
}

}  // namespace deepool::planner::zoo
