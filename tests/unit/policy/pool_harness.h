// A policy test harness: a pool snapshot that rounds of a Policy change as the coordinator would
// (preemptions free devices, grants place jobs), except that a resize places its job on its new
// devices at once, as the pool simulator does; on a fake clock the test advances; it counts the
// FG jobs moved (preempted, resizes included) and the resizes.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "coordinator/policy/policy.h"

namespace deepool::coordinator::policy::testing {

struct PoolHarness {
  void AddNode(const std::string& node, int devices, const std::string& type = "cpu") {
    for (int i = 0; i < devices; ++i) {
      PolicyDevice device;
      device.key = {node, "d" + std::to_string(i)};
      device.type = type;
      snapshot.devices.push_back(device);
    }
  }

  PolicyJob& Submit(const std::string& id, const std::string& user, int gpus,
                    Role role = Role::kFg) {
    PolicyJob job;
    job.id = id;
    job.user = user;
    job.role = role;
    job.requested_devices = gpus;
    job.seq = static_cast<int64_t>(snapshot.jobs.size());
    job.arrival_s = snapshot.now_s;
    job.preemptible = true;
    snapshot.jobs.push_back(job);
    return snapshot.jobs.back();
  }

  PolicyJob& Job(const std::string& id) {
    for (PolicyJob& job : snapshot.jobs) {
      if (job.id == id) return job;
    }
    FAIL("no job " << id);
    return snapshot.jobs.front();
  }

  // One round: decides, then applies the decisions.
  Decisions Round(const Policy& policy) {
    Decisions decisions = policy.Decide(snapshot);
    for (const Preemption& preempted : decisions.preemptions) {
      PolicyJob& job = Job(preempted.job_id);
      if (job.role == Role::kFg) ++moves;
      job.devices.clear();
      job.device_type.clear();
    }
    for (const Grant& grant : decisions.grants) {
      PolicyJob& job = Job(grant.job_id);
      REQUIRE_FALSE(job.placed());
      job.devices = grant.devices;
      job.device_type = grant.device_type;
      job.placed_at_s = snapshot.now_s;
    }
    for (const Resize& resize : decisions.resizes) {
      PolicyJob& job = Job(resize.job_id);
      REQUIRE_FALSE(job.placed());  // preempted above
      job.devices = resize.devices;
      job.device_type = resize.device_type;
      job.placed_at_s = snapshot.now_s;
      ++resizes;
    }
    return decisions;
  }

  void Advance(double seconds) {
    snapshot.now_s += seconds;
    for (PolicyJob& job : snapshot.jobs) {
      if (job.placed()) job.attained_s += seconds;
    }
  }

  // Devices of the pool that two FG jobs hold at once: must stay 0.
  int DoublyHeld() const {
    std::map<DeviceKey, int> holders;
    for (const PolicyJob& job : snapshot.jobs) {
      if (job.role != Role::kFg) continue;
      for (const DeviceKey& key : job.devices) ++holders[key];
    }
    int doubly = 0;
    for (const auto& [key, count] : holders) doubly += count > 1;
    return doubly;
  }

  PolicySnapshot snapshot;
  int moves = 0;
  int resizes = 0;
};

// A curve of `devices` points from a function of g.
template <typename F>
SpeedCurve CurveOf(int devices, F iteration_s) {
  SpeedCurve curve;
  for (int g = 1; g <= devices; ++g) curve.iteration_s.push_back(iteration_s(g));
  return curve;
}

inline const Wait* WaitOf(const Decisions& decisions, const std::string& job_id) {
  for (const Wait& wait : decisions.waits) {
    if (wait.job_id == job_id) return &wait;
  }
  return nullptr;
}

inline const Resize* ResizeOf(const Decisions& decisions, const std::string& job_id) {
  for (const Resize& resize : decisions.resizes) {
    if (resize.job_id == job_id) return &resize;
  }
  return nullptr;
}

inline const Grant* GrantOf(const Decisions& decisions, const std::string& job_id) {
  for (const Grant& grant : decisions.grants) {
    if (grant.job_id == job_id) return &grant;
  }
  return nullptr;
}

}  // namespace deepool::coordinator::policy::testing
