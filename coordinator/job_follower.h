// JobFollower: the loops behind the client streams that follow a job (WatchJob: the job after
// each change; GetJobLogs: its log lines, then new ones as they arrive), kept out of the gRPC
// handlers so tests drive them directly with an in-memory JobManager.
//
// The loops sleep on JobManager's change notification and wake at once when the job changes,
// its logs grow, or the coordinator shuts down (see follow_stop.h for the cancel probe).
//
// Threading: holds no state besides the JobManager (thread-safe, must outlive it); any number
// of loops run at once, each on its caller's thread, and `send` runs on that thread too.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "coordinator/follow_stop.h"
#include "coordinator/job_manager.h"

namespace deepool::coordinator {

struct LogFollowRequest {
  int tail_lines = 0;   // the last N lines first; 0: every line; < 0 is INVALID_ARGUMENT
  bool follow = false;  // then new lines until the job ends
};

class JobFollower {
 public:
  explicit JobFollower(const JobManager* jobs) : jobs_(jobs) {}

  // Calls `send` with the job now and after each change until it is terminal. OK once the
  // terminal state is sent or `send` returns false (the stream closed); CANCELLED when
  // stop.cancelled(); UNAVAILABLE when the coordinator shuts down; NOT_FOUND for no such job.
  // A change of the job's logs alone sends the job again: `send` may skip what looks the same.
  Status Watch(const std::string& job_id, const std::function<bool(const JobRecord&)>& send,
               const FollowStop& stop = {}) const;

  // Calls `send` with the job's log lines in order (see LogFollowRequest). Ends as Watch does;
  // when following, every line stored before the job ended is sent before OK.
  Status Logs(const std::string& job_id, const LogFollowRequest& request,
              const std::function<bool(const LogRecord&)>& send, const FollowStop& stop = {}) const;

 private:
  // Blocks until the job's version exceeds `seen` (OK), the client cancels (CANCELLED) or the
  // coordinator shuts down (UNAVAILABLE).
  Status WaitForChange(const std::string& job_id, uint64_t seen, const FollowStop& stop) const;

  const JobManager* jobs_;
};

}  // namespace deepool::coordinator
