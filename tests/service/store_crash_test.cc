// Durability: a coordinator killed between any two store writes of a job's life comes back with
// a consistent job, and finishes it. The kill is a store that stops writing after its k-th write
// (what reaches SQLite before a kill -9 is every committed write, nothing after), for every k
// over the writes of a whole life; the restart is a new scheduler over the reopened database.
// The second half: a kill -9 whose write-ahead log is then lost or damaged is refused at the
// restart, naming what is gone, unless the coordinator is told to accept the loss.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

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
  StatusOr<JobRecord> LoadJob(const std::string& job_id) override {
    return store_->LoadJob(job_id);
  }
  Status DeleteJobs(const std::vector<std::string>& job_ids) override {
    RETURN_IF_ERROR(Write());
    return store_->DeleteJobs(job_ids);
  }
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
  CHECK(job.task_ids.empty() ==
        (job.state == JobState::kPending || job.state == JobState::kPlanning));
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
      if (before.state == JobState::kRunning)
        running.push_back(Running(before.task_ids[0], before.id));
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

JobRecord StoredJob(int64_t seq) {
  JobRecord job;
  char id[32];
  std::snprintf(id, sizeof(id), "job-%06lld", static_cast<long long>(seq));
  job.id = id;
  job.seq = seq;
  job.spec.name = id;
  job.spec.model = "tiny";
  job.spec.global_batch = 8;
  job.spec.iterations = 2;
  job.state = JobState::kPending;
  job.history = {{JobState::kPending, "submitted", 100}};
  return job;
}

// A coordinator's life that ends in kill -9: a child process opens the store at `db`, reserves
// ids (which checkpoints everything so far into the main file), saves jobs 1 to `saved`, each
// acknowledged, and dies without closing anything. The jobs live only in the -wal file.
void SaveThenKill(const std::string& db, int saved) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto store = OpenSQLiteJobStore(db);
    if (!store.ok() || !(*store)->ReserveSeqs(101).ok()) _exit(1);
    for (int seq = 1; seq <= saved; ++seq) {
      if (!(*store)->SaveJob(StoredJob(seq)).ok()) _exit(1);
    }
    _exit(0);  // no destructor runs: the store is never closed
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

StatusOr<std::unique_ptr<JobStore>> Reopen(const std::string& db, bool accept_data_loss = false) {
  SQLiteStoreOptions options;
  options.accept_data_loss = accept_data_loss;
  return OpenSQLiteJobStore(db, options);
}

// What the default logger prints while it lives.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_CASE("a kill -9 then a lost write-ahead log is refused, naming the lost writes",
          "[job_store][durability]") {
  TempDir dir;
  const std::string db = dir.File("coordinator.db");
  SaveThenKill(db, 5);
  REQUIRE(std::filesystem::file_size(db + "-wal") > 0);

  SECTION("the log kept: every acknowledged job is there") {
    auto store = Reopen(db);
    REQUIRE(store.ok());
    CHECK((*store)->LoadJobs()->size() == 5);
  }
  SECTION("the log deleted: refused, and nothing is changed") {
    std::filesystem::remove(db + "-wal");
    const auto db_bytes = std::filesystem::file_size(db);
    auto store = Reopen(db);
    REQUIRE_FALSE(store.ok());
    CHECK(store.status().code() == StatusCode::kDataLoss);
    const std::string message = store.status().message();
    CHECK_THAT(message, Catch::Contains("is behind its last acknowledged commit"));
    CHECK_THAT(message, Catch::Contains(db + "-wal is missing"));
    CHECK_THAT(message, Catch::Contains("5 acknowledged write(s) are lost"));
    CHECK_THAT(message, Catch::Contains("every job up to job-000005 (seq 1 to 5)"));
    CHECK_THAT(message, Catch::Contains("--accept-data-loss"));
    UNSCOPED_INFO(message);
    CHECK(std::filesystem::file_size(db) == db_bytes);
    CHECK_FALSE(Reopen(db).ok());  // and again: a refusal does not clear itself

    SECTION("with accept_data_loss: opened, the loss logged, and the next start is clean") {
      {
        CapturedLog log;
        auto accepted = Reopen(db, /*accept_data_loss=*/true);
        REQUIRE(accepted.ok());
        CHECK((*accepted)->LoadJobs()->empty());
        CHECK(*(*accepted)->LoadSeqReservation() == 101);  // no id is issued twice
        CHECK_THAT(log.text(), Catch::Contains("5 acknowledged write(s) are lost"));
        CHECK_THAT(log.text(), Catch::Contains("Starting from the database as it is"));
        REQUIRE((*accepted)->SaveJob(StoredJob(101)).ok());
      }
      auto next = Reopen(db);
      REQUIRE(next.ok());
      CHECK((*next)->LoadJobs()->size() == 1);
    }
  }
}

TEST_CASE("a kill -9 then a damaged write-ahead log is refused", "[job_store][durability]") {
  TempDir dir;
  const std::string db = dir.File("coordinator.db");
  SaveThenKill(db, 5);
  const std::string wal = db + "-wal";
  const auto wal_bytes = std::filesystem::file_size(wal);
  SECTION("truncated to half") { std::filesystem::resize_file(wal, wal_bytes / 2); }
  SECTION("a byte changed in the middle (SQLite drops every frame from there on)") {
    std::fstream file(wal, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(wal_bytes / 2));
    const char byte = static_cast<char>(file.get());
    file.seekp(static_cast<std::streamoff>(wal_bytes / 2));
    file.put(static_cast<char>(byte ^ 0x5a));
  }
  auto store = Reopen(db);
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(store.status().message(), Catch::Contains(wal + " is damaged or truncated"));
  CHECK_THAT(store.status().message(), Catch::Contains("up to job-000005"));
  CHECK(std::filesystem::file_size(wal) > 0);  // left as found
}

TEST_CASE("a cleanly closed store needs neither its write-ahead log nor its marker",
          "[job_store][durability]") {
  TempDir dir;
  const std::string db = dir.File("coordinator.db");
  {
    auto store = Reopen(db);
    REQUIRE(store.ok());
    for (int seq = 1; seq <= 5; ++seq) REQUIRE((*store)->SaveJob(StoredJob(seq)).ok());
  }
  std::filesystem::remove(db + "-wal");  // SQLite removes it at a clean close; make sure
  SECTION("the log gone") {
    auto store = Reopen(db);
    REQUIRE(store.ok());
    CHECK((*store)->LoadJobs()->size() == 5);
  }
  SECTION("the main file copied alone") {
    std::filesystem::copy_file(db, dir.File("copy.db"));
    auto store = Reopen(dir.File("copy.db"));
    REQUIRE(store.ok());
    CHECK((*store)->LoadJobs()->size() == 5);
  }
}

TEST_CASE("a store copied alone while open is refused: nothing tells what it lost",
          "[job_store][durability]") {
  TempDir dir;
  const std::string db = dir.File("coordinator.db");
  auto store = Reopen(db);
  REQUIRE(store.ok());
  REQUIRE((*store)->ReserveSeqs(101).ok());
  REQUIRE((*store)->SaveJob(StoredJob(1)).ok());
  std::filesystem::copy_file(db, dir.File("copy.db"));
  auto copy = Reopen(dir.File("copy.db"));
  REQUIRE_FALSE(copy.ok());
  CHECK(copy.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(copy.status().message(), Catch::Contains("was not closed cleanly"));
  CHECK_THAT(copy.status().message(), Catch::Contains("copy.db.lastcommit is missing"));
  CHECK(Reopen(dir.File("copy.db"), /*accept_data_loss=*/true).ok());
}

TEST_CASE("a damaged commit marker of a crashed store is refused", "[job_store][durability]") {
  TempDir dir;
  const std::string db = dir.File("coordinator.db");
  SaveThenKill(db, 2);
  std::ofstream(db + ".lastcommit", std::ios::trunc) << "deepool-commit-marker v1 commit=0";
  auto store = Reopen(db);
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == StatusCode::kDataLoss);
  CHECK_THAT(store.status().message(), Catch::Contains(".lastcommit is damaged"));
}

}  // namespace
}  // namespace deepool::coordinator::testing
