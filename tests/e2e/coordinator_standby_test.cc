// Active and standby coordinators on one PostgreSQL database (a server the test starts): the
// standby binds no port and loads nothing until the leader's lease runs out, then leads. Under the
// coordinator's default timings (node timeout 10 s, heartbeat 1 s, lease a third of the workers'
// 9 s), a leader killed or frozen is replaced with no job lost and the running job training on; a
// leader paused past its lease wakes deposed, writes nothing and exits (status 3); a new leader
// whose load outlasts the lease keeps it. Workers and clients given several coordinator
// addresses find the leader. A lease the workers would not outlive is refused.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "tests/e2e/local_cluster.h"
#include "tests/postgres_server.h"
#include "tests/shell_command.h"

using namespace deepool;
using namespace deepool::e2e;

namespace {

// A loopback port that refuses connections while this lives (bound, never listening): where a
// coordinator that is not leading "listens". A coordinator may listen on it meanwhile (both set
// SO_REUSEADDR, and only one listens), so a standby's address can be known in advance.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    const int one = 1;
    REQUIRE(::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    address_ = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
  ~RefusingPort() { ::close(fd_); }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

// A cluster on a PostgreSQL store with the coordinator's default node timeout, heartbeat and
// leader lease, or nullptr where no server can start here (the test says so). `before` and
// `after`: put before and after the coordinator in the workers' --coordinator.
struct StandbySetup {
  std::unique_ptr<testing::PostgresServer> postgres;
  std::unique_ptr<LocalCluster> cluster;
};
StandbySetup StartOnPostgres(bool secure, const std::string& before = "",
                             const std::string& after = "") {
  StandbySetup setup;
  if (auto missing = testing::PostgresServer::MissingReason()) {
    WARN("skipped: " << *missing);
    return setup;
  }
  setup.postgres = std::make_unique<testing::PostgresServer>();
  ClusterOptions options;
  options.secure = secure;  // mutual TLS: every coordinator, worker and client a CA certificate
  options.store = setup.postgres->Uri();
  options.node_timeout_s = 10;
  options.heartbeat_interval_s = 1;
  options.worker_coordinators_before = before;
  options.worker_coordinators_after = after;
  setup.cluster = std::make_unique<LocalCluster>(options);
  return setup;
}

// PENDING entries in a job's history: 1 for a job submitted once and never requeued.
int PendingEntries(const v1::Job& job) {
  int entries = 0;
  for (const v1::StateTransition& step : job.history()) {
    entries += step.state() == v1::JOB_STATE_PENDING;
  }
  return entries;
}

// The iteration `job` has reached, once it runs (again).
int64_t RunningIteration(LocalCluster& cluster, const std::string& job) {
  return cluster
      .WaitForJob(job, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING; })
      .progress()
      .iteration();
}

// Waits until `job` has trained 3 iterations past `from` (or ended), and checks that it trains
// on in its first attempt: RUNNING, never requeued. What it saw last.
v1::Job CheckTrainsOn(LocalCluster& cluster, const std::string& job, int64_t from) {
  v1::Job advanced = cluster.WaitForJob(job, [&](const v1::Job& j) {
    return j.progress().iteration() > from + 3 || cli::IsTerminal(j.state());
  });
  CHECK(advanced.state() == v1::JOB_STATE_RUNNING);
  CHECK(PendingEntries(advanced) == 1);
  return advanced;
}

// What a process logged so far.
std::string LogOf(const TestProcess& process) {
  std::ifstream log(process.log_path());
  return {std::istreambuf_iterator<char>(log), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE(
    "a standby takes over from a killed leader before the workers give up, and the running job "
    "trains on",
    "[e2e][postgres]") {
  // The workers are given a list whose first coordinator does not lead (nothing listens there):
  // they find the one that does.
  RefusingPort not_leading;
  const bool secure = GENERATE(false, true);
  INFO((secure ? "mutual TLS" : "plain loopback"));
  StandbySetup setup = StartOnPostgres(secure, not_leading.address() + ",");
  if (!setup.cluster) return;
  LocalCluster& cluster = *setup.cluster;
  REQUIRE(cluster.WaitForNodesUp(2));
  // On the leader's own address: it binds the port only once it leads.
  std::unique_ptr<TestProcess> standby = cluster.StartStandbyCoordinator(cluster.address());

  std::string long_job;
  REQUIRE(cluster.Submit(FgJob("long", 100000, /*gpus=*/2, /*global_batch=*/8), &long_job).ok());
  std::vector<std::string> short_jobs(3);
  for (size_t i = 0; i < short_jobs.size(); ++i) {
    REQUIRE(cluster.Submit(BgJob("short-" + std::to_string(i), 3), &short_jobs[i]).ok());
  }
  cluster.WaitForJob(long_job, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 2;
  });

  const auto killed_at = std::chrono::steady_clock::now();
  cluster.KillCoordinator();
  cluster.AdoptCoordinator(std::move(standby), std::chrono::seconds(30));
  const auto takeover = std::chrono::steady_clock::now() - killed_at;
  WARN("the standby served "
       << std::chrono::duration_cast<std::chrono::milliseconds>(takeover).count()
       << " ms after the leader's kill -9 (the default lease, 3 s)");
  CHECK(takeover < std::chrono::seconds(9));  // the workers' lease

  // The new leader has every job, and the long one trains on in its first attempt.
  CheckTrainsOn(cluster, long_job, RunningIteration(cluster, long_job));
  for (const std::string& id : short_jobs) {
    CHECK(cluster.WaitForTerminal(id).state() == v1::JOB_STATE_SUCCEEDED);
  }
  std::string after;
  REQUIRE(cluster.Submit(BgJob("after", 2), &after).ok());
  CHECK(cluster.WaitForTerminal(after).state() == v1::JOB_STATE_SUCCEEDED);
  v1::ListJobsResponse all;
  auto context = cli::UnaryContext(std::chrono::seconds(10));
  REQUIRE(cluster.stub().ListJobs(context.get(), v1::ListJobsRequest(), &all).ok());
  CHECK(all.jobs_size() == 5);
  // So does a client given the same list.
  auto listed =
      cli::ConnectCoordinator(not_leading.address() + "," + cluster.address(), cluster.admin());
  REQUIRE(listed.ok());
  v1::ListJobsResponse again;
  auto list_context = cli::UnaryContext(std::chrono::seconds(10));
  list_context->set_wait_for_ready(true);
  REQUIRE((*listed)->ListJobs(list_context.get(), v1::ListJobsRequest(), &again).ok());
  CHECK(again.jobs_size() == 5);
}

TEST_CASE(
    "a standby takes over from a frozen leader whose connections stay open, and the running job "
    "trains on",
    "[e2e][postgres]") {
  // SIGSTOP, as a frozen machine or a partition: the leader's connections stay open (its kernel
  // even accepts new ones) but nothing answers on them. The workers list the standby's address
  // after the leader's; they must leave the silent connection before their lease stops the job.
  RefusingPort standby_port;
  const bool secure = GENERATE(false, true);
  INFO((secure ? "mutual TLS" : "plain loopback"));
  StandbySetup setup = StartOnPostgres(secure, "", "," + standby_port.address());
  if (!setup.cluster) return;
  LocalCluster& cluster = *setup.cluster;
  REQUIRE(cluster.WaitForNodesUp(2));
  std::unique_ptr<TestProcess> standby = cluster.StartStandbyCoordinator(standby_port.address());

  std::string long_job;
  REQUIRE(cluster.Submit(FgJob("long", 100000, /*gpus=*/2, /*global_batch=*/8), &long_job).ok());
  cluster.WaitForJob(long_job, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 2;
  });

  std::unique_ptr<TestProcess> leader = cluster.ReleaseCoordinator();
  const auto frozen_at = std::chrono::steady_clock::now();
  leader->Signal(SIGSTOP);
  cluster.AdoptCoordinator(std::move(standby), std::chrono::seconds(30));
  const auto takeover = std::chrono::steady_clock::now() - frozen_at;
  WARN("the standby served "
       << std::chrono::duration_cast<std::chrono::milliseconds>(takeover).count()
       << " ms after the leader froze");

  const v1::Job advanced = CheckTrainsOn(cluster, long_job, RunningIteration(cluster, long_job));

  // The old leader wakes deposed and exits; the job it once ran is not disturbed.
  leader->Signal(SIGCONT);
  std::optional<ProcessExit> exit = leader->Wait(std::chrono::seconds(30));
  REQUIRE(exit.has_value());
  CHECK(exit->exit_code == 3);
  CheckTrainsOn(cluster, long_job, advanced.progress().iteration());
}

TEST_CASE("a leader paused past its lease wakes deposed, writes nothing and exits",
          "[e2e][postgres]") {
  const bool secure = GENERATE(false, true);
  INFO((secure ? "mutual TLS" : "plain loopback"));
  StandbySetup setup = StartOnPostgres(secure);
  if (!setup.cluster) return;
  LocalCluster& cluster = *setup.cluster;
  std::string before;
  REQUIRE(cluster.Submit(BgJob("before", 2), &before).ok());
  REQUIRE(cluster.WaitForTerminal(before).state() == v1::JOB_STATE_SUCCEEDED);
  const std::string old_address = cluster.address();
  std::unique_ptr<TestProcess> standby = cluster.StartStandbyCoordinator("127.0.0.1:0");

  std::unique_ptr<TestProcess> leader = cluster.ReleaseCoordinator();
  leader->Signal(SIGSTOP);  // longer than its lease: the standby takes over
  cluster.AdoptCoordinator(std::move(standby), std::chrono::seconds(30));
  REQUIRE(cluster.address() != old_address);

  // The old leader wakes: a submission to it must not be stored, and it exits on its own.
  leader->Signal(SIGCONT);
  v1::SubmitJobRequest request;
  request.set_spec_json(BgJob("to-the-deposed", 2).dump());
  v1::SubmitJobResponse response;
  auto connected = cli::ConnectCoordinator(old_address, cluster.admin());
  REQUIRE(connected.ok());
  auto old_leader = std::move(connected).value();
  auto context = cli::UnaryContext(std::chrono::seconds(10));
  const grpc::Status submitted = old_leader->SubmitJob(context.get(), request, &response);
  WARN("a submission to the deposed leader: " << submitted.error_message());
  CHECK_FALSE(submitted.ok());
  std::optional<ProcessExit> exit = leader->Wait(std::chrono::seconds(30));
  REQUIRE(exit.has_value());
  CHECK(exit->exit_code == 3);
  CHECK_THAT(LogOf(*leader), Catch::Contains("no longer leads"));

  v1::ListJobsResponse all;
  auto list = cli::UnaryContext(std::chrono::seconds(10));
  REQUIRE(cluster.stub().ListJobs(list.get(), v1::ListJobsRequest(), &all).ok());
  REQUIRE(all.jobs_size() == 1);
  CHECK(all.jobs(0).job_id() == before);
}

TEST_CASE("a standby that loads for longer than the lease keeps leading, and the next one waits",
          "[e2e][postgres]") {
  StandbySetup setup = StartOnPostgres(/*secure=*/false);
  if (!setup.cluster) return;
  LocalCluster& cluster = *setup.cluster;
  std::string before;
  REQUIRE(cluster.Submit(BgJob("before", 2), &before).ok());
  REQUIRE(cluster.WaitForTerminal(before).state() == v1::JOB_STATE_SUCCEEDED);
  // Two standbys on the leader's address (they open their stores now, before the lock below).
  std::vector<std::unique_ptr<TestProcess>> standbys;
  standbys.push_back(cluster.StartStandbyCoordinator(cluster.address(), "standby-1"));
  standbys.push_back(cluster.StartStandbyCoordinator(cluster.address(), "standby-2"));

  // The jobs table locked: whoever takes over stands still in its load, as with a large store.
  testing::PostgresServer::Session lock(*setup.postgres, "postgres");
  lock.Send("BEGIN; LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE;");
  REQUIRE(PollUntil([&] {
    return setup.postgres->Sql("postgres",
                               "SELECT count(*) FROM pg_locks WHERE granted AND relation = "
                               "'jobs'::regclass AND mode = 'AccessExclusiveLock'") == "1\n";
  }));
  cluster.KillCoordinator();
  const auto leads = [](const TestProcess& process) {
    return LogOf(process).find("leading now") != std::string::npos;
  };
  size_t loading = 0;
  REQUIRE(PollUntil(
      [&] {
        for (loading = 0; loading < standbys.size(); ++loading) {
          if (leads(*standbys[loading])) return true;
        }
        return false;
      },
      30s));
  const TestProcess& waiting = *standbys[1 - loading];
  // Three leases (3 s each) into the load, the other standby still waits: the loading one
  // renews its lease while it loads.
  CHECK_FALSE(PollUntil([&] { return leads(waiting); }, 9s));
  lock.Send("COMMIT;");
  lock.End();
  cluster.AdoptCoordinator(std::move(standbys[loading]), std::chrono::seconds(30));
  std::string after;
  REQUIRE(cluster.Submit(BgJob("after", 2), &after).ok());
  CHECK(cluster.WaitForTerminal(after).state() == v1::JOB_STATE_SUCCEEDED);
  CHECK_FALSE(leads(waiting));
}

TEST_CASE("a leader whose database goes silent stops when its lease runs out", "[e2e][postgres]") {
  StandbySetup setup = StartOnPostgres(/*secure=*/false);
  if (!setup.cluster) return;
  LocalCluster& cluster = *setup.cluster;
  std::string before;
  REQUIRE(cluster.Submit(BgJob("before", 2), &before).ok());
  REQUIRE(cluster.WaitForTerminal(before).state() == v1::JOB_STATE_SUCCEEDED);
  std::unique_ptr<TestProcess> leader = cluster.ReleaseCoordinator();
  // No error and no answer: a renewal waits on its connection, and a standby that reaches the
  // database may take over once the lease runs out.
  setup.postgres->Pause();
  const auto paused_at = std::chrono::steady_clock::now();
  const std::optional<ProcessExit> exit = leader->Wait(std::chrono::seconds(30));
  const auto stopped_after = std::chrono::steady_clock::now() - paused_at;
  setup.postgres->Resume();
  REQUIRE(exit.has_value());
  CHECK(exit->exit_code == 3);
  WARN("the leader stopped "
       << std::chrono::duration_cast<std::chrono::milliseconds>(stopped_after).count()
       << " ms after its database went silent (the default lease, 3 s)");
  CHECK(stopped_after < std::chrono::milliseconds(3000 + 3000 / 6 + 1000));
  CHECK_THAT(LogOf(*leader), Catch::Contains("still waiting for the database"));
}

TEST_CASE("a coordinator on PostgreSQL refuses a leader lease its workers would not outlive",
          "[e2e][postgres]") {
  // Refused before the store is opened: no server needed.
  const testing::CommandOutput refused = testing::RunShell(
      std::string(DEEPOOL_BIN_DIR) +
      "/deepool-coordinator --store postgresql://127.0.0.1:1/none --lease-s 10 2>&1");
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.out, Catch::Contains("--lease-s 10 is too long for the workers") &&
                              Catch::Contains("give --lease-s 3.375 or less"));
}
