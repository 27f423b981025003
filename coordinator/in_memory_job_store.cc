#include <algorithm>

#include "coordinator/job_store.h"

namespace deepool::coordinator {

Status InMemoryJobStore::SaveJob(const JobRecord& job) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_[job.id] = job;
  return Status::Ok();
}

StatusOr<std::vector<JobRecord>> InMemoryJobStore::LoadJobs() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<JobRecord> jobs;
  for (const auto& [id, job] : jobs_) jobs.push_back(job);
  std::sort(jobs.begin(), jobs.end(),
            [](const JobRecord& a, const JobRecord& b) { return a.seq < b.seq; });
  return jobs;
}

StatusOr<JobRecord> InMemoryJobStore::LoadJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NotFoundError("job " + job_id + " is not stored");
  return it->second;
}

Status InMemoryJobStore::DeleteJobs(const std::vector<std::string>& job_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : job_ids) {
    jobs_.erase(id);
    logs_.erase(id);
  }
  return Status::Ok();
}

Status InMemoryJobStore::AppendLogs(const std::string& job_id, std::vector<LogRecord>* lines) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LogRecord>& log = logs_[job_id];
  for (LogRecord& line : *lines) {
    line.seq = static_cast<int64_t>(log.size()) + 1;
    log.push_back(line);
  }
  return Status::Ok();
}

StatusOr<std::vector<LogRecord>> InMemoryJobStore::ReadLogs(const std::string& job_id,
                                                            int64_t after_seq, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LogRecord> out;
  auto it = logs_.find(job_id);
  if (it == logs_.end()) return out;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(after_seq, 0)); i < it->second.size();
       ++i) {
    if (limit > 0 && static_cast<int>(out.size()) >= limit) break;
    out.push_back(it->second[i]);
  }
  return out;
}

StatusOr<std::vector<LogRecord>> InMemoryJobStore::TailLogs(const std::string& job_id, int count) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = logs_.find(job_id);
  if (it == logs_.end()) return std::vector<LogRecord>{};
  const auto& log = it->second;
  size_t first = log.size() > static_cast<size_t>(count) ? log.size() - count : 0;
  return std::vector<LogRecord>(log.begin() + static_cast<long>(first), log.end());
}

Status InMemoryJobStore::SaveProfile(const std::string& model_key, const std::string& device_type,
                                     const std::string& profile_json) {
  std::lock_guard<std::mutex> lock(mu_);
  profiles_[{model_key, device_type}] = profile_json;
  return Status::Ok();
}

StatusOr<std::optional<std::string>> InMemoryJobStore::LoadProfile(const std::string& model_key,
                                                                   const std::string& device_type) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = profiles_.find({model_key, device_type});
  if (it == profiles_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

Status InMemoryJobStore::ReserveSeqs(int64_t bound) {
  std::lock_guard<std::mutex> lock(mu_);
  seq_reservation_ = bound;
  return Status::Ok();
}

StatusOr<int64_t> InMemoryJobStore::LoadSeqReservation() {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_reservation_;
}

}  // namespace deepool::coordinator
