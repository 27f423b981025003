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
  explicit DeepoolRound(const PolicySnapshot& snapshot)
      : snapshot_(snapshot), pool_(snapshot), types_(pool_.Types()) {}

  Decisions Run() {
    const std::vector<const PolicyJob*> order = AdmissionOrder(snapshot_);
    for (const std::string& type : types_) free_[type] = pool_.FreeCount(type, 0);
    for (const PolicyJob* job : order) {
      if (job->role == Role::kFg && !job->placed()) AdmitOne(*job);
    }
    Grow();
    Realise();
    PlaceBackgroundJobs(order, &pool_, &out_);
    for (const PolicyJob& job : snapshot_.jobs) {
      if (job.placed()) held_[job.id] = {job.device_type, static_cast<int>(job.devices.size())};
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

  const PolicySnapshot& snapshot_;
  PoolState pool_;
  const std::vector<std::string> types_;
  std::map<std::string, int> free_;  // devices of each type not yet sized to a job
  std::vector<Sized> sized_;         // admitted this round, in admission order
  std::map<std::string, std::pair<std::string, int>> held_;
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
  return DeepoolRound(snapshot).Run();
}

}  // namespace deepool::coordinator::policy
