// DeviceIndex: a policy snapshot's devices by position (their index in PolicySnapshot::devices),
// with what every round asks of them precomputed: the position of a (node, device) key, each
// device's type and node as small integers, and each type's devices. A policy round keys its
// state by position instead of by (node, device) strings, so a round costs integer work; a
// caller whose devices rarely change (the pool simulator; the coordinator between node
// registrations) builds one index and hands it to every round through
// PolicySnapshot::device_index.
// Threading: immutable after construction; shared between rounds and threads.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/policy/policy.h"

namespace deepool::coordinator::policy {

class DeviceIndex {
 public:
  explicit DeviceIndex(const std::vector<PolicyDevice>& devices);

  // The number of devices indexed.
  int size() const { return static_cast<int>(type_of_.size()); }
  // The key's position, or -1 when the index does not hold it.
  int Find(const DeviceKey& key) const;
  // Device types in name order.
  const std::vector<std::string>& Types() const { return types_; }
  // The position of `type` in Types(), or -1.
  int TypeId(const std::string& type) const;
  // Its type's position in Types().
  int TypeOf(int device) const { return type_of_[static_cast<size_t>(device)]; }
  // Its node's rank among the node ids in name order.
  int NodeRankOf(int device) const { return node_rank_of_[static_cast<size_t>(device)]; }
  // Positions of the devices of Types()[type], ascending.
  const std::vector<int>& OfType(int type) const { return of_type_[static_cast<size_t>(type)]; }

 private:
  struct KeyHash {
    size_t operator()(const DeviceKey& key) const {
      return std::hash<std::string>()(key.first) * 31 + std::hash<std::string>()(key.second);
    }
  };

  std::unordered_map<DeviceKey, int, KeyHash> position_;
  std::vector<std::string> types_;
  std::vector<int> type_of_;
  std::vector<int> node_rank_of_;
  std::vector<std::vector<int>> of_type_;
};

}  // namespace deepool::coordinator::policy
