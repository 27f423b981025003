// NodeRegistry: the worker nodes the coordinator knows, their devices and liveness.
// A node is UP after RegisterNode, DRAINING when an operator drains it (up, but takes no new
// tasks), DOWN when it has been silent for longer than the node timeout on the injected clock.
// A node keeps its id across re-registrations: the id follows the node's name.
// Threading: all methods are safe to call from any thread (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "protocol/version.h"

namespace deepool::coordinator {

struct DeviceInfo {
  std::string device;  // "cuda:0", "cpu:1"
  std::string type;    // "a100", "cpu", ...
  int64_t memory_bytes = 0;
};

enum class NodeState { kUp, kDraining, kDown };
const char* NodeStateName(NodeState state);

struct NodeRecord {
  std::string id;
  std::string name;
  std::string address;
  std::vector<DeviceInfo> devices;
  // The executor protocol versions its worker and this coordinator have in common
  // (NegotiateWorkerProtocol): a run spec of version v may go to the node when it Contains(v);
  // protocol.newest is the version the coordinator uses with it.
  protocol::ProtocolRange protocol;
  NodeState state = NodeState::kUp;
  bool drained = false;  // kept across re-registration and DOWN
  int64_t registered_ms = 0;
  int64_t last_heartbeat_ms = 0;
  Clock::TimePoint last_seen{};

  bool schedulable() const { return state == NodeState::kUp; }
  // The host part of the address, ready for ":PORT" to be appended: "10.0.0.5" of
  // "10.0.0.5:7000", "[::1]" of "[::1]:7000", "::1" or "[::1]".
  std::string host() const;
};

// The executor protocol versions (protocol/version.h) a worker and the coordinator have in
// common: the overlap of the worker's [worker_oldest, worker_newest] (RegisterNodeRequest's
// oldest_protocol_version and protocol_version) and the coordinator's range. Its newest is the
// version they use: the newest both speak. A worker from before version ranges sends
// worker_oldest 0, meaning it speaks worker_newest only; one from before versioning sends
// worker_newest 0 too. FAILED_PRECONDITION when the ranges do not overlap, saying which side is
// older and what to upgrade; INVALID_ARGUMENT when worker_oldest > worker_newest.
StatusOr<protocol::ProtocolRange> NegotiateWorkerProtocol(int worker_newest, int worker_oldest,
                                                          protocol::ProtocolRange coordinator);
// A node or device name as shown in tables and logs: 1 to 64 letters, digits and . _ - :
// (INVALID_ARGUMENT naming `field` otherwise).
Status CheckPlainName(const std::string& field, const std::string& name);

class NodeRegistry {
 public:
  NodeRegistry(const Clock* clock, Clock::Duration node_timeout);

  // Registers (or re-registers) a node whose worker has `protocol` in common with this
  // coordinator (NegotiateWorkerProtocol; by default this build's whole range).
  // INVALID_ARGUMENT naming the field for an empty name, no devices, or duplicate device names.
  StatusOr<NodeRecord> Register(const std::string& name, const std::string& address,
                                const std::vector<DeviceInfo>& devices,
                                protocol::ProtocolRange protocol = {});
  // NOT_FOUND for an unknown node or one marked DOWN (it must register again).
  Status Heartbeat(const std::string& node_id);
  // Accepts an id or a name. NOT_FOUND when neither matches.
  StatusOr<NodeRecord> Drain(const std::string& node);
  StatusOr<NodeRecord> Undrain(const std::string& node);
  // Marks nodes silent past the timeout DOWN and returns them (only the newly expired).
  std::vector<NodeRecord> ExpireSilent();

  StatusOr<NodeRecord> Get(const std::string& node_id) const;
  std::vector<NodeRecord> List() const;  // by name
  // The schedulable device with the most memory (DeviceMemoryBytes, device_memory.h: reported,
  // else its type preset's) and its node's name, found without copying the registry (every
  // submission asks); nullopt when there is none whose memory is known.
  struct LargestDevice {
    std::string node_name;
    DeviceInfo device;
    int64_t memory_bytes = 0;  // DeviceMemoryBytes(device)
  };
  std::optional<LargestDevice> LargestSchedulableDevice() const;
  Clock::Duration node_timeout() const { return node_timeout_; }

 private:
  NodeRecord* FindLocked(const std::string& id_or_name);

  const Clock* clock_;
  const Clock::Duration node_timeout_;
  mutable std::mutex mu_;
  std::map<std::string, NodeRecord> nodes_;  // by id
};

}  // namespace deepool::coordinator
