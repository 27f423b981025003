#include "simulator/node_contention.h"

#include <algorithm>
#include <cmath>

namespace deepool::simulator {

Status ValidateNodeContention(const NodeContention& contention) {
  const std::string where = "node contention of '" + contention.device_type + "': ";
  if (contention.device_type.empty())
    return InvalidArgumentError("node contention: a device type is required");
  if (contention.devices_per_node < 1)
    return InvalidArgumentError(where + "devices_per_node must be at least 1");
  if (contention.slowdown.empty() || contention.slowdown.front() != 1) {
    return InvalidArgumentError(where + "slowdown must start at 1 (one device in use)");
  }
  for (size_t k = 1; k < contention.slowdown.size(); ++k) {
    const double value = contention.slowdown[k];
    if (!std::isfinite(value) || value < contention.slowdown[k - 1]) {
      return InvalidArgumentError(where + "slowdown must be finite and non-decreasing (at " +
                                  std::to_string(k + 1) + " devices)");
    }
  }
  return Status::Ok();
}

double NodeSlowdown(const NodeContention& contention, double devices_in_use) {
  const std::vector<double>& table = contention.slowdown;
  if (devices_in_use <= 1 || table.size() < 2) return table.empty() ? 1 : table.front();
  const double last = static_cast<double>(table.size());
  if (devices_in_use >= last) return table.back();
  const size_t below = static_cast<size_t>(std::floor(devices_in_use));  // k = below, index - 1
  const double above_share = devices_in_use - static_cast<double>(below);
  return table[below - 1] + above_share * (table[below] - table[below - 1]);
}

double ContentionFactor(const NodeContention& contention, int type_devices, double devices_in_use,
                        int own_devices) {
  const int per_node = contention.devices_per_node;
  const int nodes = std::max(1, (type_devices + per_node - 1) / per_node);
  const double own = std::min(std::max(own_devices, 1), per_node);
  const double load = std::max(own, devices_in_use / nodes);
  return NodeSlowdown(contention, load) / NodeSlowdown(contention, own);
}

}  // namespace deepool::simulator
