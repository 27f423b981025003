#include "coordinator/policy/deepool_policy.h"

#include <algorithm>
#include <queue>
#include <tuple>

#include "coordinator/policy/fifo_policy.h"
#include "coordinator/policy/pool_state.h"

namespace deepool::coordinator::policy {
namespace {

class DeepoolRound {
 public:
  DeepoolRound(const PolicySnapshot& snapshot, const PolicyOptions& options)
      : snapshot_(snapshot),
        options_(options),
        pool_(snapshot),
        rates_(pool_.Rates()),
        type_count_(static_cast<int>(pool_.Types().size())),
        held_(NothingHeld(snapshot)) {}

  Decisions Run() {
    const std::vector<const PolicyJob*> order = AdmissionOrder(snapshot_);
    for (int type = 0; type < type_count_; ++type) free_.push_back(pool_.FreeCount(type, 0));
    for (const PolicyJob* job : order) {
      if (job->role == Role::kFg && !job->placed()) AdmitOne(*job);
    }
    Grow();
    Realise();
    GrowRunning();
    PlaceBackgroundJobs(order, options_, &pool_, &out_);
    for (const PolicyJob& job : snapshot_.jobs) {  // those not resized
      if (job.placed() && held_[static_cast<size_t>(pool_.JobOf(job))].devices == 0) {
        SetHeld(pool_, job, job.device_type, static_cast<int>(job.devices.size()), &held_);
      }
    }
    out_.shares = SharesOf(pool_, held_);
    return std::move(out_);
  }

 private:
  struct Sized {
    const PolicyJob* job;
    int type;  // id
    int devices = 1;
  };

  static size_t Index(int type) { return static_cast<size_t>(type); }

  // One device of the type the job runs fastest on alone, among those with a free one it reads.
  void AdmitOne(const PolicyJob& job) {
    int best_type = -1;
    double best = -1;
    for (int type = 0; type < type_count_; ++type) {
      if (!rates_.RunsOn(job, type) || free_[Index(type)] < 1 ||
          pool_.FreeCount(type, job.protocol_version) < 1)
        continue;
      const double throughput = rates_.Throughput(job, type, 1);
      if (throughput > best) {
        best = throughput;
        best_type = type;
      }
    }
    if (best_type < 0) {
      out_.waits.push_back(
          {job.id, WaitCode::kWaitingForDevices, "waiting for a free device of a type it runs on"});
      return;
    }
    --free_[Index(best_type)];
    sized_.push_back({&job, best_type, 1});
  }

  // Seconds of the job's remaining time one more device saves; <= 0 when it may not grow.
  double Gain(const Sized& sized) const {
    const PolicyJob& job = *sized.job;
    const int next = sized.devices + 1;
    if (next > job.requested_devices || !Within(job, sized.type, next)) return 0;
    const double now = rates_.IterationS(job, sized.type, sized.devices);
    const double then = rates_.IterationS(job, sized.type, next);
    if (then <= 0) return 0;
    const double iterations = static_cast<double>(std::max<int64_t>(job.remaining_iterations, 1));
    return iterations * (now - then);
  }

  void Grow() {
    // (gain, -index): the largest gain first, ties to the job admitted first.
    std::priority_queue<std::tuple<double, int>> gains;
    for (size_t i = 0; i < sized_.size(); ++i) {
      const double gain = Gain(sized_[i]);
      if (gain > 0) gains.emplace(gain, -static_cast<int>(i));
    }
    while (!gains.empty()) {
      const int index = -std::get<1>(gains.top());
      gains.pop();
      Sized& sized = sized_[static_cast<size_t>(index)];
      if (free_[Index(sized.type)] < 1) continue;
      --free_[Index(sized.type)];
      ++sized.devices;
      const double gain = Gain(sized);
      if (gain > 0) gains.emplace(gain, -index);
    }
  }

  void Realise() {
    for (const Sized& sized : sized_) {
      const std::vector<int> free = pool_.FreeOf(sized.type, sized.job->protocol_version);
      const int count = std::min<int>(sized.devices, static_cast<int>(free.size()));
      if (count < 1) {
        out_.waits.push_back({sized.job->id, WaitCode::kWorkerProtocol,
                              "needs workers that speak executor protocol " +
                                  std::to_string(sized.job->protocol_version)});
        continue;
      }
      const std::vector<int> devices = pool_.Pack(free, count);
      pool_.HoldForeground(*sized.job, devices, &out_.preemptions);
      const std::string& type = pool_.Types()[Index(sized.type)];
      SetHeld(pool_, *sized.job, type, count, &held_);
      out_.grants.push_back({sized.job->id, type, pool_.Keys(devices), 0});
    }
  }

  // A placed job's best resize: to `devices`, saving `net_s` of its time after the move's cost.
  struct Growth {
    const PolicyJob* job = nullptr;
    int devices = 0;
    double net_s = 0;
    double saved_s = 0;
    int Added() const { return devices - static_cast<int>(job->devices.size()); }
  };

  // The job's fastest size with at most `free` more devices of its type (its own when none is
  // faster), and what growing to it saves.
  Growth BestGrowth(const PolicyJob& job, int free) const {
    Growth growth{&job, static_cast<int>(job.devices.size()), 0, 0};
    const int type = pool_.TypeId(job.device_type);
    if (type < 0) return growth;  // no free device of its type to grow onto
    const double now = rates_.IterationS(job, type, growth.devices);
    if (now <= 0) return growth;
    double best = now;
    const int most = std::min(job.requested_devices, growth.devices + free);
    for (int g = growth.devices + 1; g <= most; ++g) {
      const double then = rates_.IterationS(job, type, g);
      if (then <= 0 || then >= best || !Within(job, type, g)) continue;
      best = then;
      growth.devices = g;
    }
    const double iterations = static_cast<double>(std::max<int64_t>(job.remaining_iterations, 1));
    growth.saved_s = iterations * (now - best);
    growth.net_s = growth.saved_s - job.restart_s - job.unsaved_s;
    return growth;
  }

  bool Pays(const Growth& growth) const {
    return growth.Added() > 0 && growth.net_s > 0 &&
           growth.net_s >= options_.min_growth_saving_s * growth.Added();
  }

  bool Movable(const PolicyJob& job) const {
    return job.role == Role::kFg && job.placed() && job.preemptible &&
           snapshot_.now_s - job.placed_at_s >= options_.min_slice_s;
  }

  // Grows running jobs onto the devices the round left free: by then every waiting FG job that
  // reads a free device has one, so none of them waits for these.
  void GrowRunning() {
    std::vector<Growth> growths;
    for (const PolicyJob& job : snapshot_.jobs) {
      if (!Movable(job)) continue;
      const int free = pool_.FreeCount(pool_.TypeId(job.device_type), job.protocol_version);
      if (free < 1) continue;
      Growth growth = BestGrowth(job, free);
      if (Pays(growth)) growths.push_back(growth);
    }
    // The most time saved per added device first; ties to the earlier job.
    std::stable_sort(growths.begin(), growths.end(), [](const Growth& a, const Growth& b) {
      return a.net_s / a.Added() > b.net_s / b.Added();
    });
    for (Growth growth : growths) {
      const PolicyJob& job = *growth.job;
      const std::vector<int> free =
          pool_.FreeOf(pool_.TypeId(job.device_type), job.protocol_version);
      if (static_cast<int>(free.size()) < growth.Added()) {
        growth = BestGrowth(job, static_cast<int>(free.size()));
        if (!Pays(growth)) continue;
      }
      Resize(growth, free);
    }
  }

  void Resize(const Growth& growth, const std::vector<int>& free) {
    const PolicyJob& job = *growth.job;
    const std::vector<int> added = pool_.Pack(free, growth.Added());
    pool_.HoldForeground(job, added, &out_.preemptions);
    std::vector<DeviceKey> devices = job.devices;
    for (const DeviceKey& key : pool_.Keys(added)) devices.push_back(key);
    const int from = static_cast<int>(job.devices.size());
    out_.preemptions.push_back({job.id, "",
                                "grows from " + std::to_string(from) + " to " +
                                    std::to_string(growth.devices) + " " + job.device_type +
                                    " devices, saving about " + Fixed(growth.saved_s, 0) +
                                    " s of its remaining time for a move that costs " +
                                    Fixed(job.restart_s + job.unsaved_s, 0) + " s"});
    out_.resizes.push_back({job.id, job.device_type, std::move(devices), from});
    SetHeld(pool_, job, job.device_type, growth.devices, &held_);
  }

  // WithinAmplification on the round's curves.
  bool Within(const PolicyJob& job, int type, int g) const {
    return WithinAmplificationOf(job, rates_.IterationS(job, type, 1), g,
                                 rates_.IterationS(job, type, g));
  }

  const PolicySnapshot& snapshot_;
  const PolicyOptions& options_;
  PoolState pool_;
  const JobRates& rates_;
  const int type_count_;
  std::vector<int> free_;     // by type id: devices not yet sized to a job
  std::vector<Sized> sized_;  // admitted this round, in admission order
  std::vector<Held> held_;    // by job position: (type, devices) after the round
  Decisions out_;
};

}  // namespace

bool WithinAmplification(const PolicyJob& job, const std::string& type, int g) {
  return WithinAmplificationOf(job, IterationSeconds(job, type, 1), g,
                               IterationSeconds(job, type, g));
}

bool WithinAmplificationOf(const PolicyJob& job, double one_s, int g, double on_g_s) {
  if (job.amplification_limit <= 0) return true;
  if (one_s <= 0 || on_g_s <= 0) return false;
  return g * on_g_s / one_s <= job.amplification_limit + 1e-9;
}

Decisions DeepoolPolicy::Decide(const PolicySnapshot& snapshot) const {
  return DeepoolRound(snapshot, options_).Run();
}

}  // namespace deepool::coordinator::policy
