// What the JobManager refuses at submission or leaves behind when a submission fails (per-user
// limits, a checkpoint directory in use, a write that failed or landed unanswered), and when a
// finished job goes (ForgetFinished).
#include <catch2/catch.hpp>

#include "common/clock.h"
#include "coordinator/job_manager.h"
#include "tests/service/failing_job_store.h"
#include "tests/service/job_manager_test_util.h"

namespace deepool::coordinator {
namespace {

using testing::GraphSpec;
using testing::Run;
using testing::TinySpec;

TEST_CASE("finished jobs are forgotten oldest end first, from the store too, unfinished never",
          "[job_manager]") {
  FakeClock clock;
  testing::FailingJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  // Ended an hour apart, in another order than submitted: alice's job-2 first, then her job-1,
  // then bob's job-3 (with a request id). job-4 stays PENDING, job-5 RUNNING.
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    StatusOr<JobRecord> job =
        jobs.Submit(TinySpec(), i == 2 ? "key-3" : "", i == 2 ? "bob" : "alice");
    REQUIRE(job.ok());
    ids.push_back(job->id);
    REQUIRE(jobs.AppendLogs(job->id, {{0, 1, "node-a", 0, "line"}}).ok());
  }
  Run(&jobs, ids[4]);
  const int64_t start = clock.WallMillis();
  for (int i : {1, 0, 2}) {
    clock.Advance(std::chrono::hours(1));
    REQUIRE(jobs.Transition(ids[i], JobState::kCancelled, "").ok());
  }
  // Nothing ended before the first end: nothing goes.
  CHECK(*jobs.ForgetFinished(start, 10) == 0);
  // Ended before start + 2.5 h: job-2 and job-1, and at most one a call.
  CHECK(*jobs.ForgetFinished(start + 9'000'000, 1) == 1);
  CHECK(jobs.Get(ids[1]).status().code() == StatusCode::kNotFound);
  CHECK(jobs.Get(ids[0]).ok());
  // A store that fails its write forgets nothing.
  store.fail_writes = true;
  CHECK(jobs.ForgetFinished(start + 9'000'000, 10).status().code() == StatusCode::kUnavailable);
  CHECK(jobs.Get(ids[0]).ok());
  store.fail_writes = false;
  CHECK(*jobs.ForgetFinished(start + 9'000'000, 10) == 1);
  CHECK(jobs.Get(ids[0]).status().code() == StatusCode::kNotFound);
  CHECK(jobs.Get(ids[2]).ok());
  CHECK(store.LoadJob(ids[0]).status().code() == StatusCode::kNotFound);
  CHECK(store.ReadLogs(ids[0], 0, 0)->empty());
  CHECK(jobs.ReadLogs(ids[0], 0, 0).status().code() == StatusCode::kNotFound);

  // Everything ended: only the unfinished jobs are left, in every list, count and index.
  clock.Advance(std::chrono::hours(24 * 365));
  CHECK(*jobs.ForgetFinished(clock.WallMillis(), 10) == 1);
  CHECK(*jobs.ForgetFinished(clock.WallMillis(), 10) == 0);
  std::vector<std::string> listed;
  for (const JobRecord& job : jobs.List({}, 0)) listed.push_back(job.id);
  CHECK(listed == std::vector<std::string>{ids[4], ids[3]});
  CHECK(jobs.List({}, 0, std::string("bob")).empty());
  CHECK(jobs.List({}, 0, std::string("alice")).size() == 2);
  CHECK(jobs.Counts() == JobCounts{{{JobState::kPending, JobRole::kFg}, 1},
                                   {{JobState::kRunning, JobRole::kFg}, 1}});
  CHECK(jobs.Active().size() == 2);
  // Bob's request id is free again: the same key makes a new job, not the forgotten one.
  StatusOr<JobRecord> again = jobs.Submit(TinySpec(), "key-3", "bob");
  REQUIRE(again.ok());
  CHECK(again->id != ids[2]);

  // A reloaded manager sees what the store kept.
  JobManager reloaded(&store, &clock);
  REQUIRE(reloaded.Load().ok());
  CHECK(reloaded.List({}, 0).size() == 3);
  CHECK(reloaded.Get(ids[2]).status().code() == StatusCode::kNotFound);
}

TEST_CASE("a submission whose write landed but was not answered leaves no record behind",
          "[job_manager]") {
  FakeClock clock;
  testing::FailingJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  REQUIRE(jobs.Submit(TinySpec()).ok());  // job-000001 stays
  store.lose_save_answers = true;
  CHECK(jobs.Submit(TinySpec(), "key-1").status().code() == StatusCode::kUnavailable);
  store.lose_save_answers = false;
  // Nothing loads at the next start but the job that was answered.
  StatusOr<std::vector<JobRecord>> stored = store.LoadJobs();
  REQUIRE(stored.ok());
  REQUIRE(stored->size() == 1);
  CHECK(stored->front().id == "job-000001");
  // The client's retry is the one job of that request.
  StatusOr<JobRecord> retried = jobs.Submit(TinySpec(), "key-1");
  REQUIRE(retried.ok());
  JobManager reloaded(&store, &clock);
  REQUIRE(reloaded.Load().ok());
  CHECK(reloaded.List({}, 0).size() == 2);
}

TEST_CASE("two unfinished jobs never share a checkpoint directory", "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  JobSpec spec = TinySpec();
  spec.checkpoint_dir = "/shared/ckpt/run-1";
  StatusOr<JobRecord> first = jobs.Submit(spec);
  REQUIRE(first.ok());
  // The same directory, however it is written, is refused while the first job is unfinished.
  for (const std::string dir :
       {"/shared/ckpt/run-1", "/shared/ckpt/run-1/", "/shared//ckpt/./run-1"}) {
    JobSpec same = TinySpec();
    same.checkpoint_dir = dir;
    const Status refused = jobs.Submit(same, "", "bob").status();
    CHECK(refused.code() == StatusCode::kFailedPrecondition);
    CHECK_THAT(refused.message(), Catch::Contains(first->id + ", which is PENDING"));
  }
  spec.checkpoint_dir = "/shared/ckpt/run-2";
  CHECK(jobs.Submit(spec).ok());
  Run(&jobs, first->id);
  spec.checkpoint_dir = "/shared/ckpt/run-1";
  CHECK_THAT(jobs.Submit(spec).status().message(), Catch::Contains("which is RUNNING"));
  // Once it ended, its directory may be resumed from by a new job.
  REQUIRE(jobs.Transition(first->id, JobState::kCancelled, "").ok());
  StatusOr<JobRecord> next = jobs.Submit(spec);
  REQUIRE(next.ok());
  // A reloaded manager knows the unfinished jobs' directories too.
  JobManager reloaded(&store, &clock);
  REQUIRE(reloaded.Load().ok());
  CHECK_THAT(reloaded.Submit(spec).status().message(), Catch::Contains(next->id));
}

TEST_CASE("a submission whose write fails leaves nothing behind, its id and quota included",
          "[job_manager]") {
  FakeClock clock;
  testing::FailingJobStore store;
  JobLimits limits;
  limits.max_pending_jobs_per_user = 1;
  JobManager jobs(&store, &clock, limits);
  REQUIRE(jobs.Load().ok());
  store.fail_writes = true;
  CHECK(jobs.Submit(TinySpec(), "key-1", "alice").status().code() == StatusCode::kUnavailable);
  store.fail_writes = false;
  StatusOr<JobRecord> stored = jobs.Submit(TinySpec(), "key-1", "alice");
  REQUIRE(stored.ok());
  CHECK(stored->id == "job-000001");
  CHECK(jobs.List({}, 0).size() == 1);
}

TEST_CASE("per-user limits refuse a user's pending jobs and spec bytes past them, not others'",
          "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  SECTION("pending jobs") {
    JobLimits limits;
    limits.max_pending_jobs_per_user = 2;
    JobManager jobs(&store, &clock, limits);
    REQUIRE(jobs.Load().ok());
    const JobRecord first = *jobs.Submit(TinySpec(), "", "alice");
    REQUIRE(jobs.Submit(TinySpec(), "", "alice").ok());
    StatusOr<JobRecord> third = jobs.Submit(TinySpec(), "", "alice");
    REQUIRE(third.status().code() == StatusCode::kResourceExhausted);
    CHECK_THAT(third.status().message(), Catch::Contains("user alice"));
    CHECK_THAT(third.status().message(), Catch::Contains("--max-pending-jobs-per-user 2"));
    CHECK(jobs.Submit(TinySpec(), "", "bob").ok());  // another user's queue is their own
    // A job that leaves the queue makes room; a retry of a stored submission is no new job.
    REQUIRE(jobs.Transition(first.id, JobState::kPlanning, "p").ok());
    REQUIRE(jobs.Submit(TinySpec(), "key-a", "alice").ok());
    CHECK(jobs.Submit(TinySpec(), "key-a", "alice").ok());
    CHECK(jobs.Submit(TinySpec(), "", "alice").status().code() == StatusCode::kResourceExhausted);
  }
  SECTION("spec bytes of unfinished jobs") {
    JobLimits limits;
    limits.max_spec_bytes_per_user = 3 << 20;
    JobManager jobs(&store, &clock, limits);
    REQUIRE(jobs.Load().ok());
    const JobRecord a = *jobs.Submit(GraphSpec(1 << 20), "", "alice");
    REQUIRE(jobs.Submit(GraphSpec(1 << 20), "", "alice").status().ok());
    StatusOr<JobRecord> refused = jobs.Submit(GraphSpec(1 << 20), "", "alice");
    REQUIRE(refused.status().code() == StatusCode::kResourceExhausted);
    CHECK_THAT(refused.status().message(), Catch::Contains("user alice"));
    CHECK_THAT(refused.status().message(), Catch::Contains("--max-spec-mib-per-user"));
    CHECK_THAT(refused.status().message(), Catch::Contains("3.0 MiB"));
    CHECK(jobs.Submit(GraphSpec(1 << 20), "", "bob").ok());
    // Running still holds its spec; finished does not.
    Run(&jobs, a.id);
    CHECK(jobs.Submit(GraphSpec(1 << 20), "", "alice").status().code() ==
          StatusCode::kResourceExhausted);
    REQUIRE(jobs.Transition(a.id, JobState::kSucceeded, "done").ok());
    CHECK(jobs.Submit(GraphSpec(1 << 20), "", "alice").ok());
  }
}

}  // namespace
}  // namespace deepool::coordinator
