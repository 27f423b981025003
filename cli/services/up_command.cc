// deepool up: a whole cluster on this machine. Starts deepool-coordinator (port 0) and workers
// with CPU devices as child processes, submits a demo foreground burst-parallel job and a
// background job, shows their progress to the end, prints a summary and shuts everything down
// (SIGTERM, then SIGKILL after a grace period). The cluster runs secured as a real one should:
// a CA made on the fly, mutual TLS between every process, and an admin token for the CLI.
// Runs on the main thread.
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cli/command_registry.h"
#include "cli/services/client.h"
#include "cli/services/format.h"
#include "cli/services/job_wait.h"
#include "cli/services/submit_retry.h"
#include "cli/services/up_data_dir.h"
#include "cli/services/up_demo.h"
#include "common/sigpipe.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "jobspec/job_spec_json.h"
#include "security/cert_files.h"
#include "security/users.h"

namespace deepool::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

struct UpFlags {
  std::string data_dir;
  int workers = 2;
  int devices_per_worker = 0;  // 0: two, or one where a worker's share of the cores is one
  bool keep = false;
  std::string fg_model = "small_cnn";
  std::string bg_model = "mlp";
  // Large enough that the planner spreads small_cnn over several ranks on libtorch 2.x's fast
  // CPU kernels (at batch 32 one device wins) and that the FG job outlives the BG job's start.
  int64_t fg_batch = 128;
  int64_t fg_iterations = 100;
  int64_t bg_iterations = 30;  // short enough to finish inside the FG executor
  double amplification_limit = 0;
  std::string profile;  // empty: measured when deepool-profile exists, else analytical
  int timeout_s = 900;
};

// A daemon started by `up`: its own process group (a Ctrl-C reaches only us, and we shut the
// daemons down in order), stderr appended to its log file.
struct Daemon {
  std::string name;
  std::unique_ptr<ChildProcess> process;
};

StatusOr<Daemon> StartDaemon(const std::string& name, const std::string& binary,
                             const std::vector<std::string>& args, const fs::path& log_file,
                             ChildCallbacks stdout_lines) {
  ProcessSpec spec;
  spec.executable = binary;
  spec.args = args;
  spec.stderr_to = ProcessOutput::AppendTo(log_file.string());
  if (!stdout_lines.on_stdout_line) spec.stdout_to = spec.stderr_to;
  auto process = ChildProcess::Start(spec, std::move(stdout_lines));
  if (process.status().code() == StatusCode::kNotFound) {
    return NotFoundError(binary + " not found; build it first (scripts/build.sh)");
  }
  if (!process.ok()) return process.status();
  return Daemon{name, std::move(*process)};
}

// The coordinator's {"event":"listening","address":...} line, delivered by its reader thread.
class ListeningAddress {
 public:
  // Stdout callbacks for the coordinator; `log_file` receives its other stdout lines.
  ChildCallbacks Callbacks(const fs::path& log_file) {
    ChildCallbacks callbacks;
    callbacks.on_stdout_line = [this, log = std::make_shared<std::ofstream>(
                                          log_file, std::ios::app)](const std::string& line) {
      auto doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (doc.is_object() && doc.value("event", "") == "listening" && doc.contains("address") &&
          doc["address"].is_string()) {
        Set(doc["address"].get<std::string>());
      } else {
        *log << line << std::endl;
      }
    };
    callbacks.on_exit = [this](const ProcessExit&) {
      std::lock_guard<std::mutex> lock(mu_);
      exited_ = true;
      cv_.notify_all();
    };
    return callbacks;
  }

  StatusOr<std::string> Wait(Clock::duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [this] { return address_ || exited_; })) {
      return DeadlineExceededError("deepool-coordinator did not report its address in time");
    }
    if (!address_) return UnavailableError("deepool-coordinator exited during start-up");
    return *address_;
  }

 private:
  void Set(std::string address) {
    std::lock_guard<std::mutex> lock(mu_);
    address_ = std::move(address);
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::string> address_;
  bool exited_ = false;
};

// SIGTERM to the daemon's group, SIGKILL after `grace`.
void StopDaemon(Daemon& daemon, std::chrono::milliseconds grace) {
  if (!daemon.process) return;
  if (!daemon.process->Terminate(grace)) {
    std::cerr << "deepool up: " << daemon.name << " did not stop in time; killed it\n";
  }
  daemon.process.reset();
}

// Waits until `count` nodes are UP.
Status WaitForNodes(v1::CoordinatorService::Stub& stub, int count, Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  int up = 0;
  while (Clock::now() < deadline && !g_interrupted) {
    v1::ListNodesResponse response;
    auto context = UnaryContext(std::chrono::seconds(2));
    if (stub.ListNodes(context.get(), v1::ListNodesRequest(), &response).ok()) {
      up = 0;
      for (const auto& node : response.nodes()) up += node.state() == v1::NODE_STATE_UP;
      if (up >= count) return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return DeadlineExceededError("only " + std::to_string(up) + " of " + std::to_string(count) +
                               " workers registered in time");
}

// The spec goes through the same JSON reader as `deepool submit` and is sent as the API message.
StatusOr<std::string> Submit(v1::CoordinatorService::Stub& stub, const nlohmann::json& spec) {
  v1::SubmitJobRequest request;
  ASSIGN_OR_RETURN(*request.mutable_spec(), jobspec::JobSpecProtoFromJson(spec));
  v1::SubmitJobResponse response;
  const SubmitCall call = [&](const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp) {
    auto context = UnaryContext();
    context->set_wait_for_ready(true);  // a reconnecting channel connects during the try
    return stub.SubmitJob(context.get(), req, resp);
  };
  grpc::Status status = SubmitWithRetry(call, request, &response, SubmitRetry{}, std::cerr);
  if (!status.ok()) {
    return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
  }
  return response.job_id();
}

// The user `up`'s CLI calls as: the owner of the demo jobs.
constexpr const char* kLocalAdmin = "admin";

// The programs `up` starts must sit beside `deepool`.
Status CheckTools() {
  for (const char* tool : {"deepool-coordinator", "deepool-worker", "deepool-executor"}) {
    if (access(SiblingExecutable(tool).c_str(), X_OK) != 0) {
      return NotFoundError(SiblingExecutable(tool) +
                           " is missing; build the project first (scripts/build.sh)");
    }
  }
  return Status::Ok();
}

// --data-dir, or a new temporary folder, claimed (up_data_dir.h); with its coordinator/ folder and
// the admin's in jobs/ (the demo's checkpoint goes there) created.
StatusOr<fs::path> MakeDataDir(const std::string& data_dir) {
  fs::path dir;
  if (data_dir.empty()) {
    std::string pattern = (fs::temp_directory_path() / "deepool-up-XXXXXX").string();
    if (!mkdtemp(pattern.data())) return InternalError("cannot create a temporary directory");
    dir = pattern;
  } else {
    dir = fs::absolute(data_dir);
  }
  RETURN_IF_ERROR(ClaimUpDataDir(dir));
  for (const fs::path& sub : {dir / "coordinator", UpJobsDir(dir) / kLocalAdmin}) {
    std::error_code ec;
    fs::create_directories(sub, ec);
    if (ec) return InternalError("cannot create " + sub.string() + ": " + ec.message());
  }
  return dir;
}

// The local cluster's credentials, made fresh on every run in DIR/security: the CA, the
// coordinator's and each worker's certificate, an admin's certificate and token for this CLI,
// the users file, and client.env to use the cluster from another shell while it is up.
struct LocalSecurity {
  fs::path dir;
  security::ClientSecurity client;
  std::string users_file;
};

StatusOr<LocalSecurity> MakeLocalSecurity(const fs::path& data_dir, int workers) {
  LocalSecurity out;
  out.dir = data_dir / "security";
  std::error_code ec;
  fs::remove_all(out.dir, ec);
  const std::chrono::seconds valid_for = std::chrono::hours(24 * 7);
  RETURN_IF_ERROR(
      security::InitClusterCertificates(out.dir, {"127.0.0.1", "localhost"}, valid_for));
  for (int i = 0; i < workers; ++i) {
    RETURN_IF_ERROR(security::IssueClusterCertificate(out.dir, security::Role::kWorker,
                                                      "local-" + std::to_string(i), valid_for)
                        .status());
  }
  ASSIGN_OR_RETURN(out.client.tls, security::IssueClusterCertificate(
                                       out.dir, security::Role::kAdmin, kLocalAdmin, valid_for));
  ASSIGN_OR_RETURN(out.client.token, security::NewToken());
  security::UserTable users;
  RETURN_IF_ERROR(
      users.Add(kLocalAdmin, security::Role::kAdmin, security::TokenDigest(out.client.token)));
  out.users_file = (out.dir / "users.json").string();
  RETURN_IF_ERROR(security::SaveUserTable(users, out.users_file));
  RETURN_IF_ERROR(security::WriteNewFile(out.dir / "admin.token", out.client.token + "\n", 0600));
  return out;
}

// DIR/security/client.env: what another shell needs to use the cluster while it is up.
Status WriteClientEnv(const fs::path& security_dir, const security::ClientSecurity& client,
                      const std::string& address) {
  return security::WriteNewFile(
      security_dir / "client.env",
      "DEEPOOL_COORDINATOR=" + address + "\nDEEPOOL_TLS_CA=" + client.tls.ca +
          "\nDEEPOOL_TLS_CERT=" + client.tls.cert + "\nDEEPOOL_TLS_KEY=" + client.tls.key +
          "\nDEEPOOL_TOKEN_FILE=" + (security_dir / "admin.token").string() + "\n",
      0600);
}

Status SeeLogs(const Status& status, const std::string& where) {
  return Status(status.code(), status.message() + " (see " + where + ")");
}

// The coordinator and workers `up` runs, stopped in order (workers first) by Shutdown or the
// destructor. Main thread only.
class LocalDaemons {
 public:
  LocalDaemons(fs::path dir, bool remove_dir, LocalSecurity security)
      : dir_(std::move(dir)), remove_dir_(remove_dir), security_(std::move(security)) {}
  ~LocalDaemons() { Shutdown(); }

  // Starts the coordinator on a free loopback port; returns its address.
  StatusOr<std::string> StartCoordinator() {
    const fs::path log = dir_ / "coordinator.log";
    const security::TlsFiles coordinator_tls = security::CoordinatorTlsFiles(security_.dir);
    ASSIGN_OR_RETURN(
        coordinator_,
        StartDaemon("coordinator", SiblingExecutable("deepool-coordinator"),
                    {"--listen", "127.0.0.1:0", "--data-dir", (dir_ / "coordinator").string(),
                     "--heartbeat-interval-s", "0.5", "--node-timeout-s", "15", "--tls-ca",
                     coordinator_tls.ca, "--tls-cert", coordinator_tls.cert, "--tls-key",
                     coordinator_tls.key, "--users", security_.users_file, "--path-roots",
                     UpPathRoot(dir_)},
                    log, listening_.Callbacks(log)));
    StatusOr<std::string> address = listening_.Wait(std::chrono::seconds(60));
    if (!address.ok()) return SeeLogs(address.status(), log.string());
    return address;
  }

  // Starts the shape's workers with its CPU devices and cores each and waits until all are UP.
  Status StartWorkers(v1::CoordinatorService::Stub& stub, const std::string& address,
                      const LocalShape& shape) {
    const int count = shape.workers;
    const int devices = shape.devices_per_worker;
    for (int i = 0; i < count; ++i) {
      const std::string name = "local-" + std::to_string(i);
      const fs::path nodes = security_.dir / "nodes";
      ASSIGN_OR_RETURN(
          Daemon worker,
          StartDaemon(name, SiblingExecutable("deepool-worker"),
                      {"--coordinator", address, "--devices", "cpu:" + std::to_string(devices),
                       "--cpu-cores", std::to_string(shape.cores_per_worker), "--name", name, "--address", "127.0.0.1", "--work-dir",
                       (dir_ / name).string(), "--tls-ca", security_.client.tls.ca, "--tls-cert",
                       (nodes / (name + ".pem")).string(), "--tls-key",
                       (nodes / (name + "-key.pem")).string(), "--path-roots", UpPathRoot(dir_)},
                      dir_ / (name + ".log"), /*stdout_lines=*/{}));
      workers_.push_back(std::move(worker));
    }
    Status nodes = WaitForNodes(stub, count, std::chrono::seconds(60));
    if (!nodes.ok()) return SeeLogs(nodes, "the worker logs in " + dir_.string());
    return Status::Ok();
  }

  void Shutdown() {
    if (stopped_) return;
    stopped_ = true;
    std::cout << "shutting down: " << workers_.size() << " worker(s), then the coordinator"
              << std::endl;
    for (auto& w : workers_) StopDaemon(w, std::chrono::seconds(15));
    StopDaemon(coordinator_, std::chrono::seconds(10));
    std::error_code ec;
    if (remove_dir_) {
      fs::remove_all(dir_, ec);
    } else {
      std::cout << "state and logs kept in " << dir_.string() << "\n";
    }
  }

 private:
  const fs::path dir_;
  const bool remove_dir_;
  const LocalSecurity security_;
  bool stopped_ = false;
  // Before the daemons: the coordinator's reader thread reports into it until it is stopped.
  ListeningAddress listening_;
  Daemon coordinator_;
  std::vector<Daemon> workers_;
};

// The demo's two jobs: a FG burst-parallel job over every rank and a BG job on one device. Ten
// classes and these optimizers make the synthetic task learnable within the demo: over 30
// iterations the BG mlp's loss falls from about 2.3 to 1.5 (at the zoo's 1000 classes it stays
// near ln 1000 = 6.9), the FG small_cnn's from about 2.5 to 2.2 over 100.
std::vector<nlohmann::json> DemoSpecs(const UpFlags& f, const LocalShape& shape,
                                      const std::string& profile, const fs::path& dir) {
  const int ranks = shape.workers * shape.devices_per_worker;
  nlohmann::json fg = {
      {"name", "demo-fg-" + f.fg_model},
      {"model", f.fg_model},
      {"role", "fg"},
      {"global_batch", f.fg_batch},
      {"gpus", ranks},
      {"amplification_limit", f.amplification_limit},
      {"iterations", f.fg_iterations},
      {"num_classes", 10},
      {"profile", profile},
      {"optimizer", {{"name", "sgd"}, {"lr", 0.05}, {"momentum", 0.9}}},
      {"data", {{"kind", "synthetic"}, {"seed", 1}}},
      {"checkpoint", {{"path", (UpJobsDir(dir) / kLocalAdmin / "demo-fg.ckpt").string()}}}};
  nlohmann::json bg = {{"name", "demo-bg-" + f.bg_model},
                       {"model", f.bg_model},
                       {"role", "bg"},
                       {"global_batch", 16},
                       {"gpus", 1},
                       {"iterations", f.bg_iterations},
                       {"num_classes", 10},
                       {"profile", profile},
                       {"optimizer", {{"name", "adam"}, {"lr", 0.01}}},
                       {"data", {{"kind", "synthetic"}, {"seed", 2}}}};
  return {fg, bg};
}

// Follows the jobs to their end and prints the summary and the FG job's plan.
int FollowDemo(v1::CoordinatorService::Stub& stub, const std::string& address,
               const std::vector<std::string>& ids, const UpFlags& f, const fs::path& dir) {
  WaitOptions wait;
  wait.timeout = std::chrono::seconds(f.timeout_s);
  wait.interrupted = [] { return g_interrupted != 0; };
  // Often enough to see the FG job's pace over most of its iterations, not only its end.
  wait.poll_interval = std::chrono::milliseconds(200);
  IterationMeter fg_pace;
  wait.on_poll = [&fg_pace, fg = ids[0]](IterationMeter::TimePoint at,
                                         const std::map<std::string, v1::Job>& jobs) {
    auto it = jobs.find(fg);
    if (it == jobs.end()) return;
    const v1::Job& job = it->second;
    fg_pace.Observe(at, job.progress().iteration(), job.progress().iterations(),
                    job.state() == v1::JOB_STATE_RUNNING, job.progress().iteration_ms());
  };
  std::vector<v1::Job> final_jobs;
  int code = WaitForJobs(stub, address, ids, wait, std::cout, &final_jobs);

  std::cout << "\nsummary\n" << JobsSummary(final_jobs);
  v1::GetJobPlanRequest plan_request;
  plan_request.set_job_id(ids[0]);
  v1::GetJobPlanResponse plan;
  auto context = UnaryContext();
  if (stub.GetJobPlan(context.get(), plan_request, &plan).ok() && !plan.plan_json().empty()) {
    std::cout << "plan of " << ids[0] << "\n" << PlanSummary(plan.plan_json());
    // Beside the prediction, so a plan that misjudges this machine shows at once.
    const nlohmann::json doc = nlohmann::json::parse(plan.plan_json(), nullptr, false);
    const double predicted = doc.is_object() ? doc.value("totals", nlohmann::json::object())
                                                   .value("iteration_ms", 0.0)
                                             : 0.0;
    std::cout << MeasuredLine(fg_pace, predicted);
  }
  if (code != kExitOk) {
    std::cout << "logs: deepool logs JOB (while up, after: set -a; . "
              << (dir / "security" / "client.env").string() << "; set +a), or " << dir.string()
              << "/*.log\n";
  }
  return code;
}

int ReportFailure(const Status& status) {
  std::cerr << "deepool up: " << status.message() << "\n";
  return kExitFailure;
}

int RunUp(const UpFlags& f) {
  if (f.workers < 1 || f.devices_per_worker < 0) {
    std::cerr << "deepool up: --workers must be >= 1 and --devices-per-worker >= 0\n";
    return kExitUsage;
  }
  const int host_cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const LocalShape shape = ShapeLocalCluster(host_cores, f.workers, f.devices_per_worker);
  if (Status tools = CheckTools(); !tools.ok()) return ReportFailure(tools);
  std::string profile = f.profile;
  if (profile.empty()) {
    profile =
        access(SiblingExecutable("deepool-profile").c_str(), X_OK) == 0 ? "measured" : "analytical";
  }
  StatusOr<fs::path> dir = MakeDataDir(f.data_dir);
  if (!dir.ok()) return ReportFailure(dir.status());

  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
  IgnoreSigpipe();
  StatusOr<LocalSecurity> local_security = MakeLocalSecurity(*dir, f.workers);
  if (!local_security.ok()) return ReportFailure(local_security.status());
  const security::ClientSecurity client = local_security->client;
  LocalDaemons daemons(*dir, /*remove_dir=*/f.data_dir.empty() && !f.keep,
                       *std::move(local_security));
  StatusOr<std::string> address = daemons.StartCoordinator();
  if (!address.ok()) return ReportFailure(address.status());
  Status env = WriteClientEnv(*dir / "security", client, *address);
  if (!env.ok()) return ReportFailure(env);
  std::cout << "coordinator listening on " << *address << " (mutual TLS, token auth), state in "
            << (*dir / "coordinator").string() << "\nto use it from another shell: set -a; . "
            << (*dir / "security" / "client.env").string() << "; set +a" << std::endl;
  StatusOr<std::unique_ptr<v1::CoordinatorService::Stub>> stub =
      ConnectCoordinator(*address, client);
  if (!stub.ok()) return ReportFailure(stub.status());
  Status workers = daemons.StartWorkers(**stub, *address, shape);
  if (!workers.ok()) return ReportFailure(workers);
  std::cout << shape.workers << " worker(s) up with " << shape.devices_per_worker
            << " CPU device(s) and " << shape.cores_per_worker << " of this machine's "
            << host_cores << " cores each" << std::endl;
  if (shape.oversubscribed) {
    std::cout << "note: " << shape.workers * shape.devices_per_worker << " CPU devices on "
              << host_cores << " cores: ranks that share a core wait for each other, which the "
              << "planner does not model, so its prediction will be low" << std::endl;
  }

  std::vector<std::string> ids;
  for (const nlohmann::json& spec : DemoSpecs(f, shape, profile, *dir)) {
    StatusOr<std::string> id = Submit(**stub, spec);
    if (!id.ok()) {
      const std::string name = spec["name"].get<std::string>();
      return ReportFailure(id.status().WithContext("submitting " + name));
    }
    ids.push_back(*id);
  }
  std::cout << "submitted " << ids[0] << " (FG " << f.fg_model << ", burst-parallel plan over "
            << shape.workers * shape.devices_per_worker << " ranks, global batch " << f.fg_batch
            << ", "
            << profile << " profile) and " << ids[1] << " (BG " << f.bg_model << " on 1 device)"
            << std::endl;
  return FollowDemo(**stub, *address, ids, f, *dir);
}

RegisterCommand up_command([](CLI::App& app, CommandResult& result) {
  auto flags = std::make_shared<UpFlags>();
  CLI::App* cmd = app.add_subcommand(
      "up",
      "Run a local cluster on this machine's CPUs (a coordinator and workers), train a demo "
      "FG burst-parallel job and a BG job to completion, then shut down");
  cmd->add_option("--data-dir", flags->data_dir,
                  "State, logs and the jobs' files (DIR/jobs/USER, the only place specs may "
                  "point): a new or empty folder, or one an earlier `deepool up` made (it remakes "
                  "DIR/security there); never removed (default: a temporary directory, removed "
                  "unless --keep)");
  cmd->add_option("--workers", flags->workers, "Worker processes")->capture_default_str();
  cmd->add_option("--devices-per-worker", flags->devices_per_worker,
                  "CPU devices per worker (default: two, or one where a worker's share of "
                  "this machine's cores is a single core)");
  cmd->add_flag("--keep", flags->keep,
                "Keep the temporary directory (without --data-dir: up removes only that one)");
  cmd->add_option("--model", flags->fg_model, "The FG job's zoo model")->capture_default_str();
  cmd->add_option("--bg-model", flags->bg_model, "The BG job's zoo model")->capture_default_str();
  cmd->add_option("--global-batch", flags->fg_batch, "The FG job's global batch")
      ->capture_default_str();
  cmd->add_option("--iterations", flags->fg_iterations, "The FG job's iterations")
      ->capture_default_str();
  cmd->add_option("--bg-iterations", flags->bg_iterations, "The BG job's iterations")
      ->capture_default_str();
  cmd->add_option("--amplification-limit", flags->amplification_limit,
                  "The FG plan's limit (0: unconstrained)")
      ->capture_default_str();
  cmd->add_option("--profile", flags->profile,
                  "Measured or analytical (default: measured when deepool-profile is built)");
  cmd->add_option("--timeout-s", flags->timeout_s, "Give up after this long")
      ->capture_default_str();
  cmd->callback([flags, &result] { result.exit_code = RunUp(*flags); });
});

}  // namespace
}  // namespace deepool::cli
