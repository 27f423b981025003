// FailingJobStore: an in-memory JobStore whose writes fail on demand, as a full disk or a lost
// database would make them, to test that no store error is dropped.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>

#include "coordinator/job_store.h"

namespace deepool::coordinator::testing {

class FailingJobStore final : public JobStore {
 public:
  // While set, every write (jobs, logs, profiles) fails with UNAVAILABLE; reads work.
  std::atomic<bool> fail_writes{false};
  std::atomic<int> failed_writes{0};
  // While set, a job's save lands and then reports UNAVAILABLE, as a COMMIT whose answer was
  // lost with the connection.
  std::atomic<bool> lose_save_answers{false};
  // While set, loading the jobs fails as a corrupt database would make it.
  std::atomic<bool> fail_loads{false};
  // Runs at the start of LoadJobs (a test holds a load there, as a large store would take long).
  std::function<void()> on_load;
  // Runs at the start of SaveJob (a test holds a write there, as a large or slow one would). Set
  // while servers run, so it is guarded: their threads read it.
  void SetOnSave(std::function<void(const JobRecord&)> hook) {
    std::lock_guard<std::mutex> lock(hook_mu_);
    on_save_ = std::move(hook);
  }

  Status SaveJob(const JobRecord& job) override {
    std::function<void(const JobRecord&)> on_save;
    {
      std::lock_guard<std::mutex> lock(hook_mu_);
      on_save = on_save_;
    }
    if (on_save) on_save(job);
    if (Refuse()) return Failure();
    RETURN_IF_ERROR(memory_.SaveJob(job));
    if (lose_save_answers) return UnavailableError("connection lost after the COMMIT (injected)");
    return Status::Ok();
  }
  // A save of progress alone (which a real store may commit without waiting for the disk):
  // counted, then as SaveJob.
  std::atomic<int> progress_saves{0};
  using JobStore::SaveProgress;  // of several jobs: each as below
  Status SaveProgress(const JobRecord& job) override {
    ++progress_saves;
    return SaveJob(job);
  }
  StatusOr<std::vector<JobRecord>> LoadJobs() override {
    if (on_load) on_load();
    if (fail_loads) return DataLossError("database disk image is malformed (injected)");
    return memory_.LoadJobs();
  }
  StatusOr<JobRecord> LoadJob(const std::string& job_id) override {
    return memory_.LoadJob(job_id);
  }
  Status DeleteJobs(const std::vector<std::string>& job_ids) override {
    if (Refuse()) return Failure();
    return memory_.DeleteJobs(job_ids);
  }
  Status AppendLogs(const std::string& job_id, std::vector<LogRecord>* lines) override {
    if (Refuse()) return Failure();
    return memory_.AppendLogs(job_id, lines);
  }
  StatusOr<std::vector<LogRecord>> ReadLogs(const std::string& job_id, int64_t after_seq,
                                            int limit) override {
    return memory_.ReadLogs(job_id, after_seq, limit);
  }
  StatusOr<std::vector<LogRecord>> TailLogs(const std::string& job_id, int count) override {
    return memory_.TailLogs(job_id, count);
  }
  Status SaveProfile(const std::string& model_key, const std::string& device_type,
                     const std::string& profile_json) override {
    if (Refuse()) return Failure();
    return memory_.SaveProfile(model_key, device_type, profile_json);
  }
  StatusOr<std::optional<std::string>> LoadProfile(const std::string& model_key,
                                                   const std::string& device_type) override {
    return memory_.LoadProfile(model_key, device_type);
  }
  // Runs at the start of ReserveSeqs (a test holds a reservation there, as a slow disk would).
  void SetOnReserve(std::function<void(int64_t bound)> hook) {
    std::lock_guard<std::mutex> lock(hook_mu_);
    on_reserve_ = std::move(hook);
  }
  std::atomic<int> reservations{0};
  Status ReserveSeqs(int64_t bound) override {
    std::function<void(int64_t)> on_reserve;
    {
      std::lock_guard<std::mutex> lock(hook_mu_);
      on_reserve = on_reserve_;
    }
    if (on_reserve) on_reserve(bound);
    ++reservations;
    if (Refuse()) return Failure();
    return memory_.ReserveSeqs(bound);
  }
  StatusOr<int64_t> LoadSeqReservation() override { return memory_.LoadSeqReservation(); }

 private:
  std::mutex hook_mu_;
  std::function<void(const JobRecord&)> on_save_;
  std::function<void(int64_t)> on_reserve_;  // guarded by hook_mu_
  bool Refuse() {
    if (!fail_writes) return false;
    ++failed_writes;
    return true;
  }
  static Status Failure() { return UnavailableError("disk full (injected)"); }

  InMemoryJobStore memory_;
};

}  // namespace deepool::coordinator::testing
