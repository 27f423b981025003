// PoolState: one round's view of a policy snapshot's devices, changed as the round decides: which
// device each FG and BG job holds, the free devices of each type, and the placement rules every
// policy shares (admission.h's): packing a FG job on as few nodes as possible, BG jobs on the
// idlest device. Internal to deepool_policy.
// Threading: a plain value owned by one Decide call.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/policy/device_index.h"
#include "coordinator/policy/job_rates.h"
#include "coordinator/policy/policy.h"

namespace deepool::coordinator::policy {

class PoolState {
 public:
  // Holders from the snapshot's placed jobs; free devices are those no FG job holds. A placed
  // job's device that the snapshot does not list is ignored. Devices are named by their position
  // in snapshot.devices throughout; jobs are references into snapshot.jobs.
  explicit PoolState(const PolicySnapshot& snapshot);

  // Device types with devices in the pool, in name order (computed once: a round asks per job).
  // A type is named by its position here (a type id) where a round asks per job.
  const std::vector<std::string>& Types() const;
  // The id of `type`, or -1 when the pool has none of it.
  int TypeId(const std::string& type) const;
  // The jobs' curves by type id, found once a round.
  const JobRates& Rates() const { return rates_; }
  // Free devices of Types()[type] on nodes that read `version`, in snapshot order.
  std::vector<int> FreeOf(int type, int version) const;
  int FreeCount(int type, int version) const;
  // The most schedulable devices of one type on nodes that read `version` (0: any).
  int LargestGroup(int version) const;
  int DevicesOfType(int type) const;
  // The devices' keys, for a Grant.
  std::vector<DeviceKey> Keys(const std::vector<int>& devices) const;

  // `count` of `free` (devices of one type) on as few nodes as possible: the nodes with the most
  // free devices first (ties in node id order), within a node the devices without a BG job
  // first, each group in the order `free` gives. Admit's packing.
  std::vector<int> Pack(const std::vector<int>& free, int count) const;
  // The FG job takes the devices: BG jobs on them make way (appended to *preempted).
  void HoldForeground(const PolicyJob& job, const std::vector<int>& devices,
                      std::vector<Preemption>* preempted);
  // Frees every device the job holds (a preempted job).
  void Release(const PolicyJob& job);

  // A BG job's place: the idlest device without a BG job on a node reading its version, or why
  // it waits. A device whose FG rank is predicted idle less than `min_idle` of each iteration is
  // no place (one whose plan is unknown still is: the job waits for its rank). Holds the device
  // when one is granted.
  struct BackgroundChoice {
    std::optional<Grant> grant;
    std::optional<Wait> wait;
  };
  BackgroundChoice PlaceBackground(const PolicyJob& job, double min_idle);

  // The job's position in the snapshot's jobs.
  int JobOf(const PolicyJob& job) const;
  const PolicySnapshot& Snapshot() const { return snapshot_; }

 private:
  void Changed() { waits_.clear(); }

  const PolicySnapshot& snapshot_;
  std::shared_ptr<const DeviceIndex> own_index_;  // when the snapshot brings none that fits
  const DeviceIndex* index_;
  JobRates rates_;
  // By device position: the position in snapshot_.jobs of the FG (BG) job on it, or -1. A device
  // is free when no FG job holds it.
  std::vector<int> fg_;
  std::vector<int> bg_;
  std::vector<char> taken_this_round_;        // FG-held from this round: idleness unknown (0)
  std::vector<int> free_of_type_;             // free devices by DeviceIndex type id
  mutable std::map<int, int> largest_group_;  // LargestGroup by version
  // PlaceBackground's answer for a BG job that waits, by (protocol version, required type):
  // every BG job with the same needs waits for the same reason until the pool changes, so a long
  // queue of them costs one scan of the devices, not one each.
  std::map<std::pair<int, std::string>, Wait> waits_;
};

// A job's iteration time on `g` devices of `type`: its curve's, else 1 / g (perfect scaling).
double IterationSeconds(const PolicyJob& job, const std::string& type, int g);
// The same from the job's curve on the type (nullptr: it has none there).
double IterationSecondsOn(const SpeedCurve* curve, int g);
// Samples per second on `g` devices of `type`.
double Throughput(const PolicyJob& job, const std::string& type, int g);
// Samples per second at `seconds` per iteration (0 where the time is not positive).
double ThroughputAt(const PolicyJob& job, double seconds);
// Whether the job may run on `type`.
bool RunsOn(const PolicyJob& job, const std::string& type);

// What a FG job holds after a round, by job position (PoolState::JobOf): `devices` of type id
// `type`, or of the type `name` where the pool no longer lists the job's type (type -1).
struct Held {
  int type = -1;
  std::string name;
  int devices = 0;
};
// A table of Held for the round's jobs, every job holding nothing.
std::vector<Held> NothingHeld(const PolicySnapshot& snapshot);
// The job holds `devices` of `type` after the round.
void SetHeld(const PoolState& pool, const PolicyJob& job, const std::string& type, int devices,
             std::vector<Held>* held);
// Each user's share after the round: FG jobs' throughput on what they hold over their best.
std::vector<UserShare> SharesOf(const PoolState& pool, const std::vector<Held>& held);
// Snapshot jobs in admission order: priority first, then submission order (pointers into it).
std::vector<const PolicyJob*> AdmissionOrder(const PolicySnapshot& snapshot);
// "37%".
std::string Percent(double fraction);
// `value` with `digits` decimals: "300", "0.25".
std::string Fixed(double value, int digits);

}  // namespace deepool::coordinator::policy
