// Per-layer timing profiles: forward and backward time of each graph layer as a function of the
// per-device batch. Sources: a profile JSON file (measured by the runtime's profiler), the
// reference A100 files, or an analytical device model (see profile_table.h, device_model.h).
// Threading: implementations are immutable after construction and safe to share.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "planner/profile_environment.h"

namespace deepool::planner {

class Graph;

struct LayerTime {
  double forward_ms = 0;
  double backward_ms = 0;
  double total_ms() const { return forward_ms + backward_ms; }
};

class Profile {
 public:
  virtual ~Profile() = default;
  // Where the numbers come from, for plans and reports ("file:vgg.json", "analytical:a100").
  virtual std::string source() const = 0;
  // Time of graph layer `layer_id` at a per-device batch of `batch` (>= 1) samples.
  // Errors (NOT_FOUND for an unprofiled layer, OUT_OF_RANGE beyond the measured batches)
  // name the layer.
  virtual StatusOr<LayerTime> Time(const Graph& graph, int layer_id, int64_t batch) const = 0;
  // The iteration's work outside the layers (loss, data, autograd, optimizer step) when each
  // device holds `batch` samples of the output layer; 0 where the source does not measure it.
  virtual double IterationOverheadMs(int64_t /*batch*/) const { return 0; }
  // What the times were measured on; nullptr where the source does not say (analytical models,
  // reference files, profiles measured before it was recorded).
  virtual const ProfileEnvironment* environment() const { return nullptr; }
};

}  // namespace deepool::planner
