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

}  // namespace deepool::testing
