// Durability: a coordinator killed between any two store writes of a job's life comes back with
// a consistent job, and finishes it. The kill is a store that stops writing after its k-th write
// (what reaches SQLite before a kill -9 is every committed write, nothing after), for every k
// over the writes of a whole life; the restart is a new scheduler over the reopened database.
#include <catch2/catch.hpp>

#include "tests/service/scheduler_harness.h"

namespace deepool::coordinator::testing {
namespace {

// Forwards to a real store until `writes_left` writes have been made; then every write fails
// and reaches nothing, as in a process that was killed.
class CutJobStore final : public JobStore {
 public:
  CutJobStore(JobStore* store, int writes_left) : store_(store), writes_left_(writes_left) {}
  int writes() const { return writes_; }

  Status SaveJob(const JobRecord& job) override {
    RETURN_IF_ERROR(Write());
    return store_->SaveJob(job);
  }
  StatusOr<std::vector<JobRecord>> LoadJobs() override { return store_->LoadJobs(); }
  Status AppendLogs(const std::string& job_id, std::vector<LogRecord>* lines) override {
    RETURN_IF_ERROR(Write());
    return store_->AppendLogs(job_id, lines);
  }
  StatusOr<std::vector<LogRecord>> ReadLogs(const std::string& job_id, int64_t after_seq,
                                            int limit) override {
    return store_->ReadLogs(job_id, after_seq, limit);
  }
  StatusOr<std::vector<LogRecord>> TailLogs(const std::string& job_id, int count) override {
    return store_->TailLogs(job_id, count);
  }
  Status SaveProfile(const std::string& model_key, const std::string& device_type,
                     const std::string& profile_json) override {
    RETURN_IF_ERROR(Write());
    return store_->SaveProfile(model_key, device_type, profile_json);
  }
  StatusOr<std::optional<std::string>> LoadProfile(const std::string& model_key,
                                                   const std::string& device_type) override {
    return store_->LoadProfile(model_key, device_type);
  }
  Status ReserveSeqs(int64_t bound) override {
    RETURN_IF_ERROR(Write());
    return store_->ReserveSeqs(bound);
  }
  StatusOr<int64_t> LoadSeqReservation() override { return store_->LoadSeqReservation(); }

 private:
  Status Write() {
    if (writes_left_ <= 0) return UnavailableError("killed (injected)");
    --writes_left_;
    ++writes_;
    return Status::Ok();
  }
  JobStore* store_;
  int writes_left_;
  int writes_ = 0;
};

// One life: submitted, planned, dispatched, its rank 0 reports the store, an iteration and a log
// line, and it succeeds. Calls after the kill fail; their errors are what a dead process returns.
struct Life {
  std::string job_id;  // set once the submission was acknowledged
};

Life LiveUntilKilled(JobStore* store) {
  Life life;
  Harness h(store);
  h.AddNode("a", 1);
  StatusOr<JobRecord> submitted = h.scheduler.Submit(Fg(1));
  if (!submitted.ok()) return life;
  life.job_id = submitted->id;
  h.scheduler.Tick();
  const std::vector<std::string> tasks = h.Get(life.job_id).task_ids;
  if (tasks.empty()) return life;
  v1::ReportProgressRequest progress;
  progress.set_node_id("node-a");
  progress.set_task_id(tasks[0]);
  progress.set_store_ready("10.0.0.a:29501");
  v1::IterationEvent* iteration = progress.add_iterations();
  iteration->set_rank(0);
  iteration->set_iteration(4);
  v1::LogLine* line = progress.add_logs();
  line->set_rank(0);
  line->set_line("iteration 5 of 5");
  if (!h.scheduler.ReportProgress(progress).ok()) return life;
  v1::ReportTaskExitRequest exit;
  exit.set_node_id("node-a");
  exit.set_task_id(tasks[0]);
  exit.set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
  // Refused once the store is cut; a dead process returns nothing either.
  if (!h.scheduler.ReportTaskExit(exit).ok()) return life;
  h.scheduler.Tick();  // a write that failed is retried, and fails again
  return life;
}

// The states of an uninterrupted life, in order.
const std::vector<JobState> kLife = {JobState::kPending, JobState::kPlanning, JobState::kRunning,
                                     JobState::kSucceeded};

void CheckConsistent(const JobRecord& job) {
  INFO("job " << job.id << " " << StateName(job.state));
  REQUIRE_FALSE(job.history.empty());
  CHECK(job.history.back().state == job.state);
  REQUIRE(job.history.size() <= kLife.size());
  for (size_t i = 0; i < job.history.size(); ++i) CHECK(job.history[i].state == kLife[i]);
  CHECK(job.task_ids.empty() == (job.state == JobState::kPending ||
                                 job.state == JobState::kPlanning));
  CHECK(job.progress.iteration <= job.spec.iterations);
}

TEST_CASE("a coordinator killed between any two writes of a job's life comes back consistent",
          "[scheduler][durability]") {
  int life_writes = 0;
  {
    TempDir dir;
    auto sqlite = OpenSQLiteJobStore(dir.File("c.db"));
    REQUIRE(sqlite.ok());
    CutJobStore uncut(sqlite->get(), 1'000);
    LiveUntilKilled(&uncut);
    life_writes = uncut.writes();
  }
  REQUIRE(life_writes >= 6);  // reservation, 4 states, store address, progress, logs

  for (int kill_after = 0; kill_after <= life_writes; ++kill_after) {
    DYNAMIC_SECTION("killed after write " << kill_after << " of " << life_writes) {
      TempDir dir;
      Life life;
      {
        auto sqlite = OpenSQLiteJobStore(dir.File("c.db"));
        REQUIRE(sqlite.ok());
        CutJobStore cut(sqlite->get(), kill_after);
        life = LiveUntilKilled(&cut);
      }
      auto sqlite = OpenSQLiteJobStore(dir.File("c.db"));
      REQUIRE(sqlite.ok());
      StatusOr<std::vector<JobRecord>> stored = (*sqlite)->LoadJobs();
      REQUIRE(stored.ok());
      REQUIRE(stored->size() <= 1);
      if (!life.job_id.empty()) REQUIRE(stored->size() == 1);  // acknowledged: kept
      if (stored->empty()) continue;
      const JobRecord before = stored->front();
      CheckConsistent(before);

      Harness h(sqlite->get());  // the restart
      std::vector<v1::RunningTask> running;
      if (before.state == JobState::kRunning) running.push_back(Running(before.task_ids[0], before.id));
      h.AddNode("a", 1, "cpu", running);  // the worker still runs what it was sent
      h.scheduler.Tick();
      const JobRecord restarted = h.Get(before.id);
      if (restarted.state != JobState::kSucceeded) {
        REQUIRE(restarted.state == JobState::kRunning);
        h.Exit("node-a", restarted.task_ids.at(0), v1::TASK_OUTCOME_SUCCEEDED);
      }
      const JobRecord end = h.Get(before.id);
      CHECK(end.state == JobState::kSucceeded);
      CHECK(end.progress.iteration == end.spec.iterations);
      CHECK(h.Submit(Fg(1)).id != before.id);  // and no id is issued twice
    }
  }
}

}  // namespace
}  // namespace deepool::coordinator::testing
