// deepool-coordinator: parses options, opens the store, serves until SIGTERM/SIGINT.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "common/build_info.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/open_files.h"
#include "common/sigpipe.h"
#include "coordinator/in_process_planning.h"
#include "coordinator/leader_lease.h"
#include "coordinator/policy/policy.h"
#include "coordinator/server.h"
#include "security/grpc_locks.h"
#include "security/grpc_logs.h"

namespace {

// Signals only set a flag; the main thread polls it and shuts down outside the handler.
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

// Exit status of a leader that lost its lease (deposed, or unable to renew it for a whole lease).
constexpr int kExitLostLeadership = 3;

// With a store several coordinators share (PostgreSQL), leads first: a standby waits here with
// its port closed (so clients and workers find the leader), printing one JSON line,
// {"event":"standby","leader":"..."}. nullptr with *stopped set when stopped while waiting.
std::unique_ptr<deepool::coordinator::Leadership> Lead(deepool::coordinator::JobStore* store,
                                                       std::chrono::milliseconds lease,
                                                       bool* stopped) {
  using namespace deepool::coordinator;
  *stopped = false;
  LeaderLease* leader_lease = store->lease();
  if (leader_lease == nullptr) return nullptr;
  auto leadership = std::make_unique<Leadership>(leader_lease, deepool::SystemClock::Get(),
                                                 LeadershipOptions{LeaseHolderName(), lease});
  LeaseHolder leader;
  deepool::StatusOr<bool> leads = leadership->TryToLead(&leader);
  if (leads.ok() && *leads) return leadership;
  std::printf("{\"event\":\"standby\",\"leader\":\"%s\"}\n", leader.holder.c_str());
  std::fflush(stdout);
  *stopped = !leadership->WaitToLead([] { return g_stop != 0; });
  if (*stopped) return nullptr;
  DP_LOG_INFO("leading now: the leader lease is this coordinator's");
  return leadership;
}

}  // namespace

int main(int argc, char** argv) {
  deepool::IgnoreSigpipe();
  using deepool::coordinator::CoordinatorOptions;
  CLI::App app{"deepool coordinator: job store, scheduler and gRPC API"};
  app.set_version_flag("--version", deepool::BuildDescription("deepool-coordinator"));
  CoordinatorOptions options;
  double node_timeout_s = 10;
  double heartbeat_s = 1;
  double lease_s = 0;  // 0: DefaultLeaderLease
  std::string log_level = "info";
  app.add_option("--listen", options.listen,
                 "HOST:PORT to serve on (port 0: any free port); beyond loopback needs TLS or "
                 "--insecure")
      ->capture_default_str();
  app.add_option("--data-dir", options.data_dir,
                 "directory for the SQLite job store; without --tls-* files and --users, also "
                 "for the admin token callers need (admin.token, made at the first start) and "
                 "its users file");
  app.add_option("--store", options.store,
                 "job store: sqlite (coordinator.db in --data-dir), memory (gone at exit; for "
                 "tests), or a PostgreSQL URI, postgresql://[user@]host[:port]/dbname[?...], for "
                 "a state that outlives this machine (keep a password in ~/.pgpass or "
                 "PGPASSWORD, not on the command line)")
      ->check(
          [](const std::string& store) -> std::string {
            if (store == "sqlite" || store == "memory" ||
                deepool::coordinator::IsPostgresUri(store)) {
              return "";
            }
            return "must be sqlite, memory or a postgresql:// URI";
          },
          "sqlite|memory|postgresql://...")
      ->capture_default_str();
  app.add_option("--lease-s", lease_s,
                 "with a PostgreSQL store several coordinators may share: how long the leader's "
                 "lease lasts (renewed every third of it); a standby takes over this long after "
                 "the leader stops renewing, and a leader that cannot renew it for this long "
                 "exits (status 3). Default: a third of the workers' lease (the node timeout "
                 "less a heartbeat), 3 s with the defaults; a lease longer than 3/8 of the "
                 "workers' is refused, since running jobs would not outlive a takeover")
      ->check(CLI::PositiveNumber);
  app.add_flag("--accept-data-loss", options.accept_data_loss,
               "start even though the job store lost acknowledged writes (its coordinator.db-wal "
               "file was deleted, truncated or damaged after a crash, or an older copy of "
               "coordinator.db was put back): the start is refused with what is gone, and this "
               "flag goes on without it, logging it; use it once, after restoring what you can");
  app.add_option("--node-timeout-s", node_timeout_s, "a node silent this long is down")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--heartbeat-interval-s", heartbeat_s, "heartbeat interval told to workers")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  double progress_store_s = std::chrono::duration<double>(options.progress_store_interval).count();
  app.add_option("--progress-store-interval-s", progress_store_s,
                 "a running job's progress alone is stored at most this often (states always at "
                 "once); after a crash its progress shown may step back this much; 0: store "
                 "every report, a store write each")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--executor-timeout-s", options.scheduler.executor_timeout_s,
                 "--timeout-s passed to executors (0: none)");
  app.add_option("--max-client-streams", options.max_client_streams,
                 "watch and log streams served at once; more are refused")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-client-streams-per-user", options.max_client_streams_per_user,
                 "watch and log streams one user may have open at once (0: no bound)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-client-calls", options.max_client_calls,
                 "other client calls served at once; more are refused at once, so clients "
                 "never take every server thread from the workers")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-client-calls-per-user", options.max_client_calls_per_user,
                 "other client calls of one user served at once (0: no bound)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-pending-jobs-per-user", options.job_limits.max_pending_jobs_per_user,
                 "PENDING jobs one user may have; more submissions are refused (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  int64_t spec_mib_per_user = options.job_limits.max_spec_bytes_per_user >> 20;
  app.add_option("--max-spec-mib-per-user", spec_mib_per_user,
                 "MiB of specs (inline graphs) one user's unfinished jobs may hold; more "
                 "submissions are refused (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  double keep_finished_days = 0;
  app.add_option("--keep-finished-days", keep_finished_days,
                 "days a finished job (its record and log lines) is kept after it ended, then "
                 "removed from memory and the store; 0: for ever. Every finished job is held in "
                 "memory (a few KB each) and loaded at each start")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-connections", options.max_connections,
                 "TCP connections held open at once, from everyone (at most the open-file limit "
                 "less 256); a new one past it is reset")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-connections-per-peer", options.max_connections_per_peer,
                 "TCP connections held open at once from one IP address; a new one past it is "
                 "reset")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--tls-ca", options.tls.ca,
                 "PEM certificate of the cluster CA: clients and workers must present a "
                 "certificate it signed (mutual TLS; `deepool certs init` makes one)");
  app.add_option("--tls-cert", options.tls.cert, "PEM certificate of this coordinator");
  app.add_option("--tls-key", options.tls.key,
                 "PEM private key of --tls-cert (refused unless only its owner may read it: "
                 "chmod 600)");
  app.add_option("--users", options.users_file,
                 "users file of hashed bearer tokens (`deepool token create` adds users); "
                 "re-read when it changes; refused when group or others may write it");
  app.add_option("--path-roots", options.path_roots,
                 "directories job specs' checkpoint.path, checkpoint.dir and data.path must lie "
                 "under, after symlinks and '..' are resolved; a {user} component stands for the "
                 "submitter, e.g. '/shared/users/{user},/datasets' (repeatable; default: "
                 "anywhere)")
      ->delimiter(',');
  app.add_option("--checkpoint-root", options.scheduler.checkpoint_root,
                 "jobs (FG and BG) whose spec has no checkpoint.dir write periodic checkpoints "
                 "to DIR/JOB_ID (shared by all workers), so they resume after a node loss, a "
                 "resize or a move (default: none)");
  app.add_option("--checkpoint-every-seconds", options.scheduler.checkpoint_every_seconds,
                 "how often those default checkpoints are written")
      ->check(CLI::Range(1.0, 1e7))
      ->capture_default_str();
  std::string policy_name = "fifo";
  app.add_option("--policy", policy_name,
                 "who gets devices (docs/coordinator.md, \"Scheduling policies\"): fifo "
                 "(priority, then submission order; a FG job that does not fit blocks those "
                 "behind it), max-min (fair shares across users, by each job's throughput on "
                 "each device type; a running FG job with periodic checkpoints is preempted at "
                 "its next one) or deepool (FG jobs sized by their speed-up curves within their "
                 "amplification limits, BG jobs in the idle time)")
      ->check(CLI::IsMember(deepool::coordinator::policy::PolicyNames()))
      ->capture_default_str();
  deepool::coordinator::policy::PolicyOptions policy_options;
  app.add_option("--min-slice-s", policy_options.min_slice_s,
                 "max-min and deepool: a placed job keeps its devices at least this long before it "
                 "may be preempted or grown, so jobs are not moved back and forth")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--min-bg-idle", policy_options.min_bg_idle_fraction,
                 "every policy: a BG job runs inside a FG rank only where the rank's plan predicts "
                 "at least this fraction of each iteration idle (a one-device rank: none), and "
                 "waits for such a device or a free one otherwise; 0 places BG jobs on busy ranks "
                 "too")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_flag("--insecure", options.insecure,
               "without --tls-* files and --users, let every caller in as an admin instead of "
               "requiring the token kept in --data-dir (admin.token); and allow a non-loopback "
               "--listen address without TLS: anyone who reaches the port, any user of this "
               "host included, controls the cluster");
  app.add_option("--metrics-listen", options.metrics_listen,
                 "serve Prometheus metrics at HOST:PORT/metrics: HTTPS with client certificates "
                 "when the --tls-* files are given (any address), else plain HTTP on loopback "
                 "(any address with --insecure); off when not given");
  app.add_option("--metrics-readers", options.metrics_readers,
                 "over HTTPS, the users (besides admins) whose certificates may read the "
                 "metrics, which show every user's jobs; revoked ones may not")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  deepool::InitLogging("coordinator", log_level);
  // gRPC's lines in this log; a flood of refused TLS handshakes rate-limited.
  const deepool::security::GrpcLogRoute grpc_logs;
  deepool::security::TurnOffAbslDeadlockDetection();
  if (auto files = deepool::RaiseOpenFileLimit("deepool-coordinator"); !files.ok()) {
    std::cerr << files.status().message() << "\n";
    return 1;
  }
  options.node_timeout = std::chrono::milliseconds(static_cast<int64_t>(node_timeout_s * 1000));
  options.heartbeat_interval = std::chrono::milliseconds(static_cast<int64_t>(heartbeat_s * 1000));
  options.progress_store_interval =
      std::chrono::milliseconds(static_cast<int64_t>(progress_store_s * 1000));
  options.job_limits.max_spec_bytes_per_user = spec_mib_per_user << 20;
  options.keep_finished =
      std::chrono::milliseconds(static_cast<int64_t>(keep_finished_days * 86'400'000));
  if (policy_name != "fifo") {  // fifo: Admit's own order, no policy object
    auto policy = deepool::coordinator::policy::MakePolicy(policy_name, policy_options);
    if (!policy.ok()) {
      std::cerr << policy.status().message() << "\n";
      return 2;
    }
    options.scheduler.policy = std::move(*policy);
  }
  options.scheduler.policy_options = policy_options;
  if (options.store == "sqlite" && options.data_dir.empty()) {
    std::cerr << "--data-dir is required with --store sqlite\n";
    return 2;
  }
  const std::chrono::milliseconds lease =
      lease_s > 0 ? std::chrono::milliseconds(static_cast<int64_t>(lease_s * 1000))
                  : deepool::coordinator::DefaultLeaderLease(options.node_timeout,
                                                             options.heartbeat_interval);
  if (deepool::coordinator::IsPostgresUri(options.store)) {
    const deepool::Status fits = deepool::coordinator::CheckLeaderLease(lease, options.node_timeout,
                                                                        options.heartbeat_interval);
    if (!fits.ok()) {
      std::cerr << fits.message() << "\n";
      return 2;
    }
  }

  auto opened = deepool::coordinator::OpenJobStore(options);
  if (!opened.ok()) {
    std::cerr << opened.status().ToString() << "\n";
    return 1;
  }
  // Shared with the server: the lease renewed below lives in the store, and must outlive a
  // failed start.
  const std::shared_ptr<deepool::coordinator::JobStore> store = std::move(*opened);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  bool stopped = false;
  std::unique_ptr<deepool::coordinator::Leadership> leadership = Lead(store.get(), lease, &stopped);
  if (stopped) return 0;
  if (leadership) {
    // From before the store loads: a load longer than the lease would otherwise hand the lease
    // to a standby, which would load in turn while this one, deposed, exits.
    leadership->KeepLeading([](const std::string& reason) {
      // At once: a standby may be leading, and nothing more may be written or sent.
      DP_LOG_ERROR("{}; stopping now (exit {})", reason, kExitLostLeadership);
      spdlog::default_logger()->flush();
      std::_Exit(kExitLostLeadership);
    });
  }
  auto server = deepool::coordinator::CoordinatorServer::Start(
      options, store, std::make_unique<deepool::coordinator::InProcessPlanningBackend>(),
      deepool::SystemClock::Get());
  if (!server.ok()) {
    if (leadership) {
      leadership->Stop();
      leadership->Release();  // a standby may try now; it may well fail the same way
    }
    std::cerr << server.status().ToString() << "\n";
    return 1;
  }
  std::printf("{\"event\":\"listening\",\"address\":\"%s\",\"metrics\":\"%s\"}\n",
              (*server)->address().c_str(), (*server)->metrics_address().c_str());
  std::fflush(stdout);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (leadership) leadership->Stop();  // before the store it renews through goes
  (*server)->Shutdown();
  if (leadership) leadership->Release();  // a standby leads now, not once the lease runs out
  DP_LOG_INFO("coordinator stopped");
  return 0;
}
