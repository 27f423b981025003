#include "coordinator/job_writes.h"

#include <set>

namespace deepool::coordinator {

bool MayPass(const Status& status) {
  switch (status.code()) {
    case StatusCode::kFailedPrecondition:
    case StatusCode::kNotFound:
    case StatusCode::kInvalidArgument:
    case StatusCode::kAlreadyExists:
      return false;
    default:
      return !status.ok();
  }
}

JobWrite TransitionWrite(std::string job_id, JobState state, Reason reason, bool retry) {
  JobWrite write;
  write.job_id = std::move(job_id);
  write.state = state;
  write.reason = std::move(reason);
  write.retry = retry;
  return write;
}

JobWrite UpdateWrite(std::string job_id, std::function<void(JobRecord&)> mutate) {
  JobWrite write;
  write.job_id = std::move(job_id);
  write.mutate = std::move(mutate);
  return write;
}

JobWrite AdviceWrite(std::string job_id, std::function<void(JobRecord&)> mutate) {
  JobWrite write = UpdateWrite(std::move(job_id), std::move(mutate));
  write.advice = true;
  return write;
}

std::vector<JobWriteResult> ApplyJobWrites(JobManager* jobs, std::vector<JobWrite> writes) {
  std::vector<JobWriteResult> results;
  results.reserve(writes.size());
  std::set<std::string> held_back;  // jobs with a write kept for later
  for (JobWrite& write : writes) {
    if (held_back.count(write.job_id) != 0) {
      results.push_back({std::move(write), UnavailableError("behind an earlier write"), true});
      continue;
    }
    StatusOr<JobRecord> stored =
        write.state    ? jobs->Transition(write.job_id, *write.state, write.reason, write.mutate)
        : write.advice ? jobs->UpdateAdvice(write.job_id, write.mutate)
                       : jobs->Update(write.job_id, write.mutate);
    const bool later = !stored.ok() && write.retry && MayPass(stored.status());
    if (later) held_back.insert(write.job_id);
    results.push_back({std::move(write), std::move(stored), later});
  }
  return results;
}

}  // namespace deepool::coordinator
