// DeviceLedger: which job holds each device. A device has at most one FG holder (a reservation
// from admission until the job ends) and at most one BG holder; a FG-held device also carries the
// fraction of each iteration its FG rank is predicted to leave idle (from the plan), which BG
// placement ranks devices by.
// Threading: a plain value, not thread-safe; the Scheduler guards its ledger with its lock, and
// admission works on a copy.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace deepool::coordinator {

using DeviceKey = std::pair<std::string, std::string>;  // (node id, device)

// How a device is used right now.
struct DeviceUse {
  std::string fg_job;
  std::string bg_job;
  double idle_fraction = 1.0;  // predicted from the FG plan; 1 when no FG job holds it
};

class DeviceLedger {
 public:
  // A FG job takes the device; its idleness is unknown (0) until SetIdleFraction.
  void HoldForeground(const DeviceKey& key, const std::string& job_id);
  void HoldBackground(const DeviceKey& key, const std::string& job_id);
  // The predicted idle fraction of a FG-held device's iteration, clamped to [0, 1].
  void SetIdleFraction(const DeviceKey& key, double idle);
  // Frees one device from its FG holder (devices beyond a plan's ranks).
  void ReleaseForeground(const DeviceKey& key);
  // Frees every device the job holds, FG or BG.
  void Release(const std::string& job_id);

  // The holder's job id, or nullopt.
  std::optional<std::string> ForegroundOf(const DeviceKey& key) const;
  std::optional<std::string> BackgroundOf(const DeviceKey& key) const;
  // Idle fraction of the device: 1 when no FG job holds it, 0 while its FG plan is unknown.
  double IdleFraction(const DeviceKey& key) const;
  // Whether IdleFraction is known: no FG job holds the device, or its holder's plan is known.
  bool IdleKnown(const DeviceKey& key) const;
  // Every device the job holds, FG or BG.
  std::vector<DeviceKey> DevicesOf(const std::string& job_id) const;
  // Jobs holding a device of the node.
  std::set<std::string> JobsOnNode(const std::string& node_id) const;
  // Every held device.
  std::map<DeviceKey, DeviceUse> Uses() const;

 private:
  std::map<DeviceKey, std::string> fg_;
  std::map<DeviceKey, std::string> bg_;
  std::map<DeviceKey, double> idle_;  // FG-held devices whose plan is known
};

}  // namespace deepool::coordinator
