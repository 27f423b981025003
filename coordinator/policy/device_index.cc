#include "coordinator/policy/device_index.h"

#include <algorithm>
#include <map>

namespace deepool::coordinator::policy {

DeviceIndex::DeviceIndex(const std::vector<PolicyDevice>& devices) {
  std::map<std::string, int> type_ids;
  std::map<std::string, int> node_ranks;
  for (const PolicyDevice& device : devices) {
    type_ids.emplace(device.type, 0);
    node_ranks.emplace(device.key.first, 0);
  }
  for (auto& [type, id] : type_ids) {
    id = static_cast<int>(types_.size());
    types_.push_back(type);
  }
  int rank = 0;
  for (auto& [node, node_rank] : node_ranks) node_rank = rank++;
  of_type_.resize(types_.size());
  position_.reserve(devices.size());
  type_of_.reserve(devices.size());
  node_rank_of_.reserve(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    const PolicyDevice& device = devices[i];
    const int position = static_cast<int>(i);
    position_[device.key] = position;  // a repeated key keeps its last position
    type_of_.push_back(type_ids.at(device.type));
    node_rank_of_.push_back(node_ranks.at(device.key.first));
    of_type_[static_cast<size_t>(type_of_.back())].push_back(position);
  }
}

int DeviceIndex::Find(const DeviceKey& key) const {
  const auto found = position_.find(key);
  return found == position_.end() ? -1 : found->second;
}

int DeviceIndex::TypeId(const std::string& type) const {
  const auto found = std::lower_bound(types_.begin(), types_.end(), type);
  return found == types_.end() || *found != type ? -1 : static_cast<int>(found - types_.begin());
}

}  // namespace deepool::coordinator::policy
