// How long a worker keeps its tasks while the coordinator does not answer, unless its
// --coordinator-lease-s says otherwise: the coordinator's node timeout less one heartbeat
// interval (by then the coordinator has declared the node DOWN and given its devices away), at
// least one heartbeat. Workers learn both at registration; the coordinator sizes its leader
// lease by it (coordinator/leader_lease.h).
#pragma once

#include <algorithm>
#include <chrono>

namespace deepool {

inline std::chrono::milliseconds DefaultWorkerLease(std::chrono::milliseconds node_timeout,
                                                    std::chrono::milliseconds heartbeat) {
  return std::max(node_timeout - heartbeat, heartbeat);
}

}  // namespace deepool
