#include "coordinator/policy/max_min_policy.h"

#include <algorithm>
#include <deque>

#include "coordinator/policy/fifo_policy.h"
#include "coordinator/policy/pool_state.h"

namespace deepool::coordinator::policy {
namespace {

class MaxMinRound {
 public:
  MaxMinRound(const PolicySnapshot& snapshot, const PolicyOptions& options)
      : snapshot_(snapshot),
        options_(options),
        order_(AdmissionOrder(snapshot)),
        pool_(snapshot),
        rates_(pool_.Rates()),
        type_count_(static_cast<int>(pool_.Types().size())),
        capacity_(static_cast<size_t>(type_count_)),
        demand_(static_cast<size_t>(type_count_)),
        target_(snapshot.jobs.size(), kNoTarget),
        held_(NothingHeld(snapshot)) {}

  Decisions Run() {
    MeasureDemand();
    ProtectAndQueue();
    WaterFill();
    Realise();
    PlaceBackgroundJobs(order_, options_, &pool_, &out_);
    out_.shares = SharesOf(pool_, held_);
    return std::move(out_);
  }

 private:
  struct UserQueue {
    double share = 0;
    double attained_s = 0;
    std::deque<const PolicyJob*> jobs;  // its placed jobs first, then admission order
  };

  // Placed FG jobs within their slice (or without checkpoints) keep their devices and count
  // toward their users' shares first; every other FG job competes in the water-fill.
  void ProtectAndQueue() {
    for (int type = 0; type < type_count_; ++type)
      capacity_[Index(type)] = pool_.DevicesOfType(type);
    std::vector<const PolicyJob*> order = order_;
    std::stable_partition(order.begin(), order.end(),
                          [](const PolicyJob* job) { return job->placed(); });
    for (const PolicyJob* job : order) {
      if (job->role != Role::kFg) continue;
      UserQueue& user = users_[job->user];
      user.attained_s += job->attained_s;
      if (job->placed() && !Preemptible(*job)) {
        Assign(*job, pool_.TypeId(job->device_type), static_cast<int>(job->devices.size()));
        continue;
      }
      user.jobs.push_back(job);
    }
  }

  bool Preemptible(const PolicyJob& job) const {
    return job.preemptible && snapshot_.now_s - job.placed_at_s >= options_.min_slice_s;
  }

  // The job's throughput on `type` over its throughput on its fastest type (requested count).
  double Normalised(const PolicyJob& job, int type) const {
    return rates_.Throughput(job, type, job.requested_devices) / rates_.Best(job);
  }

  static size_t Index(int type) { return static_cast<size_t>(type); }

  // Each type's demand: the mean normalised throughput of the round's FG jobs there. A job goes
  // where it runs fastest relative to the others (Gavel's heterogeneity-awareness): a job that
  // runs alike everywhere leaves the fast type to a job that gains more from it.
  void MeasureDemand() {
    for (int type = 0; type < type_count_; ++type) {
      double sum = 0;
      int count = 0;
      for (const PolicyJob& job : snapshot_.jobs) {
        if (job.role != Role::kFg || !rates_.RunsOn(job, type)) continue;
        sum += Normalised(job, type);
        ++count;
      }
      demand_[Index(type)] = count > 0 && sum > 0 ? sum / count : 1;
    }
  }

  // A kept job's type may be one the pool no longer lists (-1): it then counts on no type.
  void Assign(const PolicyJob& job, int type, int devices) {
    target_[static_cast<size_t>(pool_.JobOf(job))] = type;
    const double throughput = type >= 0 ? rates_.Throughput(job, type, devices)
                                        : Throughput(job, job.device_type, devices);
    if (type >= 0) capacity_[Index(type)] -= devices;
    users_[job.user].share += throughput / rates_.Best(job);
  }

  // The user that comes next: least share, then least attained time, then earliest next job.
  UserQueue* NextUser() {
    UserQueue* next = nullptr;
    for (auto& [name, user] : users_) {
      if (user.jobs.empty()) continue;
      if (next == nullptr || user.share < next->share ||
          (user.share == next->share && (user.attained_s < next->attained_s ||
                                         (user.attained_s == next->attained_s &&
                                          user.jobs.front()->seq < next->jobs.front()->seq)))) {
        next = &user;
      }
    }
    return next;
  }

  void WaterFill() {
    while (UserQueue* user = NextUser()) {
      const PolicyJob& job = *user->jobs.front();
      user->jobs.pop_front();
      const int current = job.device_type.empty() ? -1 : pool_.TypeId(job.device_type);
      int best_type = -1;
      double best_score = -1;
      for (int type = 0; type < type_count_; ++type) {
        if (!rates_.RunsOn(job, type) || capacity_[Index(type)] < job.requested_devices) continue;
        const double score = Normalised(job, type) / demand_[Index(type)];
        const bool better =
            score > best_score ||
            (score == best_score &&
             (type == current ||
              (best_type != current && capacity_[Index(type)] > capacity_[Index(best_type)])));
        if (better) {
          best_score = score;
          best_type = type;
        }
      }
      if (best_type >= 0) Assign(job, best_type, job.requested_devices);
    }
  }

  // Kept jobs hold their devices; the others placed are preempted; assigned waiting jobs are
  // packed onto the devices left.
  void Realise() {
    for (const PolicyJob& job : snapshot_.jobs) {
      if (job.role != Role::kFg || !job.placed()) continue;
      const int target = TargetOf(job);
      if (target != kNoTarget && target == pool_.TypeId(job.device_type)) {
        SetHeld(pool_, job, job.device_type, static_cast<int>(job.devices.size()), &held_);
        continue;
      }
      pool_.Release(job);
      preempted_.push_back(&job);
    }
    for (const PolicyJob* job : order_) {
      if (job->role != Role::kFg || job->placed()) continue;
      const int target = TargetOf(*job);
      if (target == kNoTarget) {
        WaitForShare(*job);
        continue;
      }
      const std::vector<int> free = pool_.FreeOf(target, job->protocol_version);
      if (static_cast<int>(free.size()) < job->requested_devices) {
        out_.waits.push_back({job->id, WaitCode::kWorkerProtocol,
                              "needs workers that speak executor protocol " +
                                  std::to_string(job->protocol_version)});
        continue;
      }
      const std::vector<int> devices = pool_.Pack(free, job->requested_devices);
      pool_.HoldForeground(*job, devices, &out_.preemptions);
      const std::string& type = pool_.Types()[Index(target)];
      SetHeld(pool_, *job, type, job->requested_devices, &held_);
      out_.grants.push_back({job->id, type, pool_.Keys(devices), 0});
    }
    for (const PolicyJob* job : preempted_) {
      out_.preemptions.push_back({job->id, TakerOf(*job), PreemptionMessage(*job)});
    }
  }

  // The first job granted one of the preempted job's devices.
  std::string TakerOf(const PolicyJob& job) const {
    for (const Grant& grant : out_.grants) {
      for (const DeviceKey& key : grant.devices) {
        if (std::find(job.devices.begin(), job.devices.end(), key) != job.devices.end()) {
          return grant.job_id;
        }
      }
    }
    return "";
  }

  std::string PreemptionMessage(const PolicyJob& job) const {
    return "user " + UserName(job.user) +
           " has had its turn: " + Fixed(snapshot_.now_s - job.placed_at_s, 0) + " s on " +
           std::to_string(job.devices.size()) + " " + job.device_type + " devices (minimum slice " +
           Fixed(options_.min_slice_s, 0) + " s); the devices go to users with a smaller share";
  }

  void WaitForShare(const PolicyJob& job) {
    int largest = 0;
    for (int type = 0; type < type_count_; ++type) {
      if (rates_.RunsOn(job, type)) largest = std::max(largest, pool_.DevicesOfType(type));
    }
    if (largest < job.requested_devices) {
      out_.waits.push_back({job.id, WaitCode::kNotEnoughDevices,
                            "needs " + std::to_string(job.requested_devices) +
                                " devices of one type; the largest group of schedulable "
                                "devices has " +
                                std::to_string(largest)});
      return;
    }
    out_.waits.push_back({job.id, WaitCode::kFairShare, FairShareWait(job.user)});
  }

  // Why a job of `user` waits for its share: one sentence per user and round (its share is
  // final by then), however many of its jobs wait.
  const std::string& FairShareWait(const std::string& user) {
    auto [known, added] = fair_share_waits_.try_emplace(user);
    if (added) {
      known->second = "user " + UserName(user) + " has share " + Fixed(users_.at(user).share, 2) +
                      "; the pool's devices go to users with less first, and a placed job keeps "
                      "its devices for at least " +
                      Fixed(options_.min_slice_s, 0) + " s";
    }
    return known->second;
  }

  static std::string UserName(const std::string& user) {
    return user.empty() ? "(anonymous)" : user;
  }

  // The type id the job is assigned (-1: a kept job's type the pool no longer lists), or
  // kNoTarget.
  int TargetOf(const PolicyJob& job) const {
    return target_[static_cast<size_t>(pool_.JobOf(job))];
  }

  static constexpr int kNoTarget = -2;

  const PolicySnapshot& snapshot_;
  const PolicyOptions options_;
  const std::vector<const PolicyJob*> order_;  // AdmissionOrder's
  PoolState pool_;
  const JobRates& rates_;
  const int type_count_;
  std::vector<int> capacity_;                            // by type id: devices not yet assigned
  std::vector<double> demand_;                           // by type id: MeasureDemand's
  std::map<std::string, UserQueue> users_;               // by name
  std::vector<int> target_;                              // by job position: TargetOf
  std::vector<Held> held_;                               // by job position: after the round
  std::map<std::string, std::string> fair_share_waits_;  // FairShareWait's, by user
  std::vector<const PolicyJob*> preempted_;
  Decisions out_;
};

}  // namespace

Decisions MaxMinPolicy::Decide(const PolicySnapshot& snapshot) const {
  return MaxMinRound(snapshot, options_).Run();
}

}  // namespace deepool::coordinator::policy
