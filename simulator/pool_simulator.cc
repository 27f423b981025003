// The pool simulator's event loop and accounting (pool_simulator.h).
#include "simulator/pool_simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>

#include "simulator/job_positions.h"

namespace deepool::simulator {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// A job in the pool: the policy's view of it plus what the engine needs to advance it.
struct ActiveJob {
  size_t input = 0;  // index into the inputs and the run's records
  PoolJobView view;
  double rate = 0;            // iterations per second once restored
  double busy_devices = 0;    // devices computing while it progresses
  double held_devices = 0;    // devices it holds (multiplexed BG: 0)
  double restore_left_s = 0;  // checkpoint restore still to do before it progresses
  bool finished = false;
};

std::string JobName(const ActiveJob& job) { return "job " + std::to_string(job.view.job->id); }

std::string At(double now_s) {
  char text[48];
  std::snprintf(text, sizeof text, " (t = %.3f s)", now_s);
  return text;
}

class PoolEngine {
 public:
  PoolEngine(const std::vector<PoolJobInput>& inputs, const PoolOptions& options,
             PoolPolicy& policy)
      : inputs_(inputs), options_(options), policy_(policy) {}

  StatusOr<PoolRun> Run();

 private:
  double NextCompletion() const;
  void Advance(double until_s);
  void RetireFinished();
  void AdmitArrivals();
  Status Decide();
  Status Apply(const PoolDecisions& decisions);
  Status CheckAllocation(const ActiveJob& job, const PoolAllocation& allocation) const;
  void Preempt(ActiveJob& job);
  void SetRates();
  void SlowByContention();
  int Capacity(const std::string& type) const;

  const std::vector<PoolJobInput>& inputs_;
  const PoolOptions& options_;
  PoolPolicy& policy_;
  PoolRun run_;
  std::vector<ActiveJob> active_;  // arrival order
  JobPositions active_at_;         // active_ by job id, as of the last Apply
  size_t next_arrival_ = 0;
  double now_s_ = 0;
};

int PoolEngine::Capacity(const std::string& type) const {
  for (const PoolDeviceType& pool_type : options_.device_types) {
    if (pool_type.name == type) return pool_type.devices;
  }
  return -1;
}

double PoolEngine::NextCompletion() const {
  double next = kNever;
  for (const ActiveJob& job : active_) {
    if (job.rate <= 0) continue;
    const double remaining =
        static_cast<double>(job.view.total_iterations) - job.view.done_iterations;
    next = std::min(next, now_s_ + job.restore_left_s + remaining / job.rate);
  }
  return next;
}

void PoolEngine::Advance(double until_s) {
  const double dt = until_s - now_s_;
  // Completions land on `until_s` up to rounding in the division that predicted them.
  const double slack = 1e-9 * std::max(1.0, until_s);
  for (ActiveJob& job : active_) {
    if (!job.view.allocation.running()) continue;
    const double restore_before = job.restore_left_s;
    const double productive = std::max(0.0, dt - job.restore_left_s);
    const double total = static_cast<double>(job.view.total_iterations);
    if (job.rate > 0 &&
        now_s_ + job.restore_left_s + (total - job.view.done_iterations) / job.rate <=
            until_s + slack) {
      job.view.done_iterations = total;
      job.finished = true;
    } else {
      job.view.done_iterations += job.rate * productive;
    }
    job.restore_left_s = std::max(0.0, job.restore_left_s - dt);
    job.view.run_s += dt;
    job.view.attained_device_s += job.held_devices * dt;
    run_.jobs[job.input].device_s += job.held_devices * dt;
    run_.allocated_device_s += job.held_devices * dt;
    run_.busy_device_s += job.busy_devices * productive;
    // The part of this step inside the arrival window, after the restore.
    const double in_window = std::min(until_s, run_.window_s) - now_s_;
    const double productive_in_window = std::max(0.0, in_window - restore_before);
    run_.window_busy_device_s += job.busy_devices * productive_in_window;
    run_.window_allocated_device_s += job.held_devices * std::max(0.0, in_window);
    run_.window_samples +=
        job.rate * productive_in_window * static_cast<double>(job.view.job->global_batch);
  }
  now_s_ = until_s;
}

// A BG job inside a host that finished is checkpointed and waits for the policy to place it.
void PoolEngine::RetireFinished() {
  bool any = false;
  for (const ActiveJob& job : active_) any = any || job.finished;
  if (!any) return;
  for (ActiveJob& job : active_) {
    if (!job.finished) continue;
    run_.jobs[job.input].finish_s = now_s_;
    run_.end_s = now_s_;
  }
  for (ActiveJob& job : active_) {
    const int64_t host = job.view.allocation.host_job;
    if (job.finished || host < 0) continue;
    for (const ActiveJob& other : active_) {
      if (other.finished && other.view.job->id == host) Preempt(job);
    }
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const ActiveJob& job) { return job.finished; }),
                active_.end());
}

void PoolEngine::Preempt(ActiveJob& job) {
  ++job.view.moves;
  ++run_.jobs[job.input].moves;
  ++run_.jobs[job.input].preemptions;
  job.view.allocation = PoolAllocation{};
  job.rate = job.busy_devices = job.held_devices = job.restore_left_s = 0;
}

void PoolEngine::AdmitArrivals() {
  while (next_arrival_ < inputs_.size() && inputs_[next_arrival_].job->arrival_s <= now_s_) {
    const PoolJobInput& input = inputs_[next_arrival_];
    ActiveJob job;
    job.input = next_arrival_;
    job.view.job = input.job;
    job.view.curves = input.curves.get();
    job.view.total_iterations = input.iterations;
    active_.push_back(std::move(job));
    ++next_arrival_;
  }
}

Status PoolEngine::CheckAllocation(const ActiveJob& job, const PoolAllocation& allocation) const {
  const WorkloadJob& row = *job.view.job;
  const std::string& type = allocation.device_type;
  if (!row.device_type.empty() && type != row.device_type) {
    return FailedPreconditionError(JobName(job) + " runs only on " + row.device_type + ", not " +
                                   type);
  }
  if (Capacity(type) < 0)
    return FailedPreconditionError(JobName(job) + ": the pool has no " + type);
  const PoolCurve* curve = job.view.curves->For(type);
  if (curve == nullptr) return FailedPreconditionError(JobName(job) + " has no curve on " + type);
  if (row.role == WorkloadRole::kFg) {
    if (allocation.host_job >= 0) {
      return FailedPreconditionError(JobName(job) + " is FG and cannot run inside another job");
    }
  } else if (!(allocation.devices == 1 && allocation.host_job < 0) &&
             !(allocation.devices == 0 && allocation.host_job >= 0)) {
    return FailedPreconditionError(JobName(job) +
                                   " is BG: one device of its own or a host job, not " +
                                   std::to_string(allocation.devices) + " devices");
  }
  const int devices = std::max(allocation.devices, 1);
  if (curve->At(devices) == nullptr) {
    return FailedPreconditionError(JobName(job) + "'s curve on " + type + " has no point at " +
                                   std::to_string(devices) + " devices");
  }
  return Status::Ok();
}

Status PoolEngine::Decide() {
  PoolSnapshot snapshot;
  snapshot.now_s = now_s_;
  snapshot.restart_s = options_.checkpoint_restore_s;
  snapshot.device_types = options_.device_types;
  snapshot.jobs.reserve(active_.size());
  for (const ActiveJob& job : active_) snapshot.jobs.push_back(job.view);
  ++run_.decisions;
  StatusOr<PoolDecisions> decisions = policy_.Decide(snapshot);
  if (!decisions.ok()) return decisions.status().WithContext(policy_.name() + At(now_s_));
  Status applied = Apply(*decisions);
  if (!applied.ok()) return applied.WithContext(policy_.name() + At(now_s_));
  return Status::Ok();
}

Status PoolEngine::Apply(const PoolDecisions& decisions) {
  JobPositions& index = active_at_;
  index.Clear();
  for (size_t i = 0; i < active_.size(); ++i) index.Add(active_[i].view.job->id, i);
  std::vector<const PoolAllocation*> next(active_.size(), nullptr);
  for (const PoolDecision& decision : decisions.run) {
    const size_t found = index.Find(decision.job_id);
    if (found == JobPositions::kAbsent) {
      return FailedPreconditionError("job " + std::to_string(decision.job_id) +
                                     " is not in the pool");
    }
    if (next[found] != nullptr) {
      return FailedPreconditionError("job " + std::to_string(decision.job_id) + " decided twice");
    }
    if (!decision.allocation.running()) continue;  // listed as waiting
    RETURN_IF_ERROR(CheckAllocation(active_[found], decision.allocation));
    next[found] = &decision.allocation;
  }
  // Capacity per type, and every guest inside a running FG host of its type with a device to
  // spare.
  std::unordered_map<std::string, int> used;
  std::unordered_map<int64_t, int> guests;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (next[i] == nullptr) continue;
    used[next[i]->device_type] += next[i]->devices;
    const int64_t host = next[i]->host_job;
    if (host < 0) continue;
    const size_t found = index.Find(host);
    const PoolAllocation* host_allocation = found == JobPositions::kAbsent ? nullptr : next[found];
    if (host_allocation == nullptr || host_allocation->device_type != next[i]->device_type ||
        active_[found].view.job->role != WorkloadRole::kFg) {
      return FailedPreconditionError(JobName(active_[i]) + "'s host job " + std::to_string(host) +
                                     " is not a FG job running on " + next[i]->device_type);
    }
    if (++guests[host] > host_allocation->devices) {
      return FailedPreconditionError("host job " + std::to_string(host) + " holds " +
                                     std::to_string(host_allocation->devices) +
                                     " devices and cannot take another BG job");
    }
  }
  for (const auto& [type, devices] : used) {
    if (devices > Capacity(type)) {
      return FailedPreconditionError("the allocations take " + std::to_string(devices) + " " +
                                     type + " devices of " + std::to_string(Capacity(type)));
    }
  }
  // Commit: hosts first decide whether they move, so their guests move with them.
  std::vector<bool> changed(active_.size(), false);
  for (size_t i = 0; i < active_.size(); ++i) {
    const PoolAllocation& now = next[i] ? *next[i] : PoolAllocation{};
    changed[i] = active_[i].view.allocation != now;
  }
  for (size_t i = 0; i < active_.size(); ++i) {
    if (next[i] == nullptr || next[i]->host_job < 0 || changed[i]) continue;
    changed[i] = changed[index.Find(next[i]->host_job)];
  }
  for (size_t i = 0; i < active_.size(); ++i) {
    if (!changed[i]) continue;
    ActiveJob& job = active_[i];
    PoolJobRecord& record = run_.jobs[job.input];
    const bool ran_before = job.view.allocated_since_s >= 0;
    if (next[i] == nullptr) {
      Preempt(job);
      continue;
    }
    if (job.view.allocation.running()) {  // a move: checkpointed, restored on the new devices
      ++job.view.moves;
      ++record.moves;
    }
    job.view.allocation = *next[i];
    job.view.allocated_since_s = now_s_;
    if (record.start_s < 0) record.start_s = now_s_;
    job.restore_left_s = ran_before ? options_.checkpoint_restore_s : 0;
  }
  SetRates();
  return Status::Ok();
}

// Apply's positions (active_at_) still hold: they are read before any job retires.
void PoolEngine::SetRates() {
  std::unordered_map<int64_t, int> guests;
  for (const ActiveJob& job : active_) {
    if (job.view.allocation.host_job >= 0) ++guests[job.view.allocation.host_job];
  }
  for (ActiveJob& job : active_) {
    const PoolAllocation& allocation = job.view.allocation;
    job.rate = job.busy_devices = job.held_devices = 0;
    if (!allocation.running()) continue;
    const PoolCurve& curve = *job.view.curves->For(allocation.device_type);
    if (allocation.host_job >= 0) {
      // A guest runs at its own one-device speed (Check made sure its curve has that point;
      // a FG job's curve may start above one device).
      const PoolCurvePoint& one = *curve.At(1);
      const ActiveJob& host = active_[active_at_.Find(allocation.host_job)];
      const PoolAllocation& at = host.view.allocation;
      const PoolCurvePoint& point = *host.view.curves->For(at.device_type)->At(at.devices);
      const double busy = at.parallelism == Parallelism::kBurst ? point.burst_busy_fraction
                                                                : point.dp_busy_fraction;
      const double share = options_.multiplex_efficiency * std::clamp(1 - busy, 0.0, 1.0);
      job.rate = share / one.burst_iteration_s;
      job.busy_devices = share;
      continue;
    }
    const PoolCurvePoint& point = *curve.At(allocation.devices);
    const bool burst = allocation.parallelism == Parallelism::kBurst;
    const double iteration_s = burst ? point.burst_iteration_s : point.dp_iteration_s;
    const bool hosting = guests.count(job.view.job->id) > 0;
    job.rate = (hosting ? 1 - options_.fg_interference : 1) / iteration_s;
    job.held_devices = allocation.devices;
    job.busy_devices =
        allocation.devices * (burst ? point.burst_busy_fraction : point.dp_busy_fraction);
  }
  SlowByContention();
}

void PoolEngine::SlowByContention() {
  for (const NodeContention& contention : options_.node_contention) {
    double in_use = 0;
    for (const ActiveJob& job : active_) {
      if (job.view.allocation.device_type == contention.device_type) in_use += job.held_devices;
    }
    for (ActiveJob& job : active_) {
      const PoolAllocation& allocation = job.view.allocation;
      if (!allocation.running() || allocation.device_type != contention.device_type) continue;
      job.rate /= ContentionFactor(contention, Capacity(contention.device_type), in_use,
                                   std::max(allocation.devices, 1));
    }
  }
}

StatusOr<PoolRun> PoolEngine::Run() {
  run_.jobs.reserve(inputs_.size());
  for (const PoolDeviceType& type : options_.device_types) run_.total_devices += type.devices;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const PoolJobInput& input = inputs_[i];
    if (input.job == nullptr || input.curves == nullptr || input.iterations < 1) {
      return InvalidArgumentError("input " + std::to_string(i) +
                                  " lacks its job, curves or iterations");
    }
    if (i > 0 && input.job->arrival_s < inputs_[i - 1].job->arrival_s) {
      return InvalidArgumentError("job " + std::to_string(input.job->id) +
                                  " arrives before the job listed ahead of it");
    }
    PoolJobRecord record;
    record.id = input.job->id;
    record.role = input.job->role;
    record.arrival_s = input.job->arrival_s;
    record.isolated_s = input.isolated_s;
    record.iterations = input.iterations;
    record.global_batch = input.job->global_batch;
    run_.jobs.push_back(record);
  }
  if (!inputs_.empty()) run_.window_s = inputs_.back().job->arrival_s;
  double next_round_s = options_.round_s;
  while (next_arrival_ < inputs_.size() || !active_.empty()) {
    const double arrival_s =
        next_arrival_ < inputs_.size() ? inputs_[next_arrival_].job->arrival_s : kNever;
    const double round_s = active_.empty() ? kNever : next_round_s;
    const double event_s = std::min({arrival_s, round_s, NextCompletion()});
    if (event_s > options_.max_time_s) {
      return DeadlineExceededError("the pool still holds " + std::to_string(active_.size()) +
                                   " jobs after " + std::to_string(options_.max_time_s) + " s");
    }
    Advance(event_s);
    RetireFinished();
    AdmitArrivals();
    next_round_s = (std::floor(now_s_ / options_.round_s) + 1) * options_.round_s;
    if (active_.empty()) continue;
    RETURN_IF_ERROR(Decide());
    const bool any_running = std::any_of(active_.begin(), active_.end(), [](const ActiveJob& job) {
      return job.view.allocation.running();
    });
    if (!any_running && next_arrival_ == inputs_.size()) {
      return FailedPreconditionError(
          policy_.name() + At(now_s_) + " leaves " + std::to_string(active_.size()) +
          " jobs waiting on an idle pool with no arrivals left (first: " +
          JobName(active_.front()) + ")");
    }
  }
  return std::move(run_);
}

}  // namespace

StatusOr<PoolRun> SimulatePool(const std::vector<PoolJobInput>& inputs, const PoolOptions& options,
                               PoolPolicy& policy) {
  if (!(options.round_s > 0) || !(options.checkpoint_restore_s >= 0) ||
      !(options.multiplex_efficiency >= 0 && options.multiplex_efficiency <= 1) ||
      !(options.fg_interference >= 0 && options.fg_interference < 1)) {
    return InvalidArgumentError(
        "pool options: round_s > 0, checkpoint_restore_s >= 0, multiplex_efficiency in [0, 1] "
        "and fg_interference in [0, 1) are required");
  }
  for (const NodeContention& contention : options.node_contention) {
    RETURN_IF_ERROR(ValidateNodeContention(contention));
  }
  PoolEngine engine(inputs, options, policy);
  return engine.Run();
}

}  // namespace deepool::simulator
