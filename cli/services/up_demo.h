// The parts of `deepool up` worth testing on their own: how many CPU devices and cores each local
// worker gets, and the FG job's measured iteration time, set beside the plan's prediction.
// Threading: plain values; an IterationMeter is used from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace deepool::cli {

// The local cluster `up` starts on one host.
struct LocalShape {
  int workers = 2;
  int devices_per_worker = 2;
  int cores_per_worker = 1;  // the worker's --cpu-cores: its devices' executors divide them
  // More CPU devices than cores: ranks then wait for each other's cores, which the planner does
  // not model (it plans every device as a device of its own), so its predictions run low.
  bool oversubscribed = false;
};

// `workers` workers on a host with `host_cores` cores share them equally (at least one each).
// `devices_per_worker` 0 means as many as fit: two, or one where the worker's share is a single
// core, so that by default every CPU device has a core of its own.
LocalShape ShapeLocalCluster(int host_cores, int workers, int devices_per_worker);

// The FG job's pace as its progress shows it: iterations done per wall-clock second between the
// first poll that shows an iteration done (the executors have started and iteration 0, which
// pays for warming up, is behind) and the last poll that shows the job still running (after
// it, checkpointing and the end of the job would count as iterations).
class IterationMeter {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // One poll of the job: iterations done so far out of `iterations`, whether it still runs, and
  // the last iteration's time its rank 0 reported (0 if none).
  void Observe(TimePoint at, int64_t done, int64_t iterations, bool running,
               double last_iteration_ms);
  // The mean wall time of an iteration over the span above; with fewer than `kMinSpan`
  // iterations in it (a very short job), the last iteration time rank 0 reported; nullopt
  // when there is neither.
  std::optional<double> IterationMs() const;
  // "mean of 63 iterations" or "rank 0's last iteration": what IterationMs is.
  std::string Basis() const;

  static constexpr int64_t kMinSpan = 5;

 private:
  std::optional<std::pair<TimePoint, int64_t>> first_;  // first poll with an iteration done
  std::optional<std::pair<TimePoint, int64_t>> last_;   // last poll that ran past first_
  double last_iteration_ms_ = 0;
};

// "  measured iteration 17ms (mean of 63 iterations), 1.21x the prediction\n"; without a
// measurement, "  measured iteration: none (the job reported no iteration)\n".
std::string MeasuredLine(const IterationMeter& meter, double predicted_ms);

}  // namespace deepool::cli
