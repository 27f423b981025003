// JobWrites: job changes the scheduler decides under its lock and writes to the store after
// releasing it, so no store write (a disk fsync for SQLite) holds up heartbeats and task streams,
// and no failed write is dropped.
//
// A write is a transition (or a field update) of one job with two follow-ups that run under the
// scheduler's lock again: `on_written` once it is stored, `on_refused` when it cannot be stored
// and will not be retried. A write that fails for a reason that may pass (the store is
// unavailable, the disk is full) and is marked `retry` is kept and tried again on the next tick,
// in order: a later write of the same job waits behind it. A write the lifecycle refuses
// (FAILED_PRECONDITION: the job moved on meanwhile, e.g. was cancelled) or for a job that is gone
// (NOT_FOUND) is not retried.
// Threading: not thread-safe; the Scheduler guards its queue with its lock and calls Apply
// without it.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/job.h"
#include "coordinator/job_manager.h"

namespace deepool::coordinator {

struct JobWrite {
  std::string job_id;
  std::optional<JobState> state;           // nullopt: update fields, no transition
  Reason reason = Reason("");              // the transition's reason
  std::function<void(JobRecord&)> mutate;  // required for an update
  bool retry = false;                      // keep a transiently failed write for the next tick
  // An update of advice recomputed every round (JobManager::UpdateAdvice): in memory only,
  // stored with the job's next written change.
  bool advice = false;
  std::function<void(const JobRecord&)> on_written;
  std::function<void(const Status&)> on_refused;
};

// A transition of the job to `state`; `retry`: see JobWrite.
JobWrite TransitionWrite(std::string job_id, JobState state, Reason reason, bool retry = false);
// A change of fields without a transition.
JobWrite UpdateWrite(std::string job_id, std::function<void(JobRecord&)> mutate);
// A change of advice fields (a PENDING job's reason): see JobWrite::advice.
JobWrite AdviceWrite(std::string job_id, std::function<void(JobRecord&)> mutate);

// A write's result, with the follow-up to run under the scheduler's lock.
struct JobWriteResult {
  JobWrite write;
  StatusOr<JobRecord> stored;
  bool retry_later = false;  // kept for the next tick; no follow-up now
};

// Whether a failed write may succeed if tried again.
bool MayPass(const Status& status);

// Writes each (without any scheduler lock held) through `jobs`. Writes of a job behind one of its
// own that failed and will be retried are kept for later too, so a job's writes stay in order.
std::vector<JobWriteResult> ApplyJobWrites(JobManager* jobs, std::vector<JobWrite> writes);

}  // namespace deepool::coordinator
