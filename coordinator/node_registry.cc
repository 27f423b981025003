#include "coordinator/node_registry.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "common/host_port.h"
#include "common/logging.h"
#include "coordinator/device_memory.h"

namespace deepool::coordinator {

namespace {

// "1", or "1 to 2".
std::string Versions(int oldest, int newest) {
  return oldest == newest ? std::to_string(newest)
                          : std::to_string(oldest) + " to " + std::to_string(newest);
}

}  // namespace

StatusOr<protocol::ProtocolRange> NegotiateWorkerProtocol(int worker_newest, int worker_oldest,
                                                          protocol::ProtocolRange coordinator) {
  if (worker_oldest == 0) worker_oldest = worker_newest;  // a worker from before ranges
  if (worker_oldest > worker_newest) {
    return InvalidArgumentError("oldest_protocol_version " + std::to_string(worker_oldest) +
                                " is above protocol_version " + std::to_string(worker_newest));
  }
  const std::string speaks =
      "the worker speaks executor protocol " + Versions(worker_oldest, worker_newest) +
      " and this coordinator speaks " + Versions(coordinator.oldest, coordinator.newest) + "; ";
  if (worker_newest < coordinator.oldest) {
    return FailedPreconditionError(
        speaks + "the worker is older: upgrade it to a deepool release that speaks protocol " +
        std::to_string(coordinator.oldest) +
        " or newer (a worker from before protocol versioning sends 0)");
  }
  if (worker_oldest > coordinator.newest) {
    return FailedPreconditionError(
        speaks + "the coordinator is older: upgrade it to a deepool release that speaks protocol " +
        std::to_string(worker_oldest) + " or newer");
  }
  return protocol::ProtocolRange{std::max(worker_oldest, coordinator.oldest),
                                 std::min(worker_newest, coordinator.newest)};
}

const char* NodeStateName(NodeState state) {
  switch (state) {
    case NodeState::kUp:
      return "UP";
    case NodeState::kDraining:
      return "DRAINING";
    case NodeState::kDown:
      return "DOWN";
  }
  return "UNKNOWN";
}

std::string NodeRecord::host() const {
  // Register() checked the address, so it parses.
  StatusOr<HostPort> parsed = ParseHostOptionalPort(address);
  return parsed.ok() ? FormatHost(parsed->host) : address;
}

// No spaces, nothing that could move a terminal's cursor.
Status CheckPlainName(const std::string& field, const std::string& name) {
  if (name.empty() || name.size() > 64) {
    return InvalidArgumentError(field + ": must be 1 to 64 characters");
  }
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' &&
        c != ':') {
      return InvalidArgumentError(field + ": only letters, digits and . _ - : are allowed");
    }
  }
  return Status::Ok();
}

NodeRegistry::NodeRegistry(const Clock* clock, Clock::Duration node_timeout)
    : clock_(clock), node_timeout_(node_timeout) {}

StatusOr<NodeRecord> NodeRegistry::Register(const std::string& name, const std::string& address,
                                            const std::vector<DeviceInfo>& devices,
                                            protocol::ProtocolRange protocol) {
  RETURN_IF_ERROR(CheckPlainName("name", name));
  if (StatusOr<HostPort> parsed = ParseHostOptionalPort(address); !parsed.ok()) {
    return parsed.status().WithContext("address");
  }
  if (devices.empty()) return InvalidArgumentError("devices: a node needs at least one device");
  std::set<std::string> seen;
  for (size_t i = 0; i < devices.size(); ++i) {
    const std::string field = "devices[" + std::to_string(i) + "]";
    RETURN_IF_ERROR(CheckPlainName(field + ".device", devices[i].device));
    RETURN_IF_ERROR(CheckPlainName(field + ".type", devices[i].type));
    if (!seen.insert(devices[i].device).second) {
      return InvalidArgumentError(field + ".device: duplicate \"" + devices[i].device + "\"");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::string id = "node-" + name;
  NodeRecord& node = nodes_[id];
  const bool fresh = node.id.empty();
  node.id = id;
  node.name = name;
  node.address = address;
  node.devices = devices;
  node.protocol = protocol;
  node.state = node.drained ? NodeState::kDraining : NodeState::kUp;
  node.registered_ms = clock_->WallMillis();
  node.last_heartbeat_ms = node.registered_ms;
  node.last_seen = clock_->Now();
  DP_LOG_INFO("node {} {} at {} with {} devices, executor protocol {}", id,
              fresh ? "registered" : "re-registered", address, devices.size(), protocol.newest);
  return node;
}

Status NodeRegistry::Heartbeat(const std::string& node_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return NotFoundError("node " + node_id + " is not registered");
  if (it->second.state == NodeState::kDown) {
    return NotFoundError("node " + node_id + " was marked down; register again");
  }
  it->second.last_seen = clock_->Now();
  it->second.last_heartbeat_ms = clock_->WallMillis();
  return Status::Ok();
}

NodeRecord* NodeRegistry::FindLocked(const std::string& id_or_name) {
  auto it = nodes_.find(id_or_name);
  if (it != nodes_.end()) return &it->second;
  for (auto& [id, node] : nodes_) {
    if (node.name == id_or_name) return &node;
  }
  return nullptr;
}

StatusOr<NodeRecord> NodeRegistry::Drain(const std::string& node_name) {
  std::lock_guard<std::mutex> lock(mu_);
  NodeRecord* node = FindLocked(node_name);
  if (!node) return NotFoundError("node " + node_name + " not found");
  node->drained = true;
  if (node->state == NodeState::kUp) node->state = NodeState::kDraining;
  DP_LOG_INFO("node {} draining", node->id);
  return *node;
}

StatusOr<NodeRecord> NodeRegistry::Undrain(const std::string& node_name) {
  std::lock_guard<std::mutex> lock(mu_);
  NodeRecord* node = FindLocked(node_name);
  if (!node) return NotFoundError("node " + node_name + " not found");
  node->drained = false;
  if (node->state == NodeState::kDraining) node->state = NodeState::kUp;
  DP_LOG_INFO("node {} undrained", node->id);
  return *node;
}

std::vector<NodeRecord> NodeRegistry::ExpireSilent() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NodeRecord> expired;
  const Clock::TimePoint now = clock_->Now();
  for (auto& [id, node] : nodes_) {
    if (node.state != NodeState::kDown && now - node.last_seen > node_timeout_) {
      node.state = NodeState::kDown;
      DP_LOG_WARN("node {} silent for more than {} ms: down", id,
                  std::chrono::duration_cast<std::chrono::milliseconds>(node_timeout_).count());
      expired.push_back(node);
    }
  }
  return expired;
}

StatusOr<NodeRecord> NodeRegistry::Get(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(node_id);
  if (it == nodes_.end()) return NotFoundError("node " + node_id + " not found");
  return it->second;
}

std::optional<NodeRegistry::LargestDevice> NodeRegistry::LargestSchedulableDevice() const {
  std::lock_guard<std::mutex> lock(mu_);
  const NodeRecord* largest_node = nullptr;
  const DeviceInfo* largest = nullptr;
  int64_t largest_bytes = 0;
  for (const auto& [id, node] : nodes_) {
    if (!node.schedulable()) continue;
    for (const DeviceInfo& device : node.devices) {
      const int64_t bytes = DeviceMemoryBytes(device);
      if (bytes > largest_bytes) {
        largest = &device;
        largest_node = &node;
        largest_bytes = bytes;
      }
    }
  }
  if (!largest) return std::nullopt;
  return LargestDevice{largest_node->name, *largest, largest_bytes};
}

std::vector<NodeRecord> NodeRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NodeRecord> out;
  for (const auto& [id, node] : nodes_) out.push_back(node);
  return out;
}

}  // namespace deepool::coordinator
