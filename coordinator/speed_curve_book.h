// SpeedCurveBook: what the coordinator knows of each job's speed-up curve on each device type of
// the pool, for the scheduling policies (policy::PolicyJob::curves; docs/coordinator.md,
// "Scheduling policies"): a FG job's sizes and types, and the type a BG job takes among equally
// idle devices (its one-device point).
//
// A curve is planned (PlanningBackend::SpeedupCurve) from the inputs the job's plan would be made
// from on that type: its spec at the precision it would train at there, devices up to its request
// (at most the type's count), nodes the size of the type's largest holding the least memory of
// the type's devices (device_memory.h), and the profile it would be
// planned with (ProfileFor: the analytical preset when the spec asks for it, else the measured
// profile the store caches for its model, the type and that precision (ProfileCacheKey: a bf16
// job's curve uses a bf16 profile), else the preset until one is measured).
// Planning can take tens of ms on a miss of the backend's curve cache, so Refresh runs off the
// scheduler's lock, on the control loop before each round, and plans a (job, type) only when it
// has no curve there yet, when the pool's type grew past the devices its curve covers or its node
// size or least device memory changed, or when a profile of the job's model arrived for the type
// (ProfileChanged). Points on too few devices to hold the job in that memory are 0 (no plan).
// Curves live in memory only: a restarted coordinator plans them again. A job without a curve on
// a type (not planned yet, or its planning failed) has none in the snapshot there, and a policy
// treats it as it did before curves: scaling perfectly, alike on every type.
//
// Threading: Refresh from one thread at a time (the scheduler's Tick); Curves and ProfileChanged
// from any thread. One mutex guards the table; it is never held while planning or reading the
// store, and is taken after the scheduler's mu_ when both are held.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "coordinator/admission.h"
#include "coordinator/job.h"
#include "coordinator/node_registry.h"
#include "coordinator/planning.h"
#include "coordinator/policy/policy.h"

namespace deepool::coordinator {

// One device type of the pool as curves are planned for it: its schedulable devices, the most on
// one node, and whether every node of the type reads executor protocol 6 (so a default spec
// trains at the type's 16-bit precision: jobspec::TrainingPrecision).
struct PoolDeviceType {
  std::string type;
  int devices = 0;
  int devices_per_node = 0;
  bool reads_precision = true;
  // The least memory among its devices (DeviceMemoryBytes); 0 when none is known.
  int64_t device_memory_bytes = 0;
};

// The device types of the schedulable nodes, by name.
std::vector<PoolDeviceType> PoolDeviceTypes(const std::vector<NodeRecord>& nodes);

class SpeedCurveBook {
 public:
  // The cached measured profile of (profile key: ProfileCacheKey, device type): the store's
  // LoadProfile.
  using ProfileLookup = std::function<StatusOr<std::optional<std::string>>(
      const std::string& model_key, const std::string& device_type)>;

  // `planning_budget`: how long one Refresh may plan (on `clock`) before it leaves the rest to
  // the next; at least one curve is planned per call.
  SpeedCurveBook(const PlanningBackend* planner, ProfileLookup profiles, const Clock* clock,
                 Clock::Duration planning_budget);

  // Plans the curves the jobs among `jobs` (the active ones) miss on the pool's types, PENDING
  // jobs first, and forgets jobs not among them. Returns how many curves it planned (failures
  // included).
  int Refresh(const std::vector<JobSnapshot>& jobs, const std::vector<PoolDeviceType>& types);

  // A measured profile of (profile key: ProfileCacheKey, device type) was cached: curves of that
  // model at that precision on that type are planned again with it at the next Refresh.
  void ProfileChanged(const std::string& profile_key, const std::string& device_type);

  // The known curves, by job id; jobs with none are absent.
  std::map<std::string, std::shared_ptr<const CurvesByType>> Curves() const;

 private:
  // What a (job, type)'s curve was planned from: replanned when these no longer hold.
  struct Planned {
    int devices = 0;  // the most devices the curve covers
    int devices_per_node = 0;
    int64_t device_memory_bytes = 0;
    int64_t profile_generation = 0;
    bool ok = false;  // whether planning succeeded (a failure is not retried until inputs change)
  };
  struct JobEntry {
    std::string model_key;
    std::map<std::string, Planned> planned;  // by device type
    std::shared_ptr<const CurvesByType> curves;
  };

  // Devices a curve of `spec` on `type` should cover.
  static int WantedDevices(const JobSpec& spec, const PoolDeviceType& type);
  // Whether (job, type) needs planning now (mu_ held).
  bool NeedsPlanLocked(const std::string& job_id, const std::string& profile_key,
                       const PoolDeviceType& type, int wanted) const;
  int64_t GenerationLocked(const std::string& profile_key, const std::string& type) const;
  // The profile the job's plan on `type` would use: "" for the analytical preset; nullopt when
  // there is none (no preset, nothing measured yet).
  std::optional<std::string> ProfileFor(const JobRecord& job, const std::string& profile_key,
                                        const std::string& type) const;
  // Plans one (job, type) without mu_ and records the outcome; `model_key` is ModelKey(spec),
  // `profile_key` the key of its profile at the precision it would train at on `type`.
  void PlanOne(const JobRecord& job, const std::string& model_key, const std::string& profile_key,
               const PoolDeviceType& type, int wanted);

  const PlanningBackend* planner_;
  const ProfileLookup profiles_;
  const Clock* clock_;
  const Clock::Duration planning_budget_;

  mutable std::mutex mu_;
  std::map<std::string, JobEntry> jobs_;  // by job id; guarded by mu_
  // Bumped by ProfileChanged, by (profile key, type); guarded by mu_.
  std::map<std::pair<std::string, std::string>, int64_t> generations_;
};

}  // namespace deepool::coordinator
