// Folding executors' iteration reports into a job's progress: the job-level numbers (rank 0's,
// or the first reporting rank's until rank 0 reports) and one DeviceProgress row per rank.
// Pure functions on a JobRecord; the scheduler calls them under its lock with the jobs its
// device maps name for each device.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "coordinator/job.h"
#include "deepool/v1/node.pb.h"

namespace deepool::coordinator {

// Which jobs the scheduler has placed on a device.
struct DeviceJobs {
  std::string fg_job;
  std::string bg_job;
};
using DeviceJobsLookup = std::function<DeviceJobs(const RankPlacement& placement)>;

// Applies one iteration event of `job`'s rank e.rank(). Stale events (an iteration older than
// what is already recorded, at job or device level) change nothing there. A rank the job's
// placement does not know updates only the job-level numbers.
//  - FG job: the row's fg_busy_ms is the executor's fg_busy_ms when it shares the device with a
//    BG job (shared_executor), else its busy_ms; bg_busy_ms is measured only when shared.
//  - BG job in its own executor: its busy time is the device's bg_busy_ms, fg_busy_ms is 0.
//  - BG job inside a FG executor (e.in_fg_executor): shared_executor, its samples/s; the device
//    times are in the FG job's row.
void ApplyIterationEvent(const v1::IterationEvent& event, const DeviceJobsLookup& jobs_on_device,
                         int64_t now_ms, JobRecord* job);

// Records one evaluation in job->progress.evaluations (by iteration; one of the same iteration,
// from an earlier attempt, is replaced; the oldest beyond JobProgress::kMaxEvaluations dropped).
// A non-finite loss is recorded as none. Returns whether it changed anything: false for one
// already recorded as it is (a worker sending a report again), and for a malformed one (an
// accuracy not in [0,1], a negative iteration or sample count), which is ignored.
bool ApplyEvaluation(const v1::Evaluation& event, int64_t now_ms, JobRecord* job);

// "evaluation after iteration 200: top-1 81.2 %, top-5 99.0 %, loss 0.520 (800 samples)"
// (without the loss when there is none): the job log's line for it.
std::string DescribeEvaluation(const Evaluation& evaluation);

}  // namespace deepool::coordinator
