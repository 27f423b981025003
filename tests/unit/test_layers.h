// Layers for the small graphs unit tests build by hand (Graph::Create infers their shapes), and
// the zoo's graphs as they are.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "planner/graph.h"
#include "planner/zoo/zoo.h"

namespace deepool::testing {

// A layer `name` of `op` reading `inputs`, with `attrs`.
inline planner::Layer MakeLayer(std::string name, planner::Op op, std::vector<std::string> inputs,
                                planner::LayerAttrs attrs = {}) {
  planner::Layer layer;
  layer.name = std::move(name);
  layer.op = op;
  layer.inputs = std::move(inputs);
  layer.attrs = std::move(attrs);
  return layer;
}

// The zoo's model `name` with its default options; the test stops if the zoo refuses it.
inline planner::Graph ZooModel(const std::string& name) {
  auto graph = planner::zoo::BuildModel(name);
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

// A linear layer `name` reading `input`, with `out_features` outputs.
inline planner::Layer LinearLayer(const std::string& name, const std::string& input,
                                  int64_t out_features) {
  planner::Layer layer;
  layer.name = name;
  layer.op = planner::Op::kLinear;
  layer.inputs = {input};
  layer.attrs.out_features = out_features;
  return layer;
}

// input [C,H,W] -> conv C->conv_channels 3x3 (padding 1) -> relu -> maxpool 2x2 -> flatten ->
// linear 10: every op a small CNN has, for tests that profile or cost a whole graph.
inline planner::Graph ConvPoolLinearGraph(const std::string& name,
                                          const planner::Shape& input_shape,
                                          int64_t conv_channels) {
  planner::LayerAttrs conv;
  conv.out_channels = conv_channels;
  conv.kernel_size = {3, 3};
  conv.padding = {1, 1};
  planner::LayerAttrs pool;
  pool.kernel_size = {2, 2};
  pool.stride = {2, 2};
  planner::LayerAttrs fc;
  fc.out_features = 10;
  using planner::Op;
  auto graph = planner::Graph::Create(
      name, input_shape,
      {MakeLayer("conv", Op::kConv2d, {"input"}, conv), MakeLayer("relu", Op::kRelu, {"conv"}),
       MakeLayer("pool", Op::kMaxPool2d, {"relu"}, pool),
       MakeLayer("flatten", Op::kFlatten, {"pool"}),
       MakeLayer("fc", Op::kLinear, {"flatten"}, fc)});
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

}  // namespace deepool::testing
