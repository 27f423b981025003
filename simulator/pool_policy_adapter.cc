// A coordinator policy as the pool simulator's policy (pool_policy_adapter.h).
#include "simulator/pool_policy_adapter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "coordinator/policy/device_index.h"

namespace deepool::simulator {
namespace cp = coordinator::policy;
namespace {

std::string JobKey(int64_t id) { return std::to_string(id); }

double BusyFraction(const PoolCurvePoint& point, Parallelism parallelism) {
  return parallelism == Parallelism::kBurst ? point.burst_busy_fraction : point.dp_busy_fraction;
}

}  // namespace

PolicyAdapter::PolicyAdapter(std::unique_ptr<cp::Policy> policy,
                             const std::vector<PoolDeviceType>& pool, PolicyAdapterOptions options)
    : policy_(std::move(policy)), options_(std::move(options)) {
  const int per_node = std::max(1, options_.devices_per_node);
  for (const PoolDeviceType& type : pool) {
    for (int i = 0; i < type.devices; ++i) {
      cp::PolicyDevice device;
      char node[64];
      std::snprintf(node, sizeof node, "%s-n%04d", type.name.c_str(), i / per_node);
      device.key = {node, std::to_string(i % per_node)};
      device.type = type.name;
      device_index_[device.key.first][device.key.second] = devices_.size();
      devices_.push_back(Device{type.name});
      snapshot_.devices.push_back(std::move(device));
    }
  }
  snapshot_.device_index = std::make_shared<const cp::DeviceIndex>(snapshot_.devices);
}

cp::PolicyJob PolicyAdapter::MakeJob(const PoolJobView& view) const {
  const WorkloadJob& row = *view.job;
  cp::PolicyJob job;
  job.id = JobKey(row.id);
  job.user = row.user;
  job.role = row.role == WorkloadRole::kFg ? cp::Role::kFg : cp::Role::kBg;
  job.priority = row.priority;
  job.seq = row.id;
  job.arrival_s = row.arrival_s;
  job.requested_devices = row.gpus;
  job.amplification_limit = row.amplification_limit;
  job.global_batch = row.global_batch;
  job.required_device_type = row.device_type;
  job.preemptible = true;  // the simulator checkpoints every job it stops
  job.unsaved_s = 0;       // ... and loses no work when it does
  for (const PoolCurve& curve : view.curves->per_type) {
    cp::SpeedCurve speed;
    for (const PoolCurvePoint& point : curve.points) {
      if (point.devices < 1) continue;
      if (speed.iteration_s.size() < static_cast<size_t>(point.devices)) {
        speed.iteration_s.resize(static_cast<size_t>(point.devices), 0);
      }
      speed.iteration_s[static_cast<size_t>(point.devices - 1)] =
          options_.parallelism == Parallelism::kBurst ? point.burst_iteration_s
                                                      : point.dp_iteration_s;
    }
    job.curves[curve.device_type] = std::move(speed);
  }
  return job;
}

void PolicyAdapter::Release(int64_t job) {
  const auto found = held_.find(job);
  if (found == held_.end()) return;
  for (size_t index : found->second) {
    if (devices_[index].fg == job) devices_[index].fg = -1;
    if (devices_[index].bg == job) devices_[index].bg = -1;
  }
  held_.erase(found);
  moved_.insert(job);
}

Status PolicyAdapter::Hold(int64_t job, bool foreground, const std::vector<cp::DeviceKey>& keys) {
  std::vector<size_t>& held = held_[job];
  moved_.insert(job);
  for (const cp::DeviceKey& key : keys) {
    const auto node = device_index_.find(key.first);
    const auto device = node == device_index_.end() ? decltype(node->second.end()){}
                                                    : node->second.find(key.second);
    if (node == device_index_.end() || device == node->second.end()) {
      return InternalError("the policy granted job " + JobKey(job) + " an unknown device " +
                           key.first + "/" + key.second);
    }
    Device& slot = devices_[device->second];
    int64_t& holder = foreground ? slot.fg : slot.bg;
    if (holder >= 0 && holder != job) {
      return InternalError("the policy granted job " + JobKey(job) + " device " + key.first + "/" +
                           key.second + ", which job " + JobKey(holder) + " holds");
    }
    holder = job;
    held.push_back(device->second);
  }
  return Status::Ok();
}

const PoolJobView* PolicyAdapter::ViewOf(int64_t job) const {
  const size_t at = view_at_.Find(job);
  return at == JobPositions::kAbsent ? nullptr : &(*views_)[at];
}

void PolicyAdapter::SyncJobs(const PoolSnapshot& snapshot) {
  views_ = &snapshot.jobs;
  view_at_.Clear();
  for (size_t i = 0; i < snapshot.jobs.size(); ++i) view_at_.Add(snapshot.jobs[i].job->id, i);
  // Both lists are in arrival order and jobs that arrived since come last: keep the jobs still
  // in the pool, in place, and add the new ones.
  std::vector<cp::PolicyJob>& jobs = snapshot_.jobs;
  const size_t known_count = jobs.size();
  size_t kept = 0;
  size_t write = 0;
  for (const PoolJobView& view : snapshot.jobs) {
    const int64_t id = view.job->id;
    while (kept < known_count && job_ids_[kept] != id) Release(job_ids_[kept++]);  // finished
    const bool known = kept < known_count;
    if (known) {
      if (write != kept) jobs[write] = std::move(jobs[kept]);
      ++kept;
    } else if (write < jobs.size()) {
      jobs[write] = MakeJob(view);
    } else {
      jobs.push_back(MakeJob(view));
    }
    if (write < job_ids_.size()) {
      job_ids_[write] = id;
    } else {
      job_ids_.push_back(id);
    }
    if (!view.allocation.running()) Release(id);  // stopped by the simulator
    cp::PolicyJob& job = jobs[write++];
    job.remaining_iterations = static_cast<int64_t>(
        std::ceil(static_cast<double>(view.total_iterations) - view.done_iterations));
    if (!known || moved_.count(id)) {
      job.devices.clear();
      job.device_type.clear();
      if (const auto found = held_.find(id); found != held_.end()) {
        for (size_t index : found->second) job.devices.push_back(snapshot_.devices[index].key);
        if (!found->second.empty()) job.device_type = devices_[found->second.front()].type;
      }
    }
    job.placed_at_s = view.allocated_since_s;
    job.restart_s = snapshot.restart_s;
  }
  for (; kept < known_count; ++kept) Release(job_ids_[kept]);
  jobs.resize(write);
  job_ids_.resize(write);
  moved_.clear();
}

void PolicyAdapter::RefreshDevices() {
  for (size_t i = 0; i < devices_.size(); ++i) {
    cp::PolicyDevice& device = snapshot_.devices[i];
    const bool held = devices_[i].fg >= 0;
    device.idle_fraction = held ? 0 : 1;
    device.fg_rank_running = held && options_.multiplex;
  }
  if (!options_.multiplex) return;
  // A FG job's plan leaves the same idle fraction on each of its devices: one look-up per job.
  for (const auto& [job, indices] : held_) {
    if (indices.empty() || devices_[indices.front()].fg != job) continue;  // not a FG holder
    const PoolJobView& view = *ViewOf(job);
    const PoolCurve* curve = view.curves->For(devices_[indices.front()].type);
    const PoolCurvePoint* point = curve ? curve->At(static_cast<int>(indices.size())) : nullptr;
    if (!point) continue;
    for (size_t index : indices) {
      snapshot_.devices[index].idle_fraction = 1 - BusyFraction(*point, options_.parallelism);
    }
  }
}

PoolDecisions PolicyAdapter::Allocations() const {
  PoolDecisions decisions;
  decisions.run.reserve(held_.size());
  for (const auto& [job, indices] : held_) {
    if (indices.empty()) continue;
    const Device& first = devices_[indices.front()];
    PoolAllocation allocation;
    allocation.device_type = first.type;
    allocation.parallelism = options_.parallelism;
    if (first.bg == job) {
      allocation.host_job = first.fg;
      allocation.devices = first.fg >= 0 ? 0 : 1;
    } else {
      allocation.devices = static_cast<int>(indices.size());
    }
    decisions.run.push_back({job, allocation});
  }
  return decisions;
}

StatusOr<PoolDecisions> PolicyAdapter::Decide(const PoolSnapshot& snapshot) {
  SyncJobs(snapshot);
  RefreshDevices();
  snapshot_.now_s = snapshot.now_s;
  const cp::Decisions decisions = policy_->Decide(snapshot_);
  for (const cp::Preemption& preemption : decisions.preemptions) {
    Release(std::stoll(preemption.job_id));
  }
  for (const cp::Grant& grant : decisions.grants) {
    const int64_t job = std::stoll(grant.job_id);
    const PoolJobView* view = ViewOf(job);
    if (view == nullptr) {
      return InternalError("the policy granted devices to job " + grant.job_id +
                           ", which is not in the pool");
    }
    Release(job);  // a FG job granted again is resized
    RETURN_IF_ERROR(Hold(job, view->job->role == WorkloadRole::kFg, grant.devices));
  }
  for (const cp::Resize& resize : decisions.resizes) {
    const int64_t job = std::stoll(resize.job_id);
    if (ViewOf(job) == nullptr) {
      return InternalError("the policy resized job " + resize.job_id +
                           ", which is not in the pool");
    }
    Release(job);  // listed among the preemptions too: released once more is a no-op
    RETURN_IF_ERROR(Hold(job, /*foreground=*/true, resize.devices));
  }
  return Allocations();
}

}  // namespace deepool::simulator
