// The coordinator's scheduling policies (coordinator/policy/policy.h) driving the pool
// simulator: PolicyAdapter is a PoolPolicy that shows a coordinator Policy the pool as the
// coordinator does (devices by node, each job's placement, speed-up curves per device type) and
// turns its grants and preemptions back into allocations, so a simulated result is a result of
// the coordinator's own code. docs/simulator.md, "Pool simulation".
//
// The pool is laid out in nodes of devices_per_node devices of one type ("a100-n0003", device
// "5"). The adapter keeps which device each job holds between decisions, as the coordinator's
// device ledger does, the snapshot's jobs from one decision to the next (updating what
// changes), and one DeviceIndex of its fixed devices for every round, so a decision costs the
// policy's work plus a pass over the jobs and devices.
//
// A resize (the deepool policy's growth of a running job, policy.h's Resize) moves the job at
// once onto its new devices, as the simulator moves every job: it costs the job
// PoolOptions::checkpoint_restore_s (PoolSnapshot::restart_s), which the policy is told as each
// job's restart_s.
//
// What the adapter decides, not the policy: which curve the policy sees and the jobs run at
// (burst-parallel plans or data parallelism), and whether a BG job may run inside a FG job's
// devices (multiplex: devices a FG job holds are offered with its plan's idle fraction and a
// running rank; otherwise as busy with no rank to run in, so BG jobs take free devices only).
// Threading: one thread at a time (PoolPolicy).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "coordinator/policy/policy.h"
#include "simulator/job_positions.h"
#include "simulator/pool_policy.h"

namespace deepool::simulator {

struct PolicyAdapterOptions {
  std::string name;  // the configuration's name in results, e.g. "fifo-dp"
  Parallelism parallelism = Parallelism::kBurst;
  bool multiplex = true;
  int devices_per_node = 8;
};

class PolicyAdapter : public PoolPolicy {
 public:
  PolicyAdapter(std::unique_ptr<coordinator::policy::Policy> policy,
                const std::vector<PoolDeviceType>& pool, PolicyAdapterOptions options);

  std::string name() const override { return options_.name; }
  StatusOr<PoolDecisions> Decide(const PoolSnapshot& snapshot) override;

 private:
  struct Device {
    std::string type;
    int64_t fg = -1;  // the FG job holding it
    int64_t bg = -1;  // the BG job on it
  };

  void SyncJobs(const PoolSnapshot& snapshot);
  // This decision's view of the job, or nullptr when it is not in the pool.
  const PoolJobView* ViewOf(int64_t job) const;
  coordinator::policy::PolicyJob MakeJob(const PoolJobView& view) const;
  void Release(int64_t job);
  Status Hold(int64_t job, bool foreground,
              const std::vector<coordinator::policy::DeviceKey>& keys);
  void RefreshDevices();
  PoolDecisions Allocations() const;

  std::unique_ptr<coordinator::policy::Policy> policy_;
  PolicyAdapterOptions options_;
  std::vector<Device> devices_;  // in the snapshot's device order
  std::unordered_map<std::string, std::unordered_map<std::string, size_t>> device_index_;
  std::unordered_map<int64_t, std::vector<size_t>> held_;  // job -> devices
  // Jobs whose devices changed since the snapshot's jobs last listed them: the others keep their
  // PolicyJob::devices from the previous decision (a decision copies no (node, device) keys for
  // jobs that stay where they are).
  std::unordered_set<int64_t> moved_;
  const std::vector<PoolJobView>* views_ = nullptr;  // this decision's views
  JobPositions view_at_;                             // ... by job id
  coordinator::policy::PolicySnapshot snapshot_;     // kept between decisions
  std::vector<int64_t> job_ids_;                     // snapshot_.jobs' ids, as numbers
};

}  // namespace deepool::simulator
