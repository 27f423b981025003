#include "coordinator/server.h"

#include <grpcpp/server_builder.h>

#include <algorithm>
#include <filesystem>

#include "common/host_port.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/open_files.h"
#include "common/thread_name.h"
#include "coordinator/cluster_summary.h"
#include "coordinator/malformed_request.h"
#include "coordinator/startup_server.h"
#include "security/local_admin.h"
#include "security/tls_stream.h"

namespace deepool::coordinator {

StatusOr<std::unique_ptr<JobStore>> OpenJobStore(const CoordinatorOptions& options) {
  if (options.store == "memory") return std::unique_ptr<JobStore>(new InMemoryJobStore());
  if (IsPostgresUri(options.store)) return OpenPostgresJobStore(options.store);
  if (options.store != "sqlite") {
    return InvalidArgumentError("--store: must be sqlite, memory or a postgresql:// URI, got " +
                                options.store);
  }
  if (options.data_dir.empty()) return InvalidArgumentError("--data-dir: required for sqlite");
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec) {
    return UnavailableError("--data-dir: cannot create " + options.data_dir + ": " + ec.message());
  }
  // The store holds every user's specs, paths, plans and log lines, which the API shows each
  // user only of their own jobs: the directory is the coordinator's alone (SQLite makes its
  // files 0644 inside it).
  namespace fs = std::filesystem;
  const fs::perms open_to_others = fs::status(options.data_dir, ec).permissions() &
                                   (fs::perms::group_all | fs::perms::others_all);
  if (!ec && open_to_others != fs::perms::none) {
    fs::permissions(options.data_dir, fs::perms::group_all | fs::perms::others_all,
                    fs::perm_options::remove, ec);
    if (ec) {
      return FailedPreconditionError("--data-dir: " + options.data_dir +
                                     " is open to other users and cannot be closed (" +
                                     ec.message() + "): chmod 700 it");
    }
    DP_LOG_WARN("--data-dir: {} was open to other users; now 0700 (the job store is in it)",
                options.data_dir);
  }
  SQLiteStoreOptions store_options;
  store_options.accept_data_loss = options.accept_data_loss;
  return OpenSQLiteJobStore((std::filesystem::path(options.data_dir) / "coordinator.db").string(),
                            store_options);
}

security::TlsClientCheck MetricsReaderCheck(const security::Authenticator* auth,
                                            std::vector<std::string> readers) {
  return [auth, readers = std::move(readers)](const std::string& certificate_pem) -> Status {
    security::PeerCredentials credentials;
    credentials.certificate_pem = certificate_pem;
    StatusOr<security::Identity> caller = auth->Authenticate(credentials);
    Status allowed = caller.status();
    if (caller.ok() && caller->role != security::Role::kAdmin &&
        std::find(readers.begin(), readers.end(), caller->name) == readers.end()) {
      allowed = PermissionDeniedError(
          caller->name +
          " may not read the metrics, which show every user's jobs: admins and "
          "--metrics-readers only");
    }
    if (!allowed.ok()) auth->LogRefusal("metrics scrape", "", allowed);
    return allowed;
  };
}

Status CheckListenSafety(const CoordinatorOptions& options) {
  if (!options.metrics_listen.empty()) {
    StatusOr<HostPort> metrics = ParseHostPort(options.metrics_listen);
    if (!metrics.ok()) return metrics.status().WithContext("--metrics-listen");
    if (!IsLoopbackHost(metrics->host) && !options.tls.configured() && !options.insecure) {
      return InvalidArgumentError(
          "--metrics-listen " + options.metrics_listen +
          ": without TLS files the metrics endpoint serves only a loopback address (scrape "
          "from this host); give --tls-ca/--tls-cert/--tls-key for HTTPS with client "
          "certificates, or --insecure for plain HTTP on any address");
    }
  }
  ASSIGN_OR_RETURN(const HostPort listen, ParseHostPort(options.listen));
  if (options.tls.configured() || IsLoopbackHost(listen.host)) return Status::Ok();
  if (options.insecure) {
    DP_LOG_WARN(
        "serving {} without TLS (--insecure): anyone who reaches this port can submit, "
        "cancel and read every job and register as a worker",
        options.listen);
    return Status::Ok();
  }
  return InvalidArgumentError(
      "--listen " + options.listen +
      ": serving beyond loopback needs TLS (--tls-ca, --tls-cert, --tls-key; `deepool certs` "
      "makes them), or --insecure to accept that anyone who reaches the port controls the "
      "cluster");
}

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorOptions& options, std::shared_ptr<JobStore> store,
    std::unique_ptr<PlanningBackend> planner, const Clock* clock) {
  StatusOr<HostPort> listen = ParseHostPort(options.listen);
  if (!listen.ok()) return listen.status().WithContext("--listen");
  RETURN_IF_ERROR(CheckListenSafety(options));
  // Neither TLS files nor a users file: callers need the token kept in the data directory,
  // unless --insecure leaves the coordinator open (security/local_admin.h).
  security::LocalAccess access{options.users_file, ""};
  if (!options.tls.configured() && options.users_file.empty()) {
    ASSIGN_OR_RETURN(access, security::LocalAccessFor(options.data_dir, options.insecure));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   security::MakeServerCredentials(options.tls));
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->options_ = options;
  s->clock_ = clock;
  // The port is ours, not gRPC's (grpc_listener.h): bounded, and never deaf after an EMFILE.
  ASSIGN_OR_RETURN(const OpenFileLimit files, ReadOpenFileLimit());
  const ConnectionLimits limits{ConnectionBudget(files.soft, options.max_connections),
                                options.max_connections_per_peer};
  // Real time, whatever `clock` is: the listener paces a socket loop.
  StatusOr<std::unique_ptr<GrpcListener>> listener =
      GrpcListener::Start(options.listen, limits, SystemClock::Get());
  if (!listener.ok()) return listener.status().WithContext("--listen");
  s->listener_ = *std::move(listener);
  const int port = s->listener_->port();
  DP_LOG_INFO("at most {} connections at once, {} per peer address (open-file limit {})",
              limits.max_total, limits.max_per_peer, files.soft);
  // The port answers "starting" while the store loads: workers keep their tasks through a
  // restart however large the store (their lease holds on an answer).
  ASSIGN_OR_RETURN(std::unique_ptr<StartupServer> startup,
                   StartupServer::Start(s->listener_.get(), credentials));
  // A wildcard listen address is no address to reach us at; loopback is, from this host.
  std::string host = listen->host;
  if (host == "0.0.0.0" || host == "::") host = "127.0.0.1";
  DP_LOG_INFO("coordinator starting on {}: loading the job store", FormatHostPort(host, port));
  if (options.on_starting) options.on_starting(FormatHostPort(host, port));
  s->events_ = std::make_unique<CoordinatorMetrics>();
  s->store_ = std::move(store);
  s->planner_ = std::move(planner);
  s->jobs_ = std::make_unique<JobManager>(s->store_.get(), clock, options.job_limits,
                                          options.progress_store_interval);
  RETURN_IF_ERROR(s->jobs_->Load().WithContext(
      "loading the job store (restore it from a backup, or move it aside to start with no jobs)"));
  s->jobs_->SetTransitionObserver(
      [events = s->events_.get()](const JobRecord& before, const JobRecord& after) {
        events->OnTransition(before, after);
      });
  s->nodes_ = std::make_unique<NodeRegistry>(clock, options.node_timeout);
  SchedulerOptions scheduler_options = options.scheduler;
  StatusOr<PathRoots> roots = PathRoots::Make(options.path_roots);
  if (!roots.ok()) return roots.status().WithContext("--path-roots");
  scheduler_options.path_roots = *std::move(roots);
  if (scheduler_options.resend_after < 2 * options.heartbeat_interval) {
    scheduler_options.resend_after = 2 * options.heartbeat_interval;
  }
  s->scheduler_ = std::make_unique<Scheduler>(s->jobs_.get(), s->nodes_.get(), s->planner_.get(),
                                              clock, scheduler_options);
  RETURN_IF_ERROR(s->scheduler_->Recover());
  s->client_streams_ = std::make_unique<CallSlots>(
      CallLimits{options.max_client_streams, options.max_client_streams_per_user},
      "watch and log streams", "--max-client-streams", "--max-client-streams-per-user");
  s->client_calls_ = std::make_unique<CallSlots>(
      CallLimits{options.max_client_calls, options.max_client_calls_per_user}, "client calls",
      "--max-client-calls", "--max-client-calls-per-user");
  if (!access.users_file.empty()) {
    StatusOr<std::unique_ptr<security::UsersFile>> users =
        security::UsersFile::Open(access.users_file);
    if (!users.ok()) return users.status().WithContext("--users");
    s->users_ = *std::move(users);
  }
  ASSIGN_OR_RETURN(s->auth_, security::Authenticator::ForServer(options.tls, s->users_.get(),
                                                                access.no_credentials_hint));
  s->traces_ = std::make_unique<TraceCollector>();
  s->client_service_ = std::make_unique<CoordinatorServiceImpl>(
      s->jobs_.get(), s->nodes_.get(), s->scheduler_.get(), s->client_calls_.get(),
      s->client_streams_.get(), s->traces_.get(), s->auth_.get());
  s->node_service_ = std::make_unique<NodeServiceImpl>(
      s->jobs_.get(), s->nodes_.get(), s->scheduler_.get(), s->traces_.get(),
      options.heartbeat_interval.count(), s->auth_.get());

  grpc::ServerBuilder builder;
  s->acceptor_ = GrpcListener::AddAcceptor(&builder, credentials);
  // Zoo run specs are < 100 KB, but a large inline graph with its plan may pass gRPC's 4 MiB.
  builder.SetMaxReceiveMessageSize(kMaxRpcMessageBytes);
  builder.SetMaxSendMessageSize(kMaxRpcMessageBytes);
  builder.RegisterService(s->client_service_.get());
  builder.RegisterService(s->node_service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  // First, so the metrics count the INVALID_ARGUMENT it makes of an unparsable request.
  interceptors.push_back(std::make_unique<MalformedRequestInterceptorFactory>());
  interceptors.push_back(std::make_unique<RpcMetricsInterceptorFactory>(s->events_.get()));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  s->server_ = builder.BuildAndStart();
  if (!s->server_) return UnavailableError("cannot start the gRPC server");
  // From here new connections reach the real services only.
  s->listener_->ServeWith(s->acceptor_.get());
  const int starting_answers = startup->answered();
  startup->Stop();
  if (starting_answers > 0) {
    DP_LOG_INFO("answered {} call(s) with 'starting' while loading", starting_answers);
  }
  s->address_ = FormatHostPort(host, port);
  if (!options.metrics_listen.empty()) {
    HttpEndpoint::Routes routes;
    routes["/metrics"] = [p = s.get()] {
      HttpResponse response;
      response.content_type = kMetricsContentType;
      response.body = p->MetricsText();
      return response;
    };
    // With the cluster's TLS files, the same mutual TLS as the gRPC port.
    HttpStreamFactory streams;
    if (options.tls.configured()) {
      StatusOr<HttpStreamFactory> tls = security::MakeTlsHttpStreams(
          options.tls, MetricsReaderCheck(s->auth_.get(), options.metrics_readers));
      if (!tls.ok()) return tls.status().WithContext("--metrics-listen");
      streams = *std::move(tls);
    }
    StatusOr<std::unique_ptr<HttpEndpoint>> endpoint = HttpEndpoint::Start(
        options.metrics_listen, std::move(routes), "dp-coord-metric", std::move(streams));
    if (!endpoint.ok()) return endpoint.status().WithContext("--metrics-listen");
    s->metrics_ = *std::move(endpoint);
    DP_LOG_INFO("metrics at {}://{}/metrics", options.tls.configured() ? "https" : "http",
                s->metrics_->address());
  }
  if (options.control_loop) s->control_thread_ = std::thread([p = s.get()] { p->ControlLoop(); });
  DP_LOG_INFO("coordinator listening on {} ({}{})", s->address_,
              options.tls.configured() ? "mutual TLS" : "no TLS",
              s->users_ ? ", tokens" : (s->auth_->open() ? ", open: no authentication" : ""));
  return s;
}

std::string CoordinatorServer::MetricsText() const {
  ClusterNow now;
  now.jobs = jobs_->Active();
  now.counts = jobs_->Counts();
  now.nodes = nodes_->List();
  now.summary = SummarizeCluster(now.jobs, now.nodes, scheduler_->DeviceUses());
  now.now_ms = clock_->WallMillis();
  Scheduler::PolicyView policy = scheduler_->LastPolicyView();
  now.shares = std::move(policy.shares);
  now.preemptions = policy.preemptions;
  now.policy = std::move(policy.policy);
  now.decisions = std::move(policy.decisions);
  return RenderCoordinatorMetrics(*events_, now);
}

void CoordinatorServer::ControlLoop() {
  SetCurrentThreadName("dp-coord-ctl");
  while (!stopping_.load()) {
    const auto round_start = std::chrono::steady_clock::now();
    scheduler_->Tick();
    if (Status flushed = jobs_->FlushProgress(); !flushed.ok()) {
      DP_LOG_WARN("{} (tried again next round)", flushed.ToString());
    }
    if (Status reserved = jobs_->ReserveIdsAhead(); !reserved.ok()) {
      DP_LOG_WARN("reserving job ids: {} (tried again next round)", reserved.ToString());
    }
    if (options_.keep_finished.count() > 0) ForgetOldJobs();
    events_->OnSchedulerRound(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - round_start).count());
    scheduler_->WaitForWork(options_.tick_interval);
  }
}

void CoordinatorServer::ForgetOldJobs() {
  const int64_t before = clock_->WallMillis() - options_.keep_finished.count();
  StatusOr<size_t> forgotten = jobs_->ForgetFinished(before, JobManager::kMaxForgottenPerRound);
  if (!forgotten.ok()) {
    DP_LOG_WARN("{} (tried again next round)", forgotten.status().ToString());
  } else if (*forgotten > 0) {
    DP_LOG_INFO("removed {} finished job(s) older than --keep-finished-days {:g}", *forgotten,
                static_cast<double>(options_.keep_finished.count()) / 86'400'000);
  }
}

void CoordinatorServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  DP_LOG_INFO("coordinator shutting down");
  // Start may have failed half-way: only what was built is stopped.
  if (metrics_) metrics_->Stop();
  if (jobs_) jobs_->Shutdown();
  if (scheduler_) scheduler_->Shutdown();
  if (traces_) traces_->Shutdown();  // TraceJob calls stop waiting
  if (listener_) listener_->Stop();  // before the server: gRPC leaks what a stopped one is handed
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (control_thread_.joinable()) control_thread_.join();
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

}  // namespace deepool::coordinator
