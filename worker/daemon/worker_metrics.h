// The worker's Prometheus metrics (served at /metrics by deepool-worker --metrics-listen):
// per device, the seconds its executors reported computing the FG job, computing a BG job and
// idle, summed over iterations (counters, so rate() gives the share of each); iterations by
// device and role; task exits by outcome; the time each rank took to write its checkpoint; and,
// read at each scrape, running tasks and whether the worker is registered. Labels are bounded:
// devices are this node's, roles and outcomes fixed lists. Threading: thread-safe (one mutex); the
// daemon calls it from the supervisor's reader threads.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/metrics_text.h"
#include "worker/daemon/executor_supervisor.h"

namespace deepool::worker::daemon {

class WorkerMetrics {
 public:
  // A TRAIN task started: which device each of its ranks runs on, and its role.
  void OnTrainStarted(const TrainTask& task);
  void OnIteration(const std::string& task_id, const IterationReport& report);
  void OnTaskFinished(const TaskResult& result);

  // The /metrics document, with the two values only the daemon knows.
  std::string Render(int running_tasks, bool registered) const;

 private:
  struct TaskDevices {
    bool background = false;
    std::map<int, std::string> device_of_rank;  // the node's device name ("cpu:1", "cuda:0")
  };

  mutable std::mutex mu_;
  std::map<std::string, TaskDevices> tasks_;  // running TRAIN tasks
  CounterMap device_seconds_;                 // {device, kind}
  CounterMap iterations_;                     // {device, role}
  CounterMap exits_;                          // {outcome}
  Histogram checkpoint_seconds_;              // {role}: each rank's final checkpoint write
};

}  // namespace deepool::worker::daemon
