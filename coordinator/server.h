// CoordinatorServer: wires the store, JobManager, NodeRegistry, Scheduler and the two gRPC
// services, serves them on one port, and runs the control loop (a thread that calls
// Scheduler::Tick whenever there is work, and at least every tick_interval).
// Threading: Start/Shutdown from one owner thread; everything else is internal.
#pragma once

#include <grpcpp/server.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/http_endpoint.h"
#include "common/status.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/grpc_listener.h"
#include "coordinator/job_manager.h"
#include "coordinator/job_store.h"
#include "coordinator/node_registry.h"
#include "coordinator/planning.h"
#include "coordinator/scheduler.h"
#include "coordinator/services.h"
#include "security/authenticator.h"
#include "security/tls_stream.h"
#include "security/transport.h"
#include "security/users.h"

namespace deepool::coordinator {

struct CoordinatorOptions {
  // Port 0: any free port (see address()). Without TLS only a loopback address is allowed,
  // unless insecure is set.
  std::string listen = "127.0.0.1:7070";
  std::string data_dir;          // required for the sqlite store
  std::string store = "sqlite";  // "sqlite", "memory" or a postgresql:// URI
  // Start even when the sqlite store finds acknowledged writes gone (a lost or damaged -wal
  // file): SQLiteStoreOptions::accept_data_loss. Off: such a store stops the start.
  bool accept_data_loss = false;
  std::chrono::milliseconds node_timeout{10'000};
  std::chrono::milliseconds heartbeat_interval{1'000};
  std::chrono::milliseconds tick_interval{200};
  // false: no control-loop thread; the owner calls scheduler()->Tick() (tests with a FakeClock).
  bool control_loop = true;
  // WatchJob and GetJobLogs calls served at once; more are refused (RESOURCE_EXHAUSTED).
  int max_client_streams = 256;
  // ... of one named user, so one user's streams cannot lock out another's `status --watch`.
  int max_client_streams_per_user = 32;
  // The other client calls served at once, in all and per named user; more are refused at once
  // (RESOURCE_EXHAUSTED), so client calls never take every server thread from the workers.
  int max_client_calls = 64;
  int max_client_calls_per_user = 16;
  // How often at most a running job's progress alone is written to the store
  // (JobManager::UpdateProgress); 0: every report, at a store write each.
  std::chrono::milliseconds progress_store_interval = JobManager::kProgressStoreInterval;
  // How long a finished job is kept (its record and log lines, in memory and in the store) after
  // it ended; then it is removed (JobManager::ForgetFinished). 0: kept for ever.
  std::chrono::milliseconds keep_finished{0};
  // Per user: PENDING jobs, and bytes of their unfinished jobs' specs (inline graphs).
  JobLimits job_limits{/*max_pending_jobs_per_user=*/1000,
                       /*max_spec_bytes_per_user=*/int64_t{256} << 20};
  // Connections held open at once, in all (within the open-file limit less kReservedFds) and
  // from one peer address; past either a new connection is reset (grpc_listener.h).
  int max_connections = 4096;
  int max_connections_per_peer = 100;
  SchedulerOptions scheduler;
  // Mutual TLS: the CA that signs every client's and worker's certificate, and ours.
  security::TlsFiles tls;
  // Bearer tokens: a users file (security/users.h). "" with no TLS either: the coordinator
  // keeps a users file and an admin token in data_dir (security/local_admin.h).
  std::string users_file;
  // Without TLS files and a users file, let every caller in as an anonymous admin (and serve a
  // non-loopback address without TLS); logged as a warning.
  bool insecure = false;
  // Directories specs' checkpoint and data paths must lie under (scheduler.path_roots, resolved
  // at start; "{user}" in one stands for the job's owner); empty: anywhere.
  std::vector<std::string> path_roots;
  // Prometheus metrics over HTTP at /metrics ("HOST:PORT"; "" serves none). Loopback only,
  // unless insecure: the endpoint has no TLS.
  std::string metrics_listen;
  // Over HTTPS, the users besides admins whose certificates may read the metrics (they show
  // every user's jobs): a scraper's own certificate (`deepool certs user prometheus`).
  std::vector<std::string> metrics_readers = {"prometheus"};
  // Called once the port answers (UNAVAILABLE "starting", before the store loads) with the
  // address as address() will report it.
  std::function<void(const std::string& address)> on_starting;
};

// Who may scrape /metrics over HTTPS: a certificate the authenticator takes (not revoked or
// expired) of an admin, or of a user named in `readers`; refusals are logged.
security::TlsClientCheck MetricsReaderCheck(const security::Authenticator* auth,
                                            std::vector<std::string> readers);

// Whether listen may be served with these options: TLS, a loopback host, or insecure.
Status CheckListenSafety(const CoordinatorOptions& options);

// Opens the store the options name: <data_dir>/coordinator.db for sqlite, the database a
// postgresql:// URI names.
StatusOr<std::unique_ptr<JobStore>> OpenJobStore(const CoordinatorOptions& options);

class CoordinatorServer {
 public:
  // Opens the port at once (StartupServer answers "starting"), loads the store, recovers
  // running jobs, then serves on the same port. The store is shared so that a caller renewing
  // its leader lease (leader_lease.h) while it loads may keep it past a failed start.
  static StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const CoordinatorOptions& options, std::shared_ptr<JobStore> store,
      std::unique_ptr<PlanningBackend> planner, const Clock* clock);
  ~CoordinatorServer();

  // "HOST:PORT" actually bound; a wildcard host is reported as 127.0.0.1.
  const std::string& address() const { return address_; }
  // "HOST:PORT" of /metrics; "" when not served.
  std::string metrics_address() const { return metrics_ ? metrics_->address() : ""; }
  // The port's connections: kept, refused, open (grpc_listener.h).
  ListenerStats connection_stats() const {
    return listener_ ? listener_->stats() : ListenerStats();
  }
  // Stops streams, the control loop and the server; idempotent.
  void Shutdown();

  JobManager* jobs() { return jobs_.get(); }
  NodeRegistry* nodes() { return nodes_.get(); }
  Scheduler* scheduler() { return scheduler_.get(); }

 private:
  CoordinatorServer() = default;
  void ControlLoop();
  // Removes the finished jobs older than options_.keep_finished, a round's share at a time.
  void ForgetOldJobs();
  std::string MetricsText() const;

  CoordinatorOptions options_;
  // First, so it goes last: the job manager's observer and the gRPC server's interceptors (whose
  // threads end when server_ is destroyed) record into it.
  std::unique_ptr<CoordinatorMetrics> events_;
  std::shared_ptr<JobStore> store_;
  std::unique_ptr<PlanningBackend> planner_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<NodeRegistry> nodes_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<CallSlots> client_streams_;
  std::unique_ptr<CallSlots> client_calls_;
  std::unique_ptr<TraceCollector> traces_;
  std::unique_ptr<security::UsersFile> users_;
  std::unique_ptr<security::Authenticator> auth_;
  std::unique_ptr<CoordinatorServiceImpl> client_service_;
  std::unique_ptr<NodeServiceImpl> node_service_;
  std::unique_ptr<grpc::Server> server_;
  // After server_, so it goes first (Shutdown stops it before the server in any case).
  std::unique_ptr<GrpcListener::Acceptor> acceptor_;
  std::unique_ptr<GrpcListener> listener_;
  const Clock* clock_ = nullptr;
  // Last, so it goes first: it reads the jobs, nodes and scheduler on its own thread.
  std::unique_ptr<HttpEndpoint> metrics_;
  std::thread control_thread_;
  std::atomic<bool> stopping_{false};
  std::string address_;
};

}  // namespace deepool::coordinator
