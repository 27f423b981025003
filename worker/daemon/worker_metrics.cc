#include "worker/daemon/worker_metrics.h"

#include <algorithm>

namespace deepool::worker::daemon {

void WorkerMetrics::OnTrainStarted(const TrainTask& task) {
  TaskDevices devices;
  devices.background = task.background;
  for (const RankAssignment& rank : task.ranks) {
    devices.device_of_rank[rank.rank] = rank.node_device.empty() ? rank.device : rank.node_device;
  }
  std::lock_guard<std::mutex> lock(mu_);
  tasks_[task.task_id] = std::move(devices);
}

void WorkerMetrics::OnIteration(const std::string& task_id, const IterationReport& report) {
  // A hosted BG job's progress comes from its host's lines; the host's own report already
  // carries the BG job's time on the device (bg_busy_ms).
  if (report.in_fg_executor) return;
  std::string device;
  bool background = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto task = tasks_.find(task_id);
    if (task == tasks_.end()) return;
    auto rank = task->second.device_of_rank.find(report.rank);
    if (rank == task->second.device_of_rank.end()) return;
    device = rank->second;
    background = task->second.background;
  }
  // An executor beside a BG job splits its busy time; one alone is all FG (or, for a BG job in
  // its own process, all BG). An FG executor's wait for its batch is its own kind, data_wait, so
  // an input pipeline that cannot keep up shows apart from computing.
  const double data_ms = background ? 0 : std::max(0.0, report.data_ms);
  const double fg_ms = report.fg_busy_ms ? *report.fg_busy_ms : (background ? 0 : report.busy_ms);
  const double bg_ms = report.bg_busy_ms ? *report.bg_busy_ms : (background ? report.busy_ms : 0);
  device_seconds_.Add({{"device", device}, {"kind", "fg_busy"}},
                      std::max(0.0, fg_ms - data_ms) / 1000.0);
  device_seconds_.Add({{"device", device}, {"kind", "data_wait"}}, data_ms / 1000.0);
  device_seconds_.Add({{"device", device}, {"kind", "bg_busy"}}, bg_ms / 1000.0);
  device_seconds_.Add({{"device", device}, {"kind", "idle"}}, report.idle_ms / 1000.0);
  iterations_.Add({{"device", device}, {"role", background ? "bg" : "fg"}});
}

void WorkerMetrics::OnTaskFinished(const TaskResult& result) {
  exits_.Add({{"outcome", result.succeeded   ? "succeeded"
                          : result.cancelled ? "cancelled"
                                             : "failed"}});
  std::lock_guard<std::mutex> lock(mu_);
  auto task = tasks_.find(result.task_id);
  const char* role = task != tasks_.end() && task->second.background ? "bg" : "fg";
  for (double seconds : result.checkpoint_seconds)
    checkpoint_seconds_.Observe({{"role", role}}, seconds);
  tasks_.erase(result.task_id);
}

std::string WorkerMetrics::Render(int running_tasks, bool registered) const {
  MetricsText out;
  device_seconds_.Write(&out, "deepool_worker_device_seconds_total",
                        "Device time the executors reported, by device and kind: fg_busy "
                        "(the FG job), bg_busy (a BG job), idle.");
  iterations_.Write(&out, "deepool_worker_iterations_total",
                    "Iterations reported by this node's executors, by device and role.");
  exits_.Write(&out, "deepool_worker_task_exits_total", "Tasks that ended here, by outcome.");
  checkpoint_seconds_.Write(&out, "deepool_worker_checkpoint_seconds",
                            "Time an executor rank took to write its checkpoint, by role.");
  out.Family("deepool_worker_tasks_running", "gauge", "Tasks running on this node.");
  out.Sample("deepool_worker_tasks_running", {}, running_tasks);
  out.Family("deepool_worker_registered", "gauge",
             "1 while the worker holds a registration with the coordinator.");
  out.Sample("deepool_worker_registered", {}, registered ? 1 : 0);
  return out.text();
}

}  // namespace deepool::worker::daemon
