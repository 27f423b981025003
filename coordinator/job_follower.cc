#include "coordinator/job_follower.h"

#include <algorithm>
#include <optional>

namespace deepool::coordinator {
namespace {

constexpr int kLogPage = 1000;  // lines read from the store per call while catching up

}  // namespace

Status JobFollower::WaitForChange(const std::string& job_id, uint64_t seen,
                                  const FollowStop& stop) const {
  while (true) {
    const uint64_t version = jobs_->WaitForJobChange(job_id, seen, stop.cancel_probe);
    if (jobs_->shutting_down()) return UnavailableError("coordinator is shutting down");
    if (stop.cancelled()) return CancelledError("the client cancelled");
    if (version > seen) return Status::Ok();
  }
}

Status JobFollower::Watch(const std::string& job_id,
                          const std::function<bool(const JobRecord&)>& send,
                          const FollowStop& stop) const {
  while (true) {
    // The version first: a change after it is read wakes the wait below.
    const uint64_t seen = jobs_->JobVersion(job_id);
    const JobSnapshot job = jobs_->Find(job_id);  // no copy of the record per update
    if (!job) return NotFoundError("job " + job_id + " not found");
    if (!send(*job)) return Status::Ok();
    if (IsTerminal(job->state)) return Status::Ok();
    RETURN_IF_ERROR(WaitForChange(job_id, seen, stop));
  }
}

Status JobFollower::Logs(const std::string& job_id, const LogFollowRequest& request,
                         const std::function<bool(const LogRecord&)>& send,
                         const FollowStop& stop) const {
  if (request.tail_lines < 0) return InvalidArgumentError("tail_lines: must be >= 0");
  // Before the first read: whatever is appended after it is followed, not lost.
  uint64_t seen = jobs_->JobVersion(job_id);
  // Where to start: a job's lines are numbered one by one from 1, so the tail of N lines
  // starts after the last line's number less N.
  int64_t last_seq = 0;
  if (request.tail_lines > 0) {
    ASSIGN_OR_RETURN(const std::vector<LogRecord> last, jobs_->TailLogs(job_id, 1));
    if (!last.empty()) last_seq = std::max<int64_t>(0, last.back().seq - request.tail_lines);
  }
  // A page at a time: a log of millions of lines is never held whole.
  while (true) {
    // The state before the read: a job that had ended has all its lines stored already.
    std::optional<JobState> state;
    if (request.follow) {
      const JobSnapshot job = jobs_->Find(job_id);
      if (!job) return NotFoundError("job " + job_id + " not found");
      state = job->state;
    }
    ASSIGN_OR_RETURN(std::vector<LogRecord> more, jobs_->ReadLogs(job_id, last_seq, kLogPage));
    for (const LogRecord& line : more) {
      if (!send(line)) return Status::Ok();
      last_seq = line.seq;
    }
    if (!more.empty()) continue;
    if (!request.follow || IsTerminal(*state)) return Status::Ok();
    RETURN_IF_ERROR(WaitForChange(job_id, seen, stop));
    seen = jobs_->JobVersion(job_id);
  }
}

}  // namespace deepool::coordinator
