// One suite, run against every JobStore implementation; the SQL ones across a reopen (what a
// restart of the coordinator does), PostgreSQL's on a real server the test starts itself.
#include "coordinator/job_store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <thread>

#include "coordinator/leader_lease.h"
#include "coordinator/postgres_connection.h"
#include "coordinator/stored_job.h"
#include "tests/postgres_server.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator {
namespace {

using deepool::testing::PostgresServer;
using testing::TempDir;

// Skips the calling test (saying why) where no PostgreSQL server can start here.
#define SKIP_WITHOUT_POSTGRES()                         \
  if (auto missing = PostgresServer::MissingReason()) { \
    WARN("skipped: " << *missing);                      \
    return;                                             \
  }

JobRecord MakeJob(const std::string& id, int64_t seq, JobState state) {
  JobRecord job;
  job.id = id;
  job.seq = seq;
  job.spec.name = id;
  job.spec.model = "resnet50";
  job.spec.global_batch = 8;
  job.spec.iterations = 2;
  job.state = state;
  job.history = {{JobState::kPending, "submitted", 100}};
  return job;
}

// `reopen` returns the store to test next: the same object (memory) or a freshly opened one on
// the same file (sqlite), so the checks after it see only what was made durable.
void RunJobStoreSuite(std::function<JobStore*()> reopen) {
  JobStore* store = reopen();
  SECTION("jobs are saved, replaced and loaded in submission order") {
    REQUIRE(store->SaveJob(MakeJob("job-2", 2, JobState::kPending)).ok());
    REQUIRE(store->SaveJob(MakeJob("job-1", 1, JobState::kPending)).ok());
    JobRecord running = MakeJob("job-2", 2, JobState::kRunning);
    running.plan_json = R"({"format":"deepool.plan"})";
    running.progress.iteration = 4;
    running.graph_json = R"({"format":"deepool.graph"})";
    running.history.push_back({JobState::kRunning, "dispatched", 200});
    REQUIRE(store->SaveJob(running).ok());
    running.progress.iteration = 5;  // a progress-only update keeps graph and plan
    REQUIRE(store->SaveJob(running).ok());

    store = reopen();
    StatusOr<std::vector<JobRecord>> jobs = store->LoadJobs();
    REQUIRE(jobs.ok());
    REQUIRE(jobs->size() == 2);
    CHECK((*jobs)[0].id == "job-1");
    CHECK((*jobs)[1].id == "job-2");
    CHECK((*jobs)[1].state == JobState::kRunning);
    CHECK((*jobs)[1].plan_json == running.plan_json);
    CHECK((*jobs)[1].graph_json == running.graph_json);
    CHECK((*jobs)[0].plan_json.empty());
    CHECK((*jobs)[1].progress.iteration == 5);
    CHECK((*jobs)[1].history.size() == 2);
  }
  SECTION("a progress save lands as a whole save does, documents included") {
    JobRecord job = MakeJob("job-5", 5, JobState::kRunning);
    job.graph_json = R"({"format":"deepool.graph"})";
    job.plan_json = R"({"format":"deepool.plan"})";
    REQUIRE(store->SaveProgress(job).ok());  // new documents: written as SaveJob would
    job.progress.iteration = 9;
    REQUIRE(store->SaveProgress(job).ok());

    store = reopen();
    StatusOr<JobRecord> loaded = store->LoadJob("job-5");
    REQUIRE(loaded.ok());
    CHECK(loaded->progress.iteration == 9);
    CHECK(loaded->graph_json == job.graph_json);
    CHECK(loaded->plan_json == job.plan_json);
  }
  SECTION("the progress of several jobs lands in one call, a job's new documents with it") {
    JobRecord with_plan = MakeJob("job-71", 71, JobState::kRunning);
    with_plan.graph_json = R"({"format":"deepool.graph"})";
    with_plan.plan_json = R"({"format":"deepool.plan"})";
    std::vector<JobSnapshot> batch;
    for (int seq = 1; seq <= 70; ++seq) {  // more than a store writes in one transaction
      JobRecord job = MakeJob("job-" + std::to_string(seq), seq, JobState::kRunning);
      job.progress.iteration = seq * 10;
      batch.push_back(Snapshot(std::move(job)));
    }
    batch.push_back(Snapshot(with_plan));
    REQUIRE(store->SaveProgress(batch).ok());
    with_plan.progress.iteration = 3;  // the documents are written: now a record alone
    REQUIRE(store->SaveProgress(std::vector<JobSnapshot>{Snapshot(with_plan)}).ok());
    REQUIRE(store->SaveProgress(std::vector<JobSnapshot>{}).ok());

    store = reopen();
    StatusOr<std::vector<JobRecord>> jobs = store->LoadJobs();
    REQUIRE(jobs.ok());
    REQUIRE(jobs->size() == 71);
    for (int seq = 1; seq <= 70; ++seq) CHECK((*jobs)[seq - 1].progress.iteration == seq * 10);
    StatusOr<JobRecord> loaded = store->LoadJob("job-71");
    REQUIRE(loaded.ok());
    CHECK(loaded->progress.iteration == 3);
    CHECK(loaded->graph_json == with_plan.graph_json);
    CHECK(loaded->plan_json == with_plan.plan_json);
  }
  SECTION("an inline graph and a plan survive updates and the job's end, and load one by one") {
    JobRecord job = MakeJob("job-3", 3, JobState::kRunning);
    job.spec.model.clear();
    job.spec.graph_json = R"({"format":"deepool.graph",  "name":"inline"})";  // kept as text
    job.graph_json = R"({"format":"deepool.graph"})";
    job.plan_json = R"({"format":"deepool.plan"})";
    REQUIRE(store->SaveJob(job).ok());
    job.progress.iteration = 7;  // a progress update: the documents are unchanged
    REQUIRE(store->SaveJob(job).ok());
    store = reopen();
    StatusOr<std::vector<JobRecord>> jobs = store->LoadJobs();
    REQUIRE(jobs.ok());
    REQUIRE(jobs->size() == 1);
    CHECK(jobs->front().spec.graph_json == job.spec.graph_json);
    CHECK(jobs->front().progress.iteration == 7);
    job.state = JobState::kSucceeded;
    job.history.push_back({JobState::kSucceeded, "done", 300});
    REQUIRE(store->SaveJob(job).ok());
    store = reopen();
    StatusOr<JobRecord> done = store->LoadJob("job-3");
    REQUIRE(done.ok());
    CHECK(done->state == JobState::kSucceeded);
    CHECK(done->spec.graph_json == job.spec.graph_json);
    CHECK(done->graph_json == job.graph_json);
    CHECK(done->plan_json == job.plan_json);
    CHECK(store->LoadJob("job-none").status().code() == StatusCode::kNotFound);
  }
  SECTION("log lines are numbered per job and read after a sequence number") {
    std::vector<LogRecord> first = {{0, 1, "node-a", 0, "one"}, {0, 2, "node-a", 1, "two"}};
    REQUIRE(store->AppendLogs("job-1", &first).ok());
    CHECK(first[0].seq == 1);
    CHECK(first[1].seq == 2);
    std::vector<LogRecord> other = {{0, 3, "node-b", 0, "elsewhere"}};
    REQUIRE(store->AppendLogs("job-2", &other).ok());
    CHECK(other[0].seq == 1);

    store = reopen();
    std::vector<LogRecord> more = {{0, 4, "node-a", -1, "three"}};
    REQUIRE(store->AppendLogs("job-1", &more).ok());
    CHECK(more[0].seq == 3);

    StatusOr<std::vector<LogRecord>> all = store->ReadLogs("job-1", 0, 0);
    REQUIRE(all.ok());
    REQUIRE(all->size() == 3);
    CHECK((*all)[0].line == "one");
    CHECK((*all)[1].rank == 1);
    CHECK((*all)[2].rank == -1);
    StatusOr<std::vector<LogRecord>> after = store->ReadLogs("job-1", 1, 1);
    REQUIRE(after.ok());
    REQUIRE(after->size() == 1);
    CHECK((*after)[0].line == "two");
    StatusOr<std::vector<LogRecord>> tail = store->TailLogs("job-1", 2);
    REQUIRE(tail.ok());
    REQUIRE(tail->size() == 2);
    CHECK((*tail)[0].line == "two");
    CHECK((*tail)[1].line == "three");
    CHECK(store->ReadLogs("job-none", 0, 0)->empty());
  }
  SECTION("deleted jobs go whole, documents and log lines with them, and the others stay") {
    for (int seq = 1; seq <= 3; ++seq) {
      JobRecord job = MakeJob("job-" + std::to_string(seq), seq, JobState::kSucceeded);
      job.spec.model.clear();
      job.spec.graph_json = R"({"format":"deepool.graph","name":"inline"})";
      job.graph_json = R"({"format":"deepool.graph"})";
      job.plan_json = R"({"format":"deepool.plan"})";
      REQUIRE(store->SaveJob(job).ok());
      std::vector<LogRecord> lines = {{0, 1, "node-a", 0, "line of " + job.id}};
      REQUIRE(store->AppendLogs(job.id, &lines).ok());
    }
    REQUIRE(store->ReserveSeqs(1000).ok());
    REQUIRE(store->DeleteJobs({"job-1", "job-3", "job-unknown"}).ok());
    REQUIRE(store->DeleteJobs({}).ok());

    store = reopen();
    StatusOr<std::vector<JobRecord>> jobs = store->LoadJobs();
    REQUIRE(jobs.ok());
    REQUIRE(jobs->size() == 1);
    CHECK(jobs->front().id == "job-2");
    CHECK(jobs->front().plan_json == R"({"format":"deepool.plan"})");
    CHECK(store->LoadJob("job-1").status().code() == StatusCode::kNotFound);
    CHECK(store->ReadLogs("job-1", 0, 0)->empty());
    CHECK(store->TailLogs("job-3", 10)->empty());
    CHECK(store->ReadLogs("job-2", 0, 0)->size() == 1);
    CHECK(*store->LoadSeqReservation() == 1000);  // ids of removed jobs are never issued again
    // A job saved again under a removed id starts without the old documents or lines.
    REQUIRE(store->SaveJob(MakeJob("job-1", 1, JobState::kPending)).ok());
    store = reopen();
    StatusOr<JobRecord> again = store->LoadJob("job-1");
    REQUIRE(again.ok());
    CHECK(again->plan_json.empty());
    CHECK(again->spec.graph_json.empty());
    CHECK(store->ReadLogs("job-1", 0, 0)->empty());
  }
  SECTION("profiles are cached per model and device type") {
    REQUIRE(store->SaveProfile("resnet50", "a100", "{\"a\":1}").ok());
    REQUIRE(store->SaveProfile("resnet50", "cpu", "{\"c\":1}").ok());
    store = reopen();
    CHECK(store->LoadProfile("resnet50", "a100")->value() == "{\"a\":1}");
    CHECK(store->LoadProfile("resnet50", "cpu")->value() == "{\"c\":1}");
    CHECK_FALSE(store->LoadProfile("vgg16", "a100")->has_value());
    REQUIRE(store->SaveProfile("resnet50", "a100", "{\"a\":2}").ok());
    CHECK(store->LoadProfile("resnet50", "a100")->value() == "{\"a\":2}");
  }
  SECTION("the job id reservation is durable, and a clean stop may lower it") {
    CHECK(*store->LoadSeqReservation() == 0);
    REQUIRE(store->ReserveSeqs(101).ok());
    store = reopen();
    CHECK(*store->LoadSeqReservation() == 101);
    REQUIRE(store->ReserveSeqs(7).ok());
    store = reopen();
    CHECK(*store->LoadSeqReservation() == 7);
  }
}

TEST_CASE("JobStore suite: in memory", "[job_store]") {
  InMemoryJobStore store;
  RunJobStoreSuite([&] { return &store; });
}

TEST_CASE("JobStore suite: SQLite, reopened between steps", "[job_store]") {
  TempDir dir;
  std::unique_ptr<JobStore> store;
  RunJobStoreSuite([&] {
    store.reset();  // close first, as a restarted process would
    StatusOr<std::unique_ptr<JobStore>> opened = OpenSQLiteJobStore(dir.File("jobs.db"));
    REQUIRE(opened.ok());
    store = std::move(*opened);
    return store.get();
  });
}

TEST_CASE("JobStore suite: PostgreSQL, connected again between steps", "[job_store][postgres]") {
  SKIP_WITHOUT_POSTGRES();
  PostgresServer server;
  server.CreateDatabase("suite");
  std::unique_ptr<JobStore> store;
  RunJobStoreSuite([&] {
    store.reset();
    StatusOr<std::unique_ptr<JobStore>> opened = OpenPostgresJobStore(server.Uri("suite"));
    INFO(opened.status().ToString());
    REQUIRE(opened.ok());
    store = std::move(*opened);
    return store.get();
  });
}

TEST_CASE(
    "PostgreSQL: while the server is down calls fail UNAVAILABLE, and once it is back they go on",
    "[job_store][postgres]") {
  SKIP_WITHOUT_POSTGRES();
  PostgresServer server;
  auto store = OpenPostgresJobStore(server.Uri());
  REQUIRE(store.ok());
  REQUIRE((*store)->SaveJob(MakeJob("job-1", 1, JobState::kPending)).ok());

  server.Stop();  // connected clients are cut off, as a restart of the database's host does
  const Status down = (*store)->SaveJob(MakeJob("job-2", 2, JobState::kPending));
  CHECK(down.code() == StatusCode::kUnavailable);
  CHECK_THAT(down.message(), Catch::Contains("PostgreSQL database postgres"));
  CHECK((*store)->LoadJobs().status().code() == StatusCode::kUnavailable);

  server.Start();
  REQUIRE((*store)->SaveJob(MakeJob("job-2", 2, JobState::kPending)).ok());  // connects again
  std::vector<LogRecord> lines = {{0, 1, "node-a", 0, "after the restart"}};
  // The log's connection sat idle through the restart: found closed at BEGIN, and made again.
  const Status appended = (*store)->AppendLogs("job-2", &lines);
  INFO(appended.ToString());
  REQUIRE(appended.ok());
  StatusOr<std::vector<JobRecord>> jobs = (*store)->LoadJobs();
  REQUIRE(jobs.ok());
  CHECK(jobs->size() == 2);
}

TEST_CASE("PostgreSQL: log lines keep bytes that are not UTF-8", "[job_store][postgres]") {
  SKIP_WITHOUT_POSTGRES();
  PostgresServer server;
  auto store = OpenPostgresJobStore(server.Uri());
  REQUIRE(store.ok());
  const std::string bytes("progress \xff\xfe\x00 50%", 16);
  std::vector<LogRecord> lines = {{0, 1, "node-a", 0, bytes}};
  REQUIRE((*store)->AppendLogs("job-1", &lines).ok());
  StatusOr<std::vector<LogRecord>> read = (*store)->ReadLogs("job-1", 0, 0);
  REQUIRE(read.ok());
  REQUIRE(read->size() == 1);
  CHECK(read->front().line == bytes);
}

TEST_CASE("PostgreSQL: calls held up in the database hold up no other call",
          "[job_store][postgres]") {
  SKIP_WITHOUT_POSTGRES();
  PostgresServer server;
  auto store = OpenPostgresJobStore(server.Uri());
  REQUIRE(store.ok());
  JobStore* jobs = store->get();
  REQUIRE(jobs->SaveJob(MakeJob("job-1", 1, JobState::kRunning)).ok());

  // Another session locks the log and profile tables, so a log append and a profile write wait
  // in the database, as they would behind a slow disk or a long query.
  StatusOr<std::unique_ptr<postgres::Connection>> holder = postgres::Connection::Open(server.Uri());
  REQUIRE(holder.ok());
  REQUIRE((*holder)->Exec("BEGIN", "begin").ok());
  REQUIRE((*holder)->Exec("LOCK TABLE logs, profiles IN ACCESS EXCLUSIVE MODE", "lock").ok());
  auto release = [&] { REQUIRE((*holder)->Exec("COMMIT", "commit").ok()); };
  std::vector<LogRecord> lines = {{0, 1, "node-a", 0, "held up"}};
  auto append = std::async(std::launch::async, [&] { return jobs->AppendLogs("job-1", &lines); });
  auto profile =
      std::async(std::launch::async, [&] { return jobs->SaveProfile("m", "cpu", "{}"); });
  const auto waiting = [&] {
    StatusOr<postgres::Result> rows = (*holder)->Query(
        "SELECT count(*) FROM pg_locks WHERE NOT granted", postgres::Params(), "read locks");
    return rows.ok() ? postgres::IntValue(rows->get(), 0, 0) : -1;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (waiting() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polls a condition
  }
  const int64_t waiters = waiting();
  if (waiters != 2) release();  // so that the calls end
  REQUIRE(waiters == 2);

  // Submissions, progress and reads go on meanwhile.
  auto others = std::async(std::launch::async, [&]() -> Status {
    RETURN_IF_ERROR(jobs->SaveJob(MakeJob("job-2", 2, JobState::kPending)));
    RETURN_IF_ERROR(jobs->SaveProgress({Snapshot(MakeJob("job-1", 1, JobState::kRunning))}));
    RETURN_IF_ERROR(jobs->LoadJob("job-2").status());
    return jobs->LoadJobs().status();
  });
  const bool went_on = others.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  release();  // whatever happened, so that the calls end
  REQUIRE(went_on);
  CHECK(others.get().ok());
  CHECK(append.get().ok());
  CHECK(profile.get().ok());
  CHECK(lines.front().seq == 1);
}

TEST_CASE("PostgreSQL: an unreachable server is named in the error, its password never",
          "[job_store][postgres]") {
  auto store = OpenPostgresJobStore(
      "postgresql://deepool:hunter2@/jobs?host=/nonexistent-dir-for-deepool&connect_timeout=2");
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(store.status().message(), Catch::Contains("database jobs"));
  CHECK_THAT(store.status().message(), !Catch::Contains("hunter2"));
}

TEST_CASE("PostgreSQL: a schema written by a newer coordinator is refused",
          "[job_store][postgres]") {
  SKIP_WITHOUT_POSTGRES();
  PostgresServer server;
  REQUIRE(OpenPostgresJobStore(server.Uri()).ok());
  CHECK(server.Sql("postgres", "SELECT value FROM meta WHERE key = 'schema_version'") == "2\n");
  server.Sql("postgres", "UPDATE meta SET value = 99 WHERE key = 'schema_version'");
  auto store = OpenPostgresJobStore(server.Uri());
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(store.status().message(), Catch::Contains("schema version 99"));
}

TEST_CASE("PostgreSQL: a leader deposed while paused writes nothing after the takeover",
          "[job_store][postgres]") {
  SKIP_WITHOUT_POSTGRES();
  PostgresServer server;
  auto a = OpenPostgresJobStore(server.Uri());
  auto b = OpenPostgresJobStore(server.Uri());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::chrono::milliseconds minute(60'000);
  StatusOr<LeaseHolder> first = (*a)->lease()->TryAcquire("a", minute);
  REQUIRE(first.ok());
  CHECK(first->holder == "a");
  StatusOr<LeaseHolder> waiting = (*b)->lease()->TryAcquire("b", minute);
  REQUIRE(waiting.ok());
  CHECK(waiting->holder == "a");  // a standby while a's lease runs
  CHECK(waiting->left.count() > 50'000);
  REQUIRE((*a)->SaveJob(MakeJob("job-1", 1, JobState::kPending)).ok());

  // a is paused past its lease (a SIGSTOP, a long GC, a partition): b takes over.
  server.Sql("postgres", "UPDATE leader SET expires_at = now() - interval '1 second'");
  StatusOr<LeaseHolder> taken = (*b)->lease()->TryAcquire("b", minute);
  REQUIRE(taken.ok());
  CHECK(taken->holder == "b");
  CHECK(taken->token == first->token + 1);

  // a wakes: every write is refused, saying who leads; so is its renewal.
  const Status late = (*a)->SaveJob(MakeJob("job-2", 2, JobState::kPending));
  CHECK(late.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(late.message(), Catch::Contains("no longer leads: b"));
  CHECK((*a)->SaveProgress(MakeJob("job-1", 1, JobState::kRunning)).code() ==
        StatusCode::kFailedPrecondition);
  CHECK((*a)->SaveProgress({Snapshot(MakeJob("job-1", 1, JobState::kRunning))}).code() ==
        StatusCode::kFailedPrecondition);
  std::vector<LogRecord> lines = {{0, 1, "node-a", 0, "late"}};
  CHECK((*a)->AppendLogs("job-1", &lines).code() == StatusCode::kFailedPrecondition);
  CHECK((*a)->ReserveSeqs(500).code() == StatusCode::kFailedPrecondition);
  CHECK((*a)->SaveProfile("m", "cpu", "{}").code() == StatusCode::kFailedPrecondition);
  CHECK((*a)->lease()->Renew(minute).code() == StatusCode::kFailedPrecondition);
  CHECK((*a)->lease()->Release().ok());  // a no-op: the lease is b's

  REQUIRE((*b)->SaveJob(MakeJob("job-3", 3, JobState::kPending)).ok());
  StatusOr<std::vector<JobRecord>> jobs = (*b)->LoadJobs();
  REQUIRE(jobs.ok());
  REQUIRE(jobs->size() == 2);
  CHECK((*jobs)[0].id == "job-1");
  CHECK((*jobs)[0].state == JobState::kPending);  // as a left it: its progress saves were refused
  CHECK((*jobs)[1].id == "job-3");
  CHECK((*b)->ReadLogs("job-1", 0, 0)->empty());
  CHECK(*(*b)->LoadSeqReservation() == 0);

  // A clean stop hands the lease over at once.
  REQUIRE((*b)->lease()->Release().ok());
  StatusOr<LeaseHolder> next = (*a)->lease()->TryAcquire("c", minute);
  REQUIRE(next.ok());
  CHECK(next->holder == "c");
}

TEST_CASE("schema steps: the missing ones in order, and a newer database refused", "[job_store]") {
  const std::vector<SchemaStep> steps = {{1, "one", "A"}, {2, "two", "B"}, {3, "three", "C"}};
  auto from_one = SchemaStepsToApply("store", 1, steps);
  REQUIRE(from_one.ok());
  REQUIRE(from_one->size() == 2);
  CHECK(std::string(from_one->front().sql) == "B");
  CHECK(SchemaStepsToApply("store", 3, steps)->empty());
  CHECK(SchemaStepsToApply("store", 0, steps)->size() == 3);
  CHECK(SchemaStepsToApply("store", 4, steps).status().code() == StatusCode::kFailedPrecondition);
  const std::vector<SchemaStep> gap = {{1, "one", "A"}, {3, "three", "C"}};
  CHECK(SchemaStepsToApply("store", 0, gap).status().code() == StatusCode::kInternal);
}

StatusOr<std::unique_ptr<JobStore>> OpenAt(const TempDir& dir, const std::string& name) {
  return OpenSQLiteJobStore(dir.File(name));
}

TEST_CASE("SQLite: a store another coordinator has open is refused, naming it", "[job_store]") {
  TempDir dir;
  auto first = OpenAt(dir, "jobs.db");
  REQUIRE(first.ok());
  REQUIRE((*first)->SaveJob(MakeJob("job-1", 1, JobState::kPending)).ok());
  const std::string marker_before = [&] {
    std::ifstream in(dir.File("jobs.db.lastcommit"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  auto second = OpenAt(dir, "jobs.db");
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(second.status().message(),
             Catch::Contains("in use by another coordinator (pid " + std::to_string(::getpid())));
  // The refused open touched nothing: the first store's marker is the one it writes.
  REQUIRE((*first)->SaveJob(MakeJob("job-2", 2, JobState::kPending)).ok());
  std::ifstream in(dir.File("jobs.db.lastcommit"));
  const std::string marker_after(std::istreambuf_iterator<char>(in), {});
  CHECK(marker_after != marker_before);
  CHECK_THAT(marker_after, Catch::Contains("job_id=job-2"));
  // Once the first closes, the store opens, with both jobs.
  first->reset();
  auto reopened = OpenAt(dir, "jobs.db");
  REQUIRE(reopened.ok());
  CHECK((*reopened)->LoadJobs()->size() == 2);
}

TEST_CASE("SQLite: the id reservation outlives a lost write-ahead log", "[job_store]") {
  TempDir dir;
  auto store = OpenAt(dir, "jobs.db");
  REQUIRE(store.ok());
  REQUIRE((*store)->ReserveSeqs(101).ok());
  REQUIRE((*store)->SaveJob(MakeJob("job-1", 1, JobState::kPending)).ok());
  // A copy of the main file alone, taken while the store is open, is what a crash that also lost
  // the -wal file leaves behind: the job saved after the reservation may be gone, the
  // reservation may not.
  // Such a copy is refused by default (store_crash_test); this one is opened regardless.
  std::filesystem::copy_file(dir.File("jobs.db"), dir.File("lost-wal.db"));
  SQLiteStoreOptions accept;
  accept.accept_data_loss = true;
  auto survived = OpenSQLiteJobStore(dir.File("lost-wal.db"), accept);
  REQUIRE(survived.ok());
  CHECK(*(*survived)->LoadSeqReservation() == 101);
}

TEST_CASE("SQLite: a record written with its inline graph inside it still loads with it",
          "[job_store]") {
  TempDir dir;
  JobRecord job = MakeJob("job-5", 5, JobState::kPending);
  job.spec.model.clear();
  job.spec.graph_json = R"({"format":"deepool.graph","name":"old"})";
  {
    auto store = OpenAt(dir, "jobs.db");
    REQUIRE(store.ok());
    REQUIRE((*store)->SaveJob(job).ok());
  }
  // What a coordinator from before spec_graphs left: the graph inside the record only.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(dir.File("jobs.db").c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "UPDATE jobs SET record = ? WHERE id = 'job-5'", -1, &st,
                             nullptr) == SQLITE_OK);
  const std::string record = JobRecordToJson(job, false).dump();
  sqlite3_bind_text(st, 1, record.c_str(), -1, SQLITE_TRANSIENT);
  REQUIRE(sqlite3_step(st) == SQLITE_DONE);
  sqlite3_finalize(st);
  REQUIRE(sqlite3_exec(db, "DELETE FROM spec_graphs", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);

  for (int life = 0; life < 2; ++life) {  // as loaded, then after a save by this version
    auto store = OpenAt(dir, "jobs.db");
    REQUIRE(store.ok());
    StatusOr<std::vector<JobRecord>> jobs = (*store)->LoadJobs();
    REQUIRE(jobs.ok());
    REQUIRE(jobs->size() == 1);
    CHECK(nlohmann::json::parse(jobs->front().spec.graph_json.str())["name"] == "old");
    jobs->front().progress.iteration = 1;
    REQUIRE((*store)->SaveJob(jobs->front()).ok());
  }
}

// Runs `sql` on the SQLite file at `path`, outside the store.
void SqliteExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  INFO(sql);
  CHECK(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

TEST_CASE(
    "SQLite: a store from before schema versions opens, and one from a newer coordinator "
    "is refused",
    "[job_store]") {
  TempDir dir;
  {
    auto store = OpenAt(dir, "jobs.db");
    REQUIRE(store.ok());
    REQUIRE((*store)->SaveJob(MakeJob("job-1", 1, JobState::kPending)).ok());
  }
  SqliteExec(dir.File("jobs.db"), "DELETE FROM meta WHERE key = 'schema_version'");
  {
    auto store = OpenAt(dir, "jobs.db");
    REQUIRE(store.ok());
    CHECK((*store)->LoadJobs()->size() == 1);
  }
  SqliteExec(dir.File("jobs.db"), "UPDATE meta SET value = 99 WHERE key = 'schema_version'");
  auto store = OpenAt(dir, "jobs.db");
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(store.status().message(), Catch::Contains("schema version 99"));
}

TEST_CASE("SQLite: a 0-byte store is refused, not started empty", "[job_store]") {
  TempDir dir;
  std::ofstream(dir.File("jobs.db")).close();
  auto store = OpenAt(dir, "jobs.db");
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(store.status().message(), Catch::Contains("0 bytes"));
}

TEST_CASE("SQLite: a damaged job record is named, not loaded", "[job_store]") {
  TempDir dir;
  {
    auto store = OpenAt(dir, "jobs.db");
    REQUIRE(store.ok());
    REQUIRE((*store)->SaveJob(MakeJob("job-7", 7, JobState::kPending)).ok());
  }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(dir.File("jobs.db").c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "UPDATE jobs SET record = '{\"id\": 3' WHERE id = 'job-7'", nullptr,
                       nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  auto store = OpenAt(dir, "jobs.db");
  REQUIRE(store.ok());
  StatusOr<std::vector<JobRecord>> jobs = (*store)->LoadJobs();
  REQUIRE_FALSE(jobs.ok());
  CHECK(jobs.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(jobs.status().message(), Catch::Contains("job-7"));
}

TEST_CASE("SQLite: a store with damaged pages gives an error, not a crash", "[job_store]") {
  TempDir dir;
  {
    auto store = OpenAt(dir, "jobs.db");
    REQUIRE(store.ok());
    for (int i = 1; i <= 50; ++i) {
      REQUIRE((*store)->SaveJob(MakeJob("job-" + std::to_string(i), i, JobState::kPending)).ok());
    }
  }
  const auto size = std::filesystem::file_size(dir.File("jobs.db"));
  REQUIRE(size > 8192);
  {
    std::fstream file(dir.File("jobs.db"), std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(4096);  // every page after the first (the schema) is overwritten
    const std::string junk(size - 4096, '\x5a');
    file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto store = OpenAt(dir, "jobs.db");
  if (store.ok()) {
    StatusOr<std::vector<JobRecord>> jobs = (*store)->LoadJobs();
    CHECK_FALSE(jobs.ok());
  }
}

TEST_CASE("SQLite store refuses a path it cannot open", "[job_store]") {
  StatusOr<std::unique_ptr<JobStore>> opened =
      OpenSQLiteJobStore("/nonexistent-dir-for-deepool/jobs.db");
  CHECK_FALSE(opened.ok());
}

}  // namespace
}  // namespace deepool::coordinator
