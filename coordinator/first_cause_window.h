// FirstCauseWindow: when one rank of a job fails, the others soon fail too, each saying only that
// it lost its peers (an "echo"). Whichever report comes first, the job should fail with the
// cause. A failure that reads as an echo, while other tasks of the job still run, opens a window
// (a deadline on the injected clock) for another rank's report; a report with a cause of its own
// closes it at once and wins; otherwise the first echo stands when the window ends or every task
// has reported.
//
// It keeps one wait per job, for one attempt: a wait left from an earlier attempt counts for
// nothing. It decides only which reason a job fails with and when; failing it is the caller's.
//
// Threading: not thread-safe; the Scheduler calls it under its mu_.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "coordinator/dispatcher.h"
#include "coordinator/job.h"
#include "deepool/v1/node.pb.h"

namespace deepool::coordinator {

// What a failed task's exit report says: "task T on N failed: DETAIL" (its error, else its first
// rank's, else its last log line), or "... was stopped by its worker".
std::string TaskExitReason(const Task& task, const v1::ReportTaskExitRequest& report);
// Whether the failed task's rank only lost its peers or connections (its status code says so),
// which may be the echo of another rank's failure reported later.
bool ReportsPeerFailure(const v1::ReportTaskExitRequest& report);

class FirstCauseWindow {
 public:
  // `clock` must outlive the window.
  FirstCauseWindow(const Clock* clock, Clock::Duration window);

  // A failed TRAIN task of the job's `attempt`. `echo`: the rank only lost its peers;
  // `others_live`: some of the attempt's other tasks still run. Returns the reason to fail the
  // job with now (the cause, or the waiting echo's when this is another echo), or nullopt while
  // it waits for the first cause.
  std::optional<Reason> OnFailure(const std::string& job_id, int64_t attempt, const Reason& cause,
                                  bool echo, bool others_live);
  // Whether the job waits for a first cause.
  bool Waiting(const std::string& job_id) const;
  // Ends the job's wait now (every task has reported): its echo's reason when the wait was for
  // `current_attempt` (nullopt: the job ended or is unknown), else nullopt.
  std::optional<Reason> EndNow(const std::string& job_id, std::optional<int64_t> current_attempt);
  // The same once its deadline has passed; before then, a wait for `current_attempt` stays and
  // nullopt comes back. A wait for another attempt (or an ended job) is dropped.
  std::optional<Reason> EndIfDue(const std::string& job_id, std::optional<int64_t> current_attempt);
  // The jobs waiting, for a round over them with EndIfDue.
  std::vector<std::string> WaitingJobs() const;

 private:
  struct Wait {
    int64_t attempt = 0;
    Reason reason{ReasonCode::kTaskFailed, ""};  // the first echo's
    Clock::TimePoint deadline;
  };
  const Clock* clock_;
  const Clock::Duration window_;
  std::map<std::string, Wait> waits_;  // by job id
};

}  // namespace deepool::coordinator
