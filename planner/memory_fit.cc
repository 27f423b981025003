// Device memory in the search (memory_fit.h).
#include "planner/memory_fit.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace deepool::planner {
namespace {

// "weights, gradients and optimizer 1.00 GiB, activations ..." for one layer on `devices`.
std::string LayerParts(const MemoryModel& model, int layer_id, int devices) {
  const LayerMemory& m = model.layer(layer_id);
  const int64_t share = model.LargestShare(devices);
  return "weights, gradients and optimizer state " + GiBString(m.state_bytes()) +
         ", activations kept for backward " +
         GiBString(m.fixed_saved_bytes + m.saved_bytes_per_sample * share) + ", workspace " +
         GiBString(m.workspace_bytes_per_sample * share) + " at " + std::to_string(share) +
         " samples per device";
}

}  // namespace

StatusOr<std::vector<int>> MemoryFit::FewestDevicesPerLayer(
    const std::vector<int>& candidates, const std::vector<int>& most_per_layer) const {
  const int num_layers = model_.graph().num_layers();
  std::vector<int> fewest(static_cast<size_t>(num_layers), candidates.front());
  if (!checked()) return fewest;
  for (int id = 0; id < num_layers; ++id) {
    const int most = most_per_layer[static_cast<size_t>(id)];
    bool found = false;
    for (int count : candidates) {
      if (count > most) break;
      if (model_.LayerBytes(id, count) <= capacity_bytes_) {
        fewest[static_cast<size_t>(id)] = count;
        found = true;
        break;
      }
    }
    if (!found) {
      return ResourceExhaustedError(
          "layer '" + model_.graph().layer(id).name + "' does not fit in device memory: on " +
          std::to_string(most) + " devices (the most it may use) it needs " +
          GiBString(model_.LayerBytes(id, most)) + " on each (" + LayerParts(model_, id, most) +
          "), more than the " + GiBString(capacity_bytes_) + " a device has for a plan");
    }
  }
  return fewest;
}

bool MemoryFit::Fits(const std::vector<int>& counts) const {
  return !checked() || model_.PeakOfCounts(counts).total() <= capacity_bytes_;
}

std::optional<std::vector<int>> MemoryFit::Repair(std::vector<int> counts,
                                                  const std::vector<int>& candidates,
                                                  const std::vector<int>& most_per_layer,
                                                  const DeviceMs& device_ms) const {
  // A move that adds no device time (or saves some) counts as adding this little.
  constexpr double kLeastAddedMs = 1e-9;
  while (!Fits(counts)) {
    int best_layer = -1;
    int best_count = 0;
    double best_ratio = 0;
    for (size_t id = 0; id < counts.size(); ++id) {
      const auto next = std::upper_bound(candidates.begin(), candidates.end(), counts[id]);
      if (next == candidates.end() || *next > most_per_layer[id]) continue;
      const int layer = static_cast<int>(id);
      const int64_t saving = model_.LayerBytes(layer, counts[id]) - model_.LayerBytes(layer, *next);
      const double added_ms = device_ms(layer, *next) - device_ms(layer, counts[id]);
      if (saving <= 0 || !std::isfinite(added_ms)) continue;
      const double ratio = static_cast<double>(saving) / std::max(added_ms, kLeastAddedMs);
      if (ratio > best_ratio) {
        best_ratio = ratio;
        best_layer = layer;
        best_count = *next;
      }
    }
    if (best_layer < 0) return std::nullopt;  // no move saves anything
    counts[static_cast<size_t>(best_layer)] = best_count;
  }
  return counts;
}

Status MemoryFit::NothingFitsError(const std::vector<int>& widest) const {
  const DeviceMemory peak = model_.PeakOfCounts(widest);
  int largest = 0;
  for (int id = 1; id < model_.graph().num_layers(); ++id) {
    const auto count = [&](int layer) { return widest[static_cast<size_t>(layer)]; };
    if (model_.LayerBytes(id, count(id)) > model_.LayerBytes(largest, count(largest))) largest = id;
  }
  const int devices = widest[static_cast<size_t>(largest)];
  return ResourceExhaustedError(
      "no plan fits in device memory: with every layer on the most devices it may use, the "
      "first device needs " +
      GiBString(peak.total()) + " (weights, gradients and optimizer state " +
      GiBString(peak.state_bytes) + ", activations " + GiBString(peak.activation_bytes) +
      ", workspace " + GiBString(peak.workspace_bytes) + ", gradient buckets " +
      GiBString(peak.communication_bytes) + "), more than the " + GiBString(capacity_bytes_) +
      " a device has for a plan; the layer that needs the most is '" +
      model_.graph().layer(largest).name + "', " + GiBString(model_.LayerBytes(largest, devices)) +
      " on " + std::to_string(devices) + " devices (" + LayerParts(model_, largest, devices) +
      "); use more devices, a smaller global batch or a device with more memory");
}

}  // namespace deepool::planner
