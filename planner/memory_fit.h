// What the burst-parallel search (search.cc) does with device memory: which device counts each
// layer may take, whether a plan's counts fit, a repair of counts that do not, and the error
// when nothing fits (docs/planner.md, "Memory"). Internal to the search.
// Threading: MemoryFit is immutable after construction; its functions are pure.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "common/status.h"
#include "planner/memory_model.h"

namespace deepool::planner {

class MemoryFit {
 public:
  // capacity_bytes 0: unchecked (everything fits).
  MemoryFit(const MemoryModel& model, int64_t capacity_bytes)
      : model_(model), capacity_bytes_(capacity_bytes) {}

  bool checked() const { return capacity_bytes_ > 0; }
  int64_t capacity_bytes() const { return capacity_bytes_; }
  const MemoryModel& model() const { return model_; }

  // Per layer, the fewest of `candidates` (ascending) devices on which the layer alone fits
  // (MemoryModel::LayerBytes), among counts up to its most_per_layer. RESOURCE_EXHAUSTED naming
  // the first layer that fits on none: what it needs on its most devices, by part, and the
  // capacity. Unchecked: every layer's first candidate.
  StatusOr<std::vector<int>> FewestDevicesPerLayer(const std::vector<int>& candidates,
                                                   const std::vector<int>& most_per_layer) const;

  // Whether rank 0 of a plan with these counts (the most loaded device) fits.
  bool Fits(const std::vector<int>& counts) const;

  // A layer's device time (devices x its time) on a count; infinity where it cannot run there.
  using DeviceMs = std::function<double(int layer_id, int devices)>;
  // `counts` made to fit by moving layers, one at a time, to the next larger candidate count
  // within most_per_layer: the move that saves the most bytes per device-millisecond it adds
  // (device_ms) first, so cheaply widened layers go first and the plan stays near the
  // amplification limit; nothing when no move is left. Counts that fit come back unchanged.
  std::optional<std::vector<int>> Repair(std::vector<int> counts,
                                         const std::vector<int>& candidates,
                                         const std::vector<int>& most_per_layer,
                                         const DeviceMs& device_ms) const;

  // RESOURCE_EXHAUSTED for a request no plan fits: what the least-memory plan (`widest`, every
  // layer on its most devices) needs on its most loaded device against the capacity, and the
  // layer that needs the most there, on how many devices.
  Status NothingFitsError(const std::vector<int>& widest) const;

 private:
  const MemoryModel& model_;
  int64_t capacity_bytes_;
};

}  // namespace deepool::planner
