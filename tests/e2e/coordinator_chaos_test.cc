// Jepsen-style: the coordinator is killed with SIGKILL and restarted, again and again, while a
// client submits small jobs (some of them FG jobs whose profile a worker measures) and the
// workers run them. Afterwards no job may be lost or
// duplicated, every job must have finished with an unbroken history, and every client call
// must have succeeded or failed with an error that says the coordinator was unreachable (the
// client retries with the same request id, as `deepool submit` does).
// Run on plain loopback and on mutual TLS with the SQLite store, and on plain loopback with a
// PostgreSQL store (a real server the test starts), which is itself restarted once mid-run: the
// coordinator waits for it and goes on; each restarted coordinator first waits for its killed
// predecessor's leader lease to run out.
//
// DEEPOOL_CHAOS_JOBS (default 40) and DEEPOOL_CHAOS_KILLS (default 3) size the run; the run in
// docs/reliability.md used 1,000 and 10.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "tests/e2e/local_cluster.h"
#include "tests/postgres_server.h"

using namespace deepool;
using namespace deepool::e2e;
using nlohmann::json;

namespace {

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::atoi(value) : fallback;
}

// What the submitting client saw.
struct ClientLog {
  std::mutex mu;
  int submitted = 0;                         // jobs acknowledged so far
  std::map<std::string, std::string> ids;    // job name -> the id its acknowledgement gave
  std::map<grpc::StatusCode, int> failures;  // failed calls by code
  std::vector<std::string> unclear;          // failures that were not "unreachable"
};

// Job i: mostly small BG jobs; every 8th a FG job with a measured profile whose model key is
// its own (its class count), so each is profiled on a worker, and some profiles are cut off
// by a kill: a PROFILE task interrupted by a restart must be run again, not fail the job.
nlohmann::json ChaosJob(const std::string& name, int i) {
  if (i % 8 != 4) return BgJob(name, 2);
  nlohmann::json fg = FgJob(name, 2, /*gpus=*/1, /*global_batch=*/8);
  fg["model"] = "mlp";
  fg["profile"] = "measured";
  fg["num_classes"] = 10 + i;
  return fg;
}

// Submits `jobs` jobs one after another; each call that fails is retried with the same request
// id until it succeeds (or 120 s pass).
void SubmitAll(v1::CoordinatorService::Stub* stub, int jobs, ClientLog* log) {
  for (int i = 0; i < jobs; ++i) {
    const std::string name = "chaos-" + std::to_string(i);
    v1::SubmitJobRequest request;
    request.set_spec_json(ChaosJob(name, i).dump());
    request.set_request_id("request-" + name);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < give_up) {
      v1::SubmitJobResponse response;
      auto context = cli::UnaryContext(std::chrono::seconds(5));
      const grpc::Status status = stub->SubmitJob(context.get(), request, &response);
      std::lock_guard<std::mutex> lock(log->mu);
      if (status.ok()) {
        log->ids[name] = response.job_id();
        ++log->submitted;
        break;
      }
      ++log->failures[status.error_code()];
      // CANCELLED is gRPC's end for a call still queued at a server that stops (the coordinator's
      // starting server, as the real one takes the port over); `deepool submit` retries it as
      // the coordinator unreachable (submit_retry.h).
      const bool unreachable = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                               status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                               status.error_code() == grpc::StatusCode::CANCELLED;
      if (!unreachable || status.error_message().empty()) {
        log->unclear.push_back(std::to_string(status.error_code()) + ": " + status.error_message());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // pacing, not correctness
    }
  }
}

// The history starts PENDING, ends in the job's terminal state and nowhere else, never goes
// back in time, and a SUCCEEDED job passed through RUNNING.
std::string HistoryProblem(const v1::Job& job) {
  const auto& h = job.history();
  if (h.empty()) return "empty history";
  if (h.Get(0).state() != v1::JOB_STATE_PENDING) return "does not start PENDING";
  if (h.Get(h.size() - 1).state() != job.state()) return "does not end in the job's state";
  bool ran = false;
  for (int i = 0; i < h.size(); ++i) {
    if (i > 0 && h.Get(i).time_ms() < h.Get(i - 1).time_ms()) return "goes back in time";
    if (i + 1 < h.size() && cli::IsTerminal(h.Get(i).state())) return "terminal before the end";
    ran = ran || h.Get(i).state() == v1::JOB_STATE_RUNNING;
  }
  if (job.state() == v1::JOB_STATE_SUCCEEDED && !ran) return "SUCCEEDED without RUNNING";
  return "";
}

// The history as "state (reason), ...", for a failure's message.
std::string HistoryText(const v1::Job& job) {
  std::string text;
  for (const v1::StateTransition& step : job.history()) {
    if (!text.empty()) text += ", ";
    text += v1::JobState_Name(step.state());
    if (!step.reason().empty()) text += " (" + step.reason() + ")";
  }
  return text;
}

}  // namespace

TEST_CASE("the coordinator killed again and again while jobs are submitted and run loses none",
          "[e2e][chaos]") {
  const int jobs = EnvInt("DEEPOOL_CHAOS_JOBS", 40);
  const int kills = EnvInt("DEEPOOL_CHAOS_KILLS", 3);
  // Plain loopback and mutual TLS (workers reconnect over TLS after each kill), each with SQLite;
  // plain loopback with PostgreSQL.
  enum class Setup { kPlain, kTls, kPostgres };
  const Setup setup = GENERATE(Setup::kPlain, Setup::kTls, Setup::kPostgres);
  INFO((setup == Setup::kTls        ? "mutual TLS, SQLite"
        : setup == Setup::kPostgres ? "plain loopback, PostgreSQL"
                                    : "plain loopback, SQLite"));
  std::unique_ptr<testing::PostgresServer> postgres;
  if (setup == Setup::kPostgres) {
    if (auto missing = testing::PostgresServer::MissingReason()) {
      WARN("PostgreSQL run skipped: " << *missing);
      return;
    }
    postgres = std::make_unique<testing::PostgresServer>();
  }
  ClusterOptions options;
  options.secure = setup == Setup::kTls;
  options.store = postgres ? postgres->Uri() : "";
  if (postgres) {
    // A killed coordinator's lease runs out before its successor leads: shorter than the
    // default 10 s, longer than the database's own restart below (a leader that cannot renew
    // for a whole lease exits).
    options.coordinator_args = {"--lease-s", "5"};
  }
  options.heartbeat_interval_s = 1;  // the coordinator's default
  LocalCluster cluster(options);
  auto client = cluster.ConnectAs(cluster.admin());
  ClientLog log;
  std::thread submitter([&] { SubmitAll(client.get(), jobs, &log); });

  // Kill k comes once k/(kills+1) of the jobs were acknowledged: some wait, some run, some
  // are being planned or dispatched.
  int killed = 0;
  for (int k = 1; k <= kills; ++k) {
    const int after = jobs * k / (kills + 1);
    PollUntil(
        [&] {
          std::lock_guard<std::mutex> lock(log.mu);
          return log.submitted >= after;
        },
        std::chrono::seconds(600));
    cluster.KillCoordinator();
    cluster.RestartCoordinator();
    ++killed;
    if (postgres && k == 1) {  // the database restarted under a running coordinator
      postgres->Stop();
      postgres->Start();
    }
  }
  submitter.join();
  CHECK(killed == kills);

  std::lock_guard<std::mutex> lock(log.mu);
  INFO("failed calls: " << log.failures.size() << " codes; unclear: "
                        << (log.unclear.empty() ? "none" : log.unclear.front()));
  CHECK(log.unclear.empty());
  REQUIRE(static_cast<int>(log.ids.size()) == jobs);  // every job acknowledged in the end

  // Every acknowledged job finishes.
  int failed_calls = 0;
  for (const auto& [code, count] : log.failures) failed_calls += count;
  for (const auto& [name, id] : log.ids) {
    v1::Job job = cluster.WaitForTerminal(id, std::chrono::seconds(300));
    INFO(name << " " << id << ": " << HistoryText(job));
    CHECK(job.state() == v1::JOB_STATE_SUCCEEDED);
    CHECK(HistoryProblem(job).empty());
    CHECK(job.spec().name() == name);
  }

  // The store holds exactly one job per submission: none lost, none made twice by a retry.
  v1::ListJobsResponse all;
  auto context = cli::UnaryContext(std::chrono::seconds(10));
  REQUIRE(cluster.stub().ListJobs(context.get(), v1::ListJobsRequest(), &all).ok());
  std::map<std::string, int> per_name;
  std::set<std::string> stored_ids;
  for (const auto& job : all.jobs()) {
    ++per_name[job.spec().name()];
    stored_ids.insert(job.job_id());
  }
  CHECK(all.jobs_size() == jobs);
  for (const auto& [name, id] : log.ids) {
    CHECK(per_name[name] == 1);
    CHECK(stored_ids.count(id) == 1);
  }
  WARN(jobs << " jobs, " << killed << " coordinator kills, " << failed_calls
            << " failed submit calls (all retried to one job each)");
}
