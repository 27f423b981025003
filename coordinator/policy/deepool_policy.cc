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
      : snapshot_(snapshot), options_(options), pool_(snapshot), types_(pool_.Types()) {}

  Decisions Run() {
    const std::vector<const PolicyJob*> order = AdmissionOrder(snapshot_);
    for (const std::string& type : types_) free_[type] = pool_.FreeCount(type, 0);
    for (const PolicyJob* job : order) {
      if (job->role == Role::kFg && !job->placed()) AdmitOne(*job);
    }
    Grow();
    Realise();
    GrowRunning();
    PlaceBackgroundJobs(order, options_, &pool_, &out_);
    for (const PolicyJob& job : snapshot_.jobs) {  // those not resized
      if (job.placed())
        held_.emplace(job.id, std::pair{job.device_type, static_cast<int>(job.devices.size())});
    }
    out_.shares = SharesOf(snapshot_, held_, types_);
    return std::move(out_);
  }

 private:
  struct Sized {
    const PolicyJob* job;
    std::string type;
    int devices = 1;
  };

  // One device of the type the job runs fastest on alone, among those with a free one it reads.
  void AdmitOne(const PolicyJob& job) {
    std::string best_type;
    double best = -1;
    for (const std::string& type : types_) {
      if (!RunsOn(job, type) || free_[type] < 1 || pool_.FreeCount(type, job.protocol_version) < 1)
        continue;
      const double throughput = Throughput(job, type, 1);
      if (throughput > best) {
        best = throughput;
        best_type = type;
      }
    }
    if (best_type.empty()) {
      out_.waits.push_back(
          {job.id, WaitCode::kWaitingForDevices, "waiting for a free device of a type it runs on"});
      return;
    }
    --free_[best_type];
    sized_.push_back({&job, best_type, 1});
  }

  // Seconds of the job's remaining time one more device saves; <= 0 when it may not grow.
  double Gain(const Sized& sized) const {
    const PolicyJob& job = *sized.job;
    const int next = sized.devices + 1;
    if (next > job.requested_devices || !WithinAmplification(job, sized.type, next)) return 0;
    const double now = IterationSeconds(job, sized.type, sized.devices);
    const double then = IterationSeconds(job, sized.type, next);
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
      if (free_[sized.type] < 1) continue;
      --free_[sized.type];
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
      held_[sized.job->id] = {sized.type, count};
      out_.grants.push_back({sized.job->id, sized.type, pool_.Keys(devices), 0});
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
    const std::string& type = job.device_type;
    const double now = IterationSeconds(job, type, growth.devices);
    if (now <= 0) return growth;
    double best = now;
    const int most = std::min(job.requested_devices, growth.devices + free);
    for (int g = growth.devices + 1; g <= most; ++g) {
      const double then = IterationSeconds(job, type, g);
      if (then <= 0 || then >= best || !WithinAmplification(job, type, g)) continue;
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
      const int free = pool_.FreeCount(job.device_type, job.protocol_version);
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
      const std::vector<int> free = pool_.FreeOf(job.device_type, job.protocol_version);
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
    held_[job.id] = {job.device_type, growth.devices};
  }

  const PolicySnapshot& snapshot_;
  const PolicyOptions& options_;
  PoolState pool_;
  const std::vector<std::string> types_;
  std::map<std::string, int> free_;  // devices of each type not yet sized to a job
  std::vector<Sized> sized_;         // admitted this round, in admission order
  std::map<std::string, std::pair<std::string, int>> held_;  // job -> (type, devices) after
  Decisions out_;
};

}  // namespace

bool WithinAmplification(const PolicyJob& job, const std::string& type, int g) {
  if (job.amplification_limit <= 0) return true;
  const double one = IterationSeconds(job, type, 1);
  const double on_g = IterationSeconds(job, type, g);
  if (one <= 0 || on_g <= 0) return false;
  return g * on_g / one <= job.amplification_limit + 1e-9;
}

Decisions DeepoolPolicy::Decide(const PolicySnapshot& snapshot) const {
  return DeepoolRound(snapshot, options_).Run();
}

}  // namespace deepool::coordinator::policy
