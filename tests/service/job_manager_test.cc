#include "coordinator/job_manager.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "common/clock.h"
#include "coordinator/admission.h"
#include "tests/service/failing_job_store.h"
#include "tests/service/job_manager_test_util.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator {
namespace {

using testing::GraphSpec;
using testing::Run;
using testing::TinySpec;

// A manager over a fake store (which counts progress saves and can hold a write) with one
// RUNNING job.
struct OneRunningJob {
  explicit OneRunningJob(std::chrono::milliseconds interval = JobManager::kProgressStoreInterval)
      : jobs(&store, &clock, {}, interval) {
    REQUIRE(jobs.Load().ok());
    id = jobs.Submit(TinySpec())->id;
    Run(&jobs, id);
  }
  FakeClock clock{1'000'000};
  testing::FailingJobStore store;
  JobManager jobs;
  std::string id;
};

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
  CHECK(jobs.Active().front()->id == a.id);
}

TEST_CASE("a job's queue position is the one the admission order gives it", "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 24; ++i) {
    JobSpec spec = TinySpec();
    spec.priority = (i * 7) % 3;  // priorities out of submission order
    spec.role = i % 4 == 0 ? JobRole::kBg : JobRole::kFg;
    ids.push_back(jobs.Submit(spec)->id);
  }
  auto check_positions = [&](size_t queued) {
    const std::map<std::string, int> positions = QueuePositions(jobs.Queue());
    REQUIRE(positions.size() == queued);
    for (const std::string& id : ids) {
      auto expected = positions.find(id);
      const std::optional<int> position = jobs.QueuePosition(id);
      if (expected == positions.end()) {
        CHECK_FALSE(position.has_value());
      } else {
        CHECK(position == expected->second);
      }
    }
  };
  check_positions(24);
  // Some leave the queue: they are counted by nobody.
  REQUIRE(jobs.Transition(ids[3], JobState::kPlanning, "planning").ok());
  REQUIRE(jobs.Transition(ids[8], JobState::kCancelled, "").ok());
  REQUIRE(jobs.Transition(ids[13], JobState::kPlanning, "planning").ok());
  check_positions(21);
  // One comes back (requeued), and keeps its place by submission order.
  REQUIRE(jobs.Transition(ids[13], JobState::kPending, "requeued").ok());
  check_positions(22);
  CHECK_FALSE(jobs.QueuePosition("no-such-job").has_value());
}

TEST_CASE("a user's pages hold their own jobs, newest first, after a reload too", "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  {
    JobManager jobs(&store, &clock);
    REQUIRE(jobs.Load().ok());
    for (int i = 0; i < 30; ++i) {
      StatusOr<JobRecord> job = jobs.Submit(TinySpec(), "", i % 3 == 1 ? "bob" : "alice");
      REQUIRE(job.ok());
      if (i % 2 == 0) REQUIRE(jobs.Transition(job->id, JobState::kCancelled, "").ok());
    }
  }
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  for (const std::vector<JobState>& states :
       {std::vector<JobState>{}, {JobState::kPending}, {JobState::kCancelled}}) {
    std::vector<std::string> bobs;  // from the whole list, newest first
    for (const JobRecord& job : jobs.List(states, 0)) {
      if (job.owner == "bob") bobs.push_back(job.id);
    }
    REQUIRE_FALSE(bobs.empty());
    std::vector<std::string> paged;
    JobQuery query{states, 3, std::string("bob"), 0};
    while (true) {
      JobPage page = jobs.ListPage(query);
      for (const JobRecord& job : page.jobs) paged.push_back(job.id);
      if (page.next_before_seq == 0) break;
      query.before_seq = page.next_before_seq;
    }
    CHECK(paged == bobs);
  }
  CHECK(jobs.List({}, 0, std::string("carol")).empty());
}

TEST_CASE("pages of a long history join up to the whole list, and counts follow every change",
          "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  std::vector<std::string> ids;  // oldest first
  {
    JobManager jobs(&store, &clock);
    REQUIRE(jobs.Load().ok());
    for (int i = 0; i < 25; ++i) {
      StatusOr<JobRecord> job = jobs.Submit(TinySpec());
      REQUIRE(job.ok());
      ids.push_back(job->id);
      // Every third job ends; the others stay PENDING among them.
      if (i % 3 == 0) REQUIRE(jobs.Transition(job->id, JobState::kCancelled, "").ok());
    }
  }
  // A reloaded manager indexes what it reads as one that saw the jobs arrive.
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  for (const std::vector<JobState>& states :
       {std::vector<JobState>{}, {JobState::kPending}, {JobState::kCancelled}}) {
    std::vector<JobRecord> whole = jobs.List(states, 0);
    std::vector<std::string> paged;
    JobQuery query{states, 4, std::nullopt, 0};
    int pages = 0;
    while (true) {
      JobPage page = jobs.ListPage(query);
      CHECK(page.jobs.size() <= 4);
      for (const JobRecord& job : page.jobs) paged.push_back(job.id);
      ++pages;
      if (page.next_before_seq == 0) break;
      query.before_seq = page.next_before_seq;
    }
    REQUIRE(paged.size() == whole.size());
    for (size_t i = 0; i < whole.size(); ++i) CHECK(paged[i] == whole[i].id);
    CHECK(pages == static_cast<int>((whole.size() + 3) / 4));  // no empty last page
  }
  CHECK(jobs.List({}, 0).size() == 25);
  CHECK(jobs.List({}, 0).front().id == ids.back());
  CHECK(jobs.List({JobState::kCancelled}, 0).size() == 9);
  CHECK(jobs.Active().size() == 16);
  CHECK(jobs.Queue().size() == 16);
  CHECK(jobs.Counts() == JobCounts{{{JobState::kPending, JobRole::kFg}, 16},
                                   {{JobState::kCancelled, JobRole::kFg}, 9}});
  REQUIRE(jobs.Transition(ids[1], JobState::kPlanning, "").ok());
  REQUIRE(jobs.Transition(ids[1], JobState::kFailed, "").ok());
  CHECK(jobs.Active().size() == 15);
  CHECK(jobs.Active().front()->id == ids[2]);  // submission order
  CHECK(jobs.List({JobState::kPending}, 0).size() == 15);
  CHECK(jobs.Counts() == JobCounts{{{JobState::kPending, JobRole::kFg}, 15},
                                   {{JobState::kCancelled, JobRole::kFg}, 9},
                                   {{JobState::kFailed, JobRole::kFg}, 1}});
}

TEST_CASE("progress is stored at most once an interval per job, and with every other change",
          "[job_manager]") {
  FakeClock clock(1'000'000);
  InMemoryJobStore store;
  JobManager jobs(&store, &clock, {}, std::chrono::seconds(5));
  REQUIRE(jobs.Load().ok());
  const std::string id = jobs.Submit(TinySpec())->id;
  Run(&jobs, id);
  auto stored_iteration = [&] { return store.LoadJob(id)->progress.iteration; };
  auto report = [&](int64_t iteration) {
    const uint64_t before = jobs.JobVersion(id);
    StatusOr<JobRecord> updated =
        jobs.UpdateProgress(id, [&](JobRecord& r) { r.progress.iteration = iteration; });
    REQUIRE(updated.ok());
    CHECK(updated->progress.iteration == iteration);
    CHECK(jobs.Get(id)->progress.iteration == iteration);  // readers see it at once
    CHECK(jobs.JobVersion(id) > before);                   // and watchers wake
  };
  report(1);  // the job's first progress after RUNNING was stored: within the interval
  CHECK(stored_iteration() == 0);
  clock.Advance(std::chrono::seconds(2));
  report(2);
  REQUIRE(jobs.FlushProgress().ok());
  CHECK(stored_iteration() == 0);  // 2 s since the job was last written
  clock.Advance(std::chrono::seconds(3));
  REQUIRE(jobs.FlushProgress().ok());
  CHECK(stored_iteration() == 2);
  report(3);  // just written: held back again
  CHECK(stored_iteration() == 2);
  clock.Advance(std::chrono::seconds(5));
  report(4);  // due: a report writes nothing, the next flush does
  CHECK(stored_iteration() == 2);
  REQUIRE(jobs.FlushProgress().ok());
  CHECK(stored_iteration() == 4);
  // Another change of the job writes what was held back with it.
  report(5);
  REQUIRE(jobs.Update(id, [](JobRecord& r) { r.store_address = "h:1"; }).ok());
  CHECK(stored_iteration() == 5);
  // So does a clean stop.
  report(6);
  jobs.Shutdown();
  CHECK(stored_iteration() == 6);
  CHECK(jobs.UpdateProgress("job-none", [](JobRecord&) {}).status().code() ==
        StatusCode::kNotFound);
}

TEST_CASE("held-back progress is written as progress, without the lock, and never overtakes",
          "[job_manager]") {
  OneRunningJob one(std::chrono::seconds(5));
  FakeClock& clock = one.clock;
  testing::FailingJobStore& store = one.store;
  JobManager& jobs = one.jobs;
  const std::string& id = one.id;
  auto report = [&](int64_t iteration) {
    REQUIRE(jobs.UpdateProgress(id, [&](JobRecord& r) { r.progress.iteration = iteration; }).ok());
  };
  CHECK(store.progress_saves == 0);  // states are written as whole records
  clock.Advance(std::chrono::seconds(5));
  report(1);  // due, but a report writes nothing: the flush does
  CHECK(store.progress_saves == 0);
  // The flush's write holds no lock: readers and reports go on meanwhile, and a state change
  // of the job waits for it, so the store ends with the newer record.
  std::promise<void> writing;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  store.SetOnSave([&, released](const JobRecord& job) {
    if (job.progress.iteration == 1 && job.state == JobState::kRunning) {
      writing.set_value();
      released.wait();
    }
  });
  std::thread flusher([&] { CHECK(jobs.FlushProgress().ok()); });
  writing.get_future().wait();
  CHECK(jobs.Get(id)->progress.iteration == 1);  // the lock is free
  report(2);
  auto changed = std::async(std::launch::async, [&] {
    return jobs.Update(id, [](JobRecord& r) { r.store_address = "h:1"; }).ok();
  });
  CHECK(changed.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
  release.set_value();
  flusher.join();
  CHECK(changed.get());
  store.SetOnSave(nullptr);
  CHECK(store.progress_saves == 1);
  const StatusOr<JobRecord> stored = store.LoadJob(id);
  REQUIRE(stored.ok());
  CHECK(stored->store_address == "h:1");
  CHECK(stored->progress.iteration == 2);
}

TEST_CASE("with no interval every progress change is stored before it is answered",
          "[job_manager]") {
  OneRunningJob one(std::chrono::milliseconds(0));
  testing::FailingJobStore& store = one.store;
  JobManager& jobs = one.jobs;
  const std::string& id = one.id;
  for (int64_t iteration = 1; iteration <= 3; ++iteration) {
    REQUIRE(jobs.UpdateProgress(id, [&](JobRecord& r) { r.progress.iteration = iteration; }).ok());
    CHECK(store.LoadJob(id)->progress.iteration == iteration);
  }
  CHECK(store.progress_saves == 3);
}

TEST_CASE("a progress change made while the job changed is made again on the newer record",
          "[job_manager]") {
  OneRunningJob one;
  JobManager& jobs = one.jobs;
  const std::string& id = one.id;
  int runs = 0;
  StatusOr<JobRecord> updated = jobs.UpdateProgress(id, [&](JobRecord& r) {
    // UpdateProgress builds the change without the lock: a checkpoint stored meanwhile must not
    // be overwritten by the older record the change started from.
    if (runs++ == 0) {
      REQUIRE(jobs.Update(id, [](JobRecord& c) { c.checkpoint = "ckpt-1"; }).ok());
    }
    r.progress.iteration = 7;
  });
  REQUIRE(updated.ok());
  CHECK(runs == 2);
  CHECK(updated->checkpoint == "ckpt-1");
  CHECK(jobs.Get(id)->checkpoint == "ckpt-1");
  CHECK(jobs.Get(id)->progress.iteration == 7);
  // A job that ended meanwhile is not changed.
  StatusOr<JobRecord> ended = jobs.UpdateProgress(id, [&](JobRecord& r) {
    if (r.progress.iteration == 7) REQUIRE(jobs.Transition(id, JobState::kCancelled, "").ok());
    r.progress.iteration = 8;
  });
  CHECK(ended.status().code() == StatusCode::kFailedPrecondition);
  CHECK(jobs.Get(id)->progress.iteration == 7);
}

TEST_CASE("advice is in memory at once and stored only with the job's next written change",
          "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  const std::string id = jobs.Submit(TinySpec())->id;
  REQUIRE(jobs.UpdateAdvice(id, [](JobRecord& r) { r.reason = "queued behind job-000009"; }).ok());
  CHECK(jobs.Get(id)->reason == "queued behind job-000009");
  clock.Advance(std::chrono::minutes(1));
  REQUIRE(jobs.FlushProgress(/*all=*/true).ok());
  CHECK(store.LoadJob(id)->reason != "queued behind job-000009");  // never on its own
  REQUIRE(jobs.Update(id, [](JobRecord& r) { r.store_address = "h:1"; }).ok());
  CHECK(store.LoadJob(id)->reason == "queued behind job-000009");
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

TEST_CASE("copies of a job's record share its documents instead of copying them", "[job_manager]") {
  FakeClock clock;
  InMemoryJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  const JobRecord big = *jobs.Submit(GraphSpec(1 << 20));
  Run(&jobs, big.id);
  const JobRecord got = *jobs.Get(big.id);
  CHECK(got.spec.graph_json.SharesBufferWith(big.spec.graph_json));
  CHECK(jobs.List({}, 0).front().spec.graph_json.SharesBufferWith(big.spec.graph_json));
  CHECK(jobs.Active().front()->graph_json.SharesBufferWith(got.graph_json));
  CHECK(jobs.Active().front()->plan_json.SharesBufferWith(got.plan_json));
}

TEST_CASE("a finished job's documents leave memory and are read back from the store",
          "[job_manager]") {
  testing::TempDir dir;
  FakeClock clock;
  std::string id;
  const JobSpec spec = GraphSpec(4096);
  {
    SqliteRun run(dir, &clock);
    id = run.jobs.Submit(spec, "key-big")->id;
    Run(&run.jobs, id);
    StatusOr<JobRecord> done = run.jobs.Transition(id, JobState::kSucceeded, "done");
    REQUIRE(done.ok());
    for (const JobRecord& job : {*done, *run.jobs.Get(id), run.jobs.List({}, 0).front()}) {
      CHECK(job.spec.graph_json.empty());
      CHECK(job.graph_json.empty());
      CHECK(job.plan_json.empty());
    }
    StatusOr<JobRecord> whole = run.jobs.GetWithDocuments(id);
    REQUIRE(whole.ok());
    CHECK(whole->spec.graph_json.size() == 4096);
    CHECK(whole->plan_json == R"({"format":"deepool.plan"})");
    // Its record is final: an update (a late report) cannot write it back without them.
    CHECK(run.jobs.Update(id, [](JobRecord& r) { r.progress.iteration = 9; }).status().code() ==
          StatusCode::kFailedPrecondition);
    run.jobs.Shutdown();
  }
  SqliteRun run(dir, &clock);  // loaded after a restart: the same
  CHECK(run.jobs.Get(id)->spec.graph_json.empty());
  StatusOr<JobRecord> whole = run.jobs.GetWithDocuments(id);
  REQUIRE(whole.ok());
  CHECK(whole->spec.graph_json.size() == 4096);
  CHECK(whole->graph_json == R"({"format":"deepool.graph"})");
  // A retry of the submission still finds it, and another spec under its key is still refused.
  CHECK(run.jobs.Submit(spec, "key-big")->id == id);
  CHECK(run.jobs.Submit(GraphSpec(4097), "key-big").status().code() == StatusCode::kAlreadyExists);
}

TEST_CASE("a submission being written holds up no reader or writer of other jobs",
          "[job_manager]") {
  FakeClock clock;
  testing::FailingJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  const JobRecord other = *jobs.Submit(TinySpec());
  std::promise<void> in_write;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  store.SetOnSave([&](const JobRecord& job) {
    if (job.spec.name != "slow") return;
    in_write.set_value();
    released.wait();  // a large spec on a slow disk
  });
  auto submitting =
      std::async(std::launch::async, [&] { return jobs.Submit(GraphSpec(1, "slow")); });
  in_write.get_future().wait();
  // What heartbeats and progress reports do (JobWantsTasks, RecordIterations), with a guard
  // against a hang: before the write moved out of the lock these waited for the release.
  auto readers = std::async(std::launch::async, [&] {
    const bool got = jobs.Get(other.id).ok();
    const bool updated = jobs.Update(other.id, [](JobRecord& r) { r.reason = "x"; }).ok();
    return got && updated && jobs.Queue().size() == 1 && jobs.List({}, 0).size() == 1;
  });
  const bool answered = readers.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  release.set_value();
  CHECK(answered);
  CHECK(readers.get());
  StatusOr<JobRecord> slow = submitting.get();
  REQUIRE(slow.ok());
  CHECK(jobs.Get(slow->id).ok());
  CHECK(jobs.Queue().size() == 2);
}

TEST_CASE("job ids are reserved ahead, and a reservation holds up no reader or submission",
          "[job_manager]") {
  FakeClock clock;
  testing::FailingJobStore store;
  JobManager jobs(&store, &clock);
  REQUIRE(jobs.Load().ok());
  const int64_t block = JobManager::kSeqReservationBlock;
  const JobRecord first = *jobs.Submit(TinySpec());
  CHECK(store.reservations == 1);
  CHECK(*store.LoadSeqReservation() == 1 + block);
  REQUIRE(jobs.ReserveIdsAhead().ok());
  CHECK(store.reservations == 1);  // most of the block is left
  for (int64_t i = 0; i < block / 2; ++i) REQUIRE(jobs.Submit(TinySpec()).ok());
  REQUIRE(jobs.ReserveIdsAhead().ok());
  CHECK(store.reservations == 2);  // under half left: the next block, before it is needed
  CHECK(*store.LoadSeqReservation() == 1 + 2 * block);
  for (int64_t i = 0; i < block; ++i) REQUIRE(jobs.Submit(TinySpec()).ok());
  CHECK(store.reservations == 2);  // no submission reserved: under half a block is left again

  std::promise<void> in_reserve;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  store.SetOnReserve([&](int64_t) {
    in_reserve.set_value();
    released.wait();  // a checkpoint on a slow disk
  });
  auto reserving = std::async(std::launch::async, [&] { return jobs.ReserveIdsAhead(); });
  in_reserve.get_future().wait();
  // Before the store call moved out of the lock, each of these waited for the release.
  auto others = std::async(std::launch::async, [&] {
    const bool got = jobs.Get(first.id).ok();
    const bool submitted = jobs.Submit(TinySpec()).ok();
    return got && submitted;
  });
  const bool answered = others.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  release.set_value();
  CHECK(answered);
  CHECK(others.get());
  CHECK(reserving.get().ok());
  CHECK(store.reservations == 3);
  CHECK(*store.LoadSeqReservation() == 1 + 3 * block);
}

TEST_CASE("a stop waits for the id reservation and for a progress write begun while it waited",
          "[job_manager]") {
  OneRunningJob one(std::chrono::seconds(5));
  JobManager& jobs = one.jobs;
  testing::FailingJobStore& store = one.store;
  for (int64_t i = 0; i < JobManager::kSeqReservationBlock / 2; ++i) {
    REQUIRE(jobs.Submit(TinySpec()).ok());  // under half a block of ids left
  }
  std::promise<void> in_reserve;
  std::promise<void> release_reserve;
  std::shared_future<void> reserve_released = release_reserve.get_future().share();
  store.SetOnReserve([&](int64_t) {
    in_reserve.set_value();
    reserve_released.wait();
  });
  auto reserving = std::async(std::launch::async, [&] { return jobs.ReserveIdsAhead(); });
  in_reserve.get_future().wait();
  store.SetOnReserve(nullptr);
  auto stopping = std::async(std::launch::async, [&] { jobs.Shutdown(); });
  CHECK(stopping.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);

  // While the stop waits for the reservation, a flush starts writing the job's progress.
  one.clock.Advance(std::chrono::seconds(5));
  REQUIRE(jobs.UpdateProgress(one.id, [](JobRecord& r) { r.progress.iteration = 7; }).ok());
  std::promise<void> writing;
  std::promise<void> release_write;
  std::shared_future<void> write_released = release_write.get_future().share();
  std::atomic<bool> first{true};
  store.SetOnSave([&](const JobRecord& job) {
    if (job.progress.iteration == 7 && first.exchange(false)) {
      writing.set_value();
      write_released.wait();
    }
  });
  std::thread flusher([&] { CHECK(jobs.FlushProgress().ok()); });
  writing.get_future().wait();
  release_reserve.set_value();
  CHECK(reserving.get().ok());
  // Before the stop checked both after each wait, it went on here and stored the job while the
  // flush's write was still in flight.
  CHECK(stopping.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  release_write.set_value();
  flusher.join();
  stopping.get();
  store.SetOnSave(nullptr);
  CHECK(store.LoadJob(one.id)->progress.iteration == 7);
}

}  // namespace
}  // namespace deepool::coordinator
