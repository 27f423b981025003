// PoolState: one round's view of a policy snapshot's devices, changed as the round decides: which
// device each FG and BG job holds, the free devices of each type, and the placement rules every
// policy shares (admission.h's): packing a FG job on as few nodes as possible, BG jobs on the
// idlest device. Internal to deepool_policy.
// Threading: a plain value owned by one Decide call.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/policy/policy.h"

namespace deepool::coordinator::policy {

class PoolState {
 public:
  // Holders from the snapshot's placed jobs; free devices are those no FG job holds.
  explicit PoolState(const PolicySnapshot& snapshot);

  // Device types with devices in the pool, in name order (computed once: a round asks per job).
  const std::vector<std::string>& Types() const { return types_; }
  // Free devices of `type` on nodes that read `version`, in snapshot order.
  std::vector<DeviceKey> FreeOf(const std::string& type, int version) const;
  int FreeCount(const std::string& type, int version) const;
  // The most schedulable devices of one type on nodes that read `version` (0: any).
  int LargestGroup(int version) const;
  int DevicesOfType(const std::string& type) const;

  // `count` of `free` (devices of one type) on as few nodes as possible: the nodes with the most
  // free devices first, within a node the devices without a BG job first. Admit's packing.
  std::vector<DeviceKey> Pack(const std::vector<DeviceKey>& free, int count) const;
  // The FG job takes the devices: BG jobs on them make way (appended to *preempted).
  void HoldForeground(const std::string& job_id, const std::vector<DeviceKey>& devices,
                      std::vector<Preemption>* preempted);
  // Frees every device the job holds (a preempted job).
  void Release(const std::string& job_id);

  // A BG job's place: the idlest device without a BG job on a node reading its version, or why
  // it waits. Holds the device when one is granted.
  struct BackgroundChoice {
    std::optional<Grant> grant;
    std::optional<Wait> wait;
  };
  BackgroundChoice PlaceBackground(const PolicyJob& job);

  std::optional<std::string> ForegroundOf(const DeviceKey& key) const;
  std::optional<std::string> BackgroundOf(const DeviceKey& key) const;
  // Devices the FG job holds after the round's changes so far.
  int HeldBy(const std::string& job_id) const;

 private:
  const PolicySnapshot& snapshot_;
  std::map<DeviceKey, const PolicyDevice*> device_;
  std::map<DeviceKey, std::string> fg_;
  std::map<DeviceKey, std::string> bg_;
  std::vector<std::string> types_;
  std::map<std::string, int> devices_of_type_;
  std::map<DeviceKey, int> index_;             // position in snapshot_.devices
  std::map<std::string, std::set<int>> free_;  // by type: indices of devices no FG job holds
  std::set<DeviceKey> taken_this_round_;       // FG-held from this round: idleness unknown (0)
  mutable std::map<int, int> largest_group_;   // LargestGroup by version
};

// A job's iteration time on `g` devices of `type`: its curve's, else 1 / g (perfect scaling).
double IterationSeconds(const PolicyJob& job, const std::string& type, int g);
// Samples per second on `g` devices of `type`.
double Throughput(const PolicyJob& job, const std::string& type, int g);
// Its throughput on its requested count of its fastest type among `types` (>0).
double BestThroughput(const PolicyJob& job, const std::vector<std::string>& types);
// Whether the job may run on `type`.
bool RunsOn(const PolicyJob& job, const std::string& type);
// Each user's share after the round: FG jobs' throughput on what they hold over their best.
std::vector<UserShare> SharesOf(const PolicySnapshot& snapshot,
                                const std::map<std::string, std::pair<std::string, int>>& held,
                                const std::vector<std::string>& types);
// Snapshot jobs in admission order: priority first, then submission order (pointers into it).
std::vector<const PolicyJob*> AdmissionOrder(const PolicySnapshot& snapshot);
// "37%".
std::string Percent(double fraction);

}  // namespace deepool::coordinator::policy
