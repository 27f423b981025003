// For profiler tests: a layer profile of fixed times, to measure what lies outside the layers
// (the iteration overhead) against known layer sums.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/graph.h"
#include "planner/profile_table.h"

namespace deepool::worker::testing {

// Every layer of `graph` timed `ms` forward and backward at each of `batches`.
inline planner::ProfileData UniformProfile(const planner::Graph& graph,
                                           const std::vector<int64_t>& batches, double ms) {
  planner::ProfileData data;
  data.model = graph.name();
  for (const planner::Layer& layer : graph.layers()) {
    planner::LayerProfileData entry;
    entry.name = layer.name;
    for (int64_t b : batches) entry.batches.push_back({b, ms, ms});
    data.layers.push_back(entry);
  }
  return data;
}

}  // namespace deepool::worker::testing
