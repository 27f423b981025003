// Test helpers for the coordinator: a FakePlanningBackend, a temporary directory and a slow
// cancel probe for the stream loops.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/follow_stop.h"
#include "coordinator/planning.h"
#include "tests/temp_dir.h"

namespace deepool::coordinator::testing {

// Plans without the planner: every rank is used; rank r is busy (10 - 2r) ms of a 10 ms
// iteration (at least 1 ms), so later ranks look idler to the BG placement.
class FakePlanningBackend final : public PlanningBackend {
 public:
  std::set<std::string> models{"tiny", "small_cnn"};
  std::set<std::string> analytical_types{"cpu"};
  Status plan_error = Status::Ok();
  mutable std::atomic<int> foreground_plans{0};
  mutable std::string last_profile_json;
  // Called as a plan is made (e.g. to fail the store between planning and dispatch).
  std::function<void()> on_plan;

  // Every job needs this much on each device (0: nothing): a shape of less known memory is
  // refused as the planner refuses, RESOURCE_EXHAUSTED naming layer 'fc', by CheckMemoryCanFit,
  // PlanForeground and PlanBackground alike.
  int64_t memory_needed_bytes = 0;
  Status CheckMemoryCanFit(const JobSpec&, const ClusterShape& shape) const override {
    return MemoryFits(shape);
  }
  // The shape of the last plan made or refused (PlanForeground or PlanBackground).
  ClusterShape last_shape() const {
    std::lock_guard<std::mutex> lock(shape_mu_);
    return last_shape_;
  }
  Status CheckModel(const JobSpec& spec) const override {
    if (!spec.graph_json.empty()) return Status::Ok();
    if (models.count(spec.model) == 0) {
      return InvalidArgumentError("model: unknown model \"" + spec.model + "\"");
    }
    return Status::Ok();
  }
  std::string ModelKey(const JobSpec& spec) const override {
    return "fake/" + spec.model +
           (spec.num_classes > 0 ? "/" + std::to_string(spec.num_classes) : "");
  }
  // Not a real graph: the model and its class count, so tests see what the task carries.
  StatusOr<std::string> ProfileGraphJson(const JobSpec& spec) const override {
    if (!spec.graph_json.empty()) return spec.graph_json.str();
    return nlohmann::json{
        {"format", "deepool.graph"}, {"name", spec.model}, {"num_classes", spec.num_classes}}
        .dump();
  }
  bool HasAnalyticalPreset(const std::string& type) const override {
    return analytical_types.count(type) > 0;
  }
  std::vector<int64_t> ProfileBatchSizes(const JobSpec& spec) const override {
    return {1, spec.global_batch};
  }
  StatusOr<PlannedJob> PlanForeground(const JobSpec& spec, const ClusterShape& cluster,
                                      const std::string& profile_json) const override {
    ++foreground_plans;
    last_profile_json = profile_json;
    if (on_plan) on_plan();
    if (!plan_error.ok()) return plan_error;
    RETURN_IF_ERROR(Planned(cluster));
    return Make(spec, cluster.devices);
  }
  // What SpeedupCurve answers, by (model, device type): seconds per iteration on 1, 2, ...
  // devices, cut at the pool's count. A pair not listed: NOT_FOUND, and the job has no curve there.
  std::map<std::pair<std::string, std::string>, std::vector<double>> curves;
  mutable std::atomic<int> curve_plans{0};
  mutable std::string last_curve_profile_json;
  mutable ClusterShape last_curve_pool;
  std::function<void()> on_curve;  // called as a curve is planned (e.g. to advance a clock)
  StatusOr<policy::SpeedCurve> SpeedupCurve(const JobSpec& spec, const ClusterShape& pool,
                                            const std::string& profile_json) const override {
    ++curve_plans;
    last_curve_profile_json = profile_json;
    last_curve_pool = pool;
    if (on_curve) on_curve();
    auto found = curves.find({spec.model, pool.device_type});
    if (found == curves.end()) {
      return NotFoundError("no curve of " + spec.model + " on " + pool.device_type);
    }
    policy::SpeedCurve curve;
    curve.iteration_s = found->second;
    if (static_cast<int>(curve.iteration_s.size()) > pool.devices) {
      curve.iteration_s.resize(static_cast<size_t>(std::max(pool.devices, 0)));
    }
    return curve;
  }
  StatusOr<PlannedJob> PlanBackground(const JobSpec& spec,
                                      const ClusterShape& device) const override {
    if (on_plan) on_plan();
    RETURN_IF_ERROR(Planned(device));
    return Make(spec, 1);
  }

 private:
  Status MemoryFits(const ClusterShape& shape) const {
    if (memory_needed_bytes == 0 || shape.device_memory_bytes == 0 ||
        memory_needed_bytes <= shape.device_memory_bytes) {
      return Status::Ok();
    }
    return ResourceExhaustedError("layer 'fc' does not fit in device memory: on " +
                                  std::to_string(shape.devices) + " devices it needs " +
                                  std::to_string(memory_needed_bytes) + " bytes on each");
  }
  Status Planned(const ClusterShape& shape) const {
    {
      std::lock_guard<std::mutex> lock(shape_mu_);
      last_shape_ = shape;
    }
    return MemoryFits(shape);
  }
  mutable std::mutex shape_mu_;
  mutable ClusterShape last_shape_;

  static PlannedJob Make(const JobSpec& spec, int devices) {
    PlannedJob planned;
    planned.world_size = devices;
    planned.iteration_ms = 10;
    for (int r = 0; r < devices; ++r) planned.rank_busy_ms.push_back(std::max(1.0, 10.0 - 2 * r));
    planned.graph_json = nlohmann::json{{"format", "deepool.graph"}, {"name", spec.model}}.dump();
    planned.plan_json = nlohmann::json{{"format", "deepool.plan"}, {"num_devices", devices}}.dump();
    return planned;
  }
};

using deepool::testing::TempDir;

// A stream loop (JobFollower, StreamNodeCommands) stopped by this wakes on its 60 s cancel
// probe only, so a test that gets its answer at once shows the loop woke on a notification.
inline FollowStop SlowProbe() {
  FollowStop stop;
  stop.cancel_probe = std::chrono::seconds(60);
  return stop;
}

}  // namespace deepool::coordinator::testing
