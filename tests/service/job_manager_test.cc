#include "coordinator/job_manager.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "common/clock.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator {
namespace {

JobSpec TinySpec() {
  JobSpec spec;
  spec.name = "tiny";
  spec.model = "tiny";
  spec.global_batch = 8;
  spec.iterations = 4;
  return spec;
}

TEST_CASE("jobs walk the lifecycle with timestamped history", "[job_manager]") {
  FakeClock clock(5'000);
  InMemoryJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());

  StatusOr<JobRecord> job = jobs.Submit(TinySpec());
  REQUIRE(job.ok());
  CHECK(job->id == "job-000001");
  CHECK(job->state == JobState::kPending);
  CHECK_FALSE(job->reason.empty());
  CHECK(job->submitted_ms == 5'000);

  clock.Advance(std::chrono::seconds(1));
  REQUIRE(jobs.Transition(job->id, JobState::kProfiling, "measuring").ok());
  clock.Advance(std::chrono::seconds(1));
  REQUIRE(jobs.Transition(job->id, JobState::kPlanning, "planning").ok());
  clock.Advance(std::chrono::seconds(1));
  REQUIRE(
      jobs.Transition(job->id, JobState::kRunning, "go", [](JobRecord& r) { r.attempt = 1; }).ok());
  clock.Advance(std::chrono::seconds(1));
  StatusOr<JobRecord> done = jobs.Transition(job->id, JobState::kSucceeded, "");
  REQUIRE(done.ok());
  CHECK(done->attempt == 1);
  REQUIRE(done->history.size() == 5);
  CHECK(done->history[1].state == JobState::kProfiling);
  CHECK(done->history[1].time_ms == 6'000);
  CHECK(done->history[4].state == JobState::kSucceeded);
  CHECK(done->history[4].time_ms == 9'000);

  // Terminal is terminal.
  StatusOr<JobRecord> again = jobs.Transition(job->id, JobState::kPending, "requeue");
  CHECK(again.status().code() == StatusCode::kFailedPrecondition);
  // The store saw every change.
  CHECK(store.LoadJobs()->front().state == JobState::kSucceeded);
}

TEST_CASE("the lifecycle refuses skipped phases and success before running", "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  JobRecord job = *jobs.Submit(TinySpec());
  CHECK(jobs.Transition(job.id, JobState::kRunning, "").status().code() ==
        StatusCode::kFailedPrecondition);
  CHECK(jobs.Transition(job.id, JobState::kSucceeded, "").status().code() ==
        StatusCode::kFailedPrecondition);
  CHECK(jobs.Transition("job-999999", JobState::kFailed, "").status().code() ==
        StatusCode::kNotFound);
  // Cancel is allowed from PENDING.
  StatusOr<JobRecord> cancelled = jobs.Transition(job.id, JobState::kCancelled, "by user");
  REQUIRE(cancelled.ok());
  CHECK(cancelled->reason == "by user");
}

TEST_CASE("lists are newest first and filter by state", "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  JobRecord a = *jobs.Submit(TinySpec());
  JobRecord b = *jobs.Submit(TinySpec());
  JobRecord c = *jobs.Submit(TinySpec());
  REQUIRE(jobs.Transition(b.id, JobState::kCancelled, "").ok());
  std::vector<JobRecord> all = jobs.List({}, 0);
  REQUIRE(all.size() == 3);
  CHECK(all[0].id == c.id);
  CHECK(all[2].id == a.id);
  CHECK(jobs.List({}, 2).size() == 2);
  std::vector<JobRecord> pending = jobs.List({JobState::kPending}, 0);
  REQUIRE(pending.size() == 2);
  CHECK(jobs.Active().front().id == a.id);
}

// A JobManager over a SQLite file, loaded: one run of a coordinator process.
struct SqliteRun {
  SqliteRun(const testing::TempDir& dir, const Clock* clock)
      : store(Open(dir)), jobs(store.get(), clock) {
    REQUIRE(jobs.Load().ok());
  }
  static std::unique_ptr<JobStore> Open(const testing::TempDir& dir) {
    auto opened = OpenSQLiteJobStore(dir.File("c.db"));
    REQUIRE(opened.ok());
    return std::move(*opened);
  }
  std::unique_ptr<JobStore> store;
  JobManager jobs;
};

TEST_CASE("a reloaded manager continues ids and keeps everything (SQLite restart)",
          "[job_manager]") {
  testing::TempDir dir;
  FakeClock clock;
  std::string id;
  {
    SqliteRun run(dir, &clock);
    id = run.jobs.Submit(TinySpec())->id;
    REQUIRE(run.jobs.Transition(id, JobState::kPlanning, "p").ok());
    REQUIRE(run.jobs.Update(id, [](JobRecord& r) { r.progress.iteration = 2; }).ok());
    REQUIRE(run.jobs.AppendLogs(id, {{0, 1, "n", 0, "hello"}}).ok());
    run.jobs.Shutdown();  // a clean stop
  }
  SqliteRun run(dir, &clock);
  StatusOr<JobRecord> job = run.jobs.Get(id);
  REQUIRE(job.ok());
  CHECK(job->state == JobState::kPlanning);
  CHECK(job->progress.iteration == 2);
  CHECK(job->history.size() == 2);
  CHECK(run.jobs.ReadLogs(id, 0, 0)->at(0).line == "hello");
  CHECK(run.jobs.Submit(TinySpec())->id == "job-000002");
}

TEST_CASE("a request id finds its job again after a restart (SQLite)", "[job_manager]") {
  testing::TempDir dir;
  FakeClock clock;
  std::string id;
  {
    SqliteRun run(dir, &clock);
    id = run.jobs.Submit(TinySpec(), "key-1")->id;
  }  // killed: the answer may never have reached the client
  SqliteRun run(dir, &clock);
  CHECK(run.jobs.Submit(TinySpec(), "key-1")->id == id);
  CHECK(run.jobs.List({}, 0).size() == 1);
}

TEST_CASE("an id is never issued twice, even after its job's record was lost", "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  JobManager before(&store, &clock);
  REQUIRE(before.Load().ok());
  std::vector<std::string> issued;
  for (int i = 0; i < 3; ++i) issued.push_back(before.Submit(TinySpec())->id);
  CHECK(issued.back() == "job-000003");

  SECTION("a crash keeps the reservation: the next start skips the rest of the block") {
    // What survived on disk: the first job only, and the reservation.
    InMemoryJobStore survived;
    REQUIRE(survived.SaveJob(*before.Get(issued[0])).ok());
    REQUIRE(survived.ReserveSeqs(*store.LoadSeqReservation()).ok());
    JobManager after(&survived, &clock);
    REQUIRE(after.Load().ok());
    const std::string next = after.Submit(TinySpec())->id;
    CHECK(std::find(issued.begin(), issued.end(), next) == issued.end());
    CHECK(next > issued.back());
  }
  SECTION("a clean stop hands the block back: the next start goes on from the next id") {
    before.Shutdown();
    JobManager after(&store, &clock);
    REQUIRE(after.Load().ok());
    CHECK(after.Submit(TinySpec())->id == "job-000004");
  }
}

TEST_CASE("WaitForChange returns once something changed", "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  uint64_t seen = jobs.version();
  JobRecord a = *jobs.Submit(TinySpec());
  CHECK(jobs.WaitForChange(seen, std::chrono::milliseconds(0)) > seen);
  // Per-job versions move only with that job.
  const uint64_t a_seen = jobs.JobVersion(a.id);
  CHECK(a_seen > 0);
  CHECK(jobs.JobVersion("job-999999") == 0);
  REQUIRE(jobs.Submit(TinySpec()).ok());
  CHECK(jobs.WaitForJobChange(a.id, a_seen, std::chrono::milliseconds(0)) == a_seen);
  REQUIRE(jobs.AppendLogs(a.id, {{0, 1, "n", 0, "line"}}).ok());
  CHECK(jobs.WaitForJobChange(a.id, a_seen, std::chrono::milliseconds(0)) > a_seen);
  jobs.Shutdown();
  CHECK(jobs.shutting_down());
  CHECK(jobs.Submit(TinySpec()).status().code() == StatusCode::kUnavailable);
}

}  // namespace
}  // namespace deepool::coordinator
