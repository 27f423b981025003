#include "coordinator/policy/fifo_policy.h"

#include <algorithm>

namespace deepool::coordinator::policy {
namespace {

class FifoRound {
 public:
  FifoRound(const PolicySnapshot& snapshot, const PolicyOptions& options)
      : snapshot_(snapshot), options_(options), pool_(snapshot) {}

  Decisions Run() {
    const std::vector<const PolicyJob*> order = AdmissionOrder(snapshot_);
    std::string blocker;
    for (const PolicyJob* job : order) {
      if (job->role != Role::kFg || job->placed()) continue;
      if (!blocker.empty()) {
        Wait(*job, WaitCode::kQueuedBehind, "queued behind " + blocker);
      } else if (!AdmitForeground(*job) && CouldEverFit(*job)) {
        blocker = job->id;
      }
    }
    PlaceBackgroundJobs(order, options_, &pool_, &out_);
    for (const PolicyJob& job : snapshot_.jobs) {
      if (job.placed()) {
        SetHeld(pool_, job, job.device_type, static_cast<int>(job.devices.size()), &held_);
      }
    }
    for (const auto& [job, grant] : granted_) {
      SetHeld(pool_, *job, out_.grants[grant].device_type,
              static_cast<int>(out_.grants[grant].devices.size()), &held_);
    }
    out_.shares = SharesOf(pool_, held_);
    return std::move(out_);
  }

 private:
  bool AdmitForeground(const PolicyJob& job) {
    const int wanted = DevicesWanted(job, pool_);
    const int types = static_cast<int>(pool_.Types().size());
    for (int type = 0; type < types; ++type) {
      if (!pool_.Rates().RunsOn(job, type) || pool_.FreeCount(type, job.protocol_version) < wanted)
        continue;
      const std::vector<int> devices = pool_.Pack(pool_.FreeOf(type, job.protocol_version), wanted);
      pool_.HoldForeground(job, devices, &out_.preemptions);
      granted_.push_back({&job, out_.grants.size()});
      out_.grants.push_back(
          {job.id, pool_.Types()[static_cast<size_t>(type)], pool_.Keys(devices), 0});
      return true;
    }
    return false;
  }

  // Sets the reason of a FG job that did not fit; true when it would fit an idle pool.
  bool CouldEverFit(const PolicyJob& job) {
    const int wanted = DevicesWanted(job, pool_);
    const int largest = pool_.LargestGroup(0);
    if (largest < wanted) {
      Wait(job, WaitCode::kNotEnoughDevices,
           "needs " + std::to_string(job.requested_devices) +
               " devices of one type; the largest group of schedulable devices has " +
               std::to_string(largest));
      return false;
    }
    // Enough devices, but too few on nodes that read the job's run spec: not the job's turn to
    // block others, as no device freed will change that.
    if (pool_.LargestGroup(job.protocol_version) < wanted) {
      Wait(job, WaitCode::kWorkerProtocol,
           "needs workers that speak executor protocol " + std::to_string(job.protocol_version));
      return false;
    }
    int most_free = 0;
    for (int type = 0; type < static_cast<int>(pool_.Types().size()); ++type) {
      most_free = std::max(most_free, pool_.FreeCount(type, job.protocol_version));
    }
    Wait(job, WaitCode::kWaitingForDevices,
         "waiting for " + std::to_string(wanted) + " free devices of one type (" +
             std::to_string(most_free) + " free" +
             (wanted < job.requested_devices
                  ? "; re-planned from " + std::to_string(job.requested_devices) +
                        " after a node loss"
                  : "") +
             ")");
    return true;
  }

  void Wait(const PolicyJob& job, WaitCode code, std::string message) {
    out_.waits.push_back({job.id, code, std::move(message)});
  }

  const PolicySnapshot& snapshot_;
  const PolicyOptions& options_;
  PoolState pool_;
  // FG jobs granted this round, with their grant's position in out_.grants.
  std::vector<std::pair<const PolicyJob*, size_t>> granted_;
  std::vector<Held> held_ = NothingHeld(snapshot_);  // by job position: after the round
  Decisions out_;
};

}  // namespace

int DevicesWanted(const PolicyJob& job, const PoolState& pool) {
  if (!job.shrinks_to_fit) return job.requested_devices;
  const int largest = pool.LargestGroup(job.protocol_version);
  return largest >= 1 ? std::min(job.requested_devices, largest) : job.requested_devices;
}

void PlaceBackgroundJobs(const std::vector<const PolicyJob*>& order, const PolicyOptions& options,
                         PoolState* pool, Decisions* out) {
  for (const PolicyJob* job : order) {
    if (job->role != Role::kBg || job->placed()) continue;
    PoolState::BackgroundChoice choice = pool->PlaceBackground(*job, options.min_bg_idle_fraction);
    if (choice.grant) out->grants.push_back(std::move(*choice.grant));
    if (choice.wait) out->waits.push_back(std::move(*choice.wait));
  }
}

Decisions FifoPolicy::Decide(const PolicySnapshot& snapshot) const {
  return FifoRound(snapshot, options_).Run();
}

}  // namespace deepool::coordinator::policy
