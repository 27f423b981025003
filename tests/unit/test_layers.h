// Layers for the small graphs unit tests build by hand (Graph::Create infers their shapes).
#pragma once

#include <cstdint>
#include <string>

#include "planner/graph.h"

namespace deepool::testing {

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
