// A test harness that runs a real cluster, by default on loopback: deepool-coordinator (port 0, its
// {"event":"listening"} line read from stdout) and deepool-worker processes with CPU devices, all
// from build/bin, state in a temporary directory. Waits poll with deadlines; nothing sleeps for
// correctness. Logs of every process go to files in the directory and are printed when a wait
// fails, so a failing test explains itself. With ClusterOptions::secure the cluster runs as
// `deepool up` runs it: a CA made for the test, mutual TLS everywhere, an admin token for the
// harness's own calls and CLI runs. Without it the cluster runs as a coordinator started with no
// credentials does: the coordinator makes an admin token in its data directory, which the
// harness and its CLI runs use (DEEPOOL_TOKEN_FILE), and each worker gets a node token in its
// work directory (`deepool token create NAME --role worker --out WORK_DIR/node.token`), which it
// finds there. With hosts in ClusterOptions each process runs on a host of its own
// (tests/multihost/virtual_network.h), reached at that host's address; a plain coordinator
// beyond loopback runs with --insecure (open), as tokens do not travel in plaintext.
// Threading: used from the test's thread; child output is read on ChildProcess reader threads.
#pragma once

#include <signal.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli/services/client.h"
#include "common/subprocess.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "security/cert_files.h"
#include "security/users.h"

namespace deepool::e2e {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The deepool binaries: build/bin, or DEEPOOL_E2E_BIN_DIR when set (a benchmark that runs for
// minutes copies them aside, so a build relinking build/bin meanwhile cannot break its cluster).
inline std::string BinDir() {
  const char* dir = std::getenv("DEEPOOL_E2E_BIN_DIR");
  return dir != nullptr && *dir != '\0' ? dir : DEEPOOL_BIN_DIR;
}

// Polls `condition` every 20 ms until it holds or `timeout` passes.
inline bool PollUntil(const std::function<bool()>& condition,
                      std::chrono::milliseconds timeout = 120s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return condition();
}

// One process under test, its stderr (and non-event stdout) appended to a log file.
class TestProcess {
 public:
  static std::unique_ptr<TestProcess> Start(const std::string& name, const std::string& binary,
                                            std::vector<std::string> args,
                                            const std::string& log_path,
                                            const std::vector<std::string>& enter = {}) {
    auto process = std::unique_ptr<TestProcess>(new TestProcess(name, log_path));
    ProcessSpec spec;
    spec.executable = binary;
    spec.args = std::move(args);
    spec.end_with_parent = true;  // a crashed test leaves no cluster running
    if (!enter.empty()) {         // e.g. `ip netns exec NS binary args...`: it execs, the pid stays
      spec.args.insert(spec.args.begin(), binary);
      spec.args.insert(spec.args.begin(), enter.begin() + 1, enter.end());
      spec.executable = enter.front();
    }
    TestProcess* self = process.get();
    ChildCallbacks callbacks;
    callbacks.on_stdout_line = [self](const std::string& line) { self->OnStdout(line); };
    callbacks.on_stderr_line = [self](const std::string& line) { self->Append(line); };
    auto child = ChildProcess::Start(spec, std::move(callbacks));
    REQUIRE(child.ok());
    process->child_ = std::move(child).value();
    return process;
  }

  std::vector<std::string> StdoutLines() {
    std::lock_guard<std::mutex> lock(mu_);
    return stdout_lines_;
  }
  bool WaitForStdout(const std::function<bool(const std::string&)>& match,
                     std::chrono::milliseconds timeout, std::string* found) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const auto& line : stdout_lines_) {
        if (match(line)) {
          *found = line;
          return true;
        }
      }
      return child_ && child_->exit().has_value();
    }) && !found->empty();
  }
  void Signal(int sig) { child_->SignalGroup(sig); }
  pid_t pid() const { return child_->pid(); }
  std::optional<ProcessExit> Wait(std::chrono::milliseconds timeout) {
    return child_->Wait(timeout);
  }
  // SIGTERM, then SIGKILL after `grace`.
  void Stop(std::chrono::milliseconds grace = 10s) { child_->Terminate(grace); }
  const std::string& name() const { return name_; }
  const std::string& log_path() const { return log_path_; }

 private:
  TestProcess(std::string name, std::string log_path)
      : name_(std::move(name)), log_path_(std::move(log_path)) {}
  void OnStdout(const std::string& line) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stdout_lines_.push_back(line);
    }
    cv_.notify_all();
  }
  void Append(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    std::ofstream(log_path_, std::ios::app) << line << "\n";
  }

  std::string name_;
  std::string log_path_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> stdout_lines_;
  std::unique_ptr<ChildProcess> child_;
};

// Where a process runs: this machine's loopback, or a host of a multi-host test.
struct Host {
  std::string address = "127.0.0.1";
  std::vector<std::string> enter;  // the command prefix that runs a process there; empty: here
  bool loopback() const { return enter.empty(); }
};

struct ClusterOptions {
  int workers = 2;
  int devices_per_worker = 2;
  double node_timeout_s = 20;
  double heartbeat_interval_s = 0.2;  // the coordinator's --heartbeat-interval-s
  bool secure = false;
  Host coordinator_host;
  std::string coordinator_data_dir;  // its --data-dir; empty: DIR/coordinator
  std::string store;                 // its --store; empty: its default (SQLite in its data dir)
  std::vector<std::string> coordinator_args;  // more of its options (--lease-s 2, say)
  // Put before the coordinator's address in the workers' --coordinator ("HOST:PORT," for each
  // other coordinator of a list).
  std::string worker_coordinators_before;
  // Put after it (",HOST:PORT" for each): a standby's address, known in advance.
  std::string worker_coordinators_after;
  int executor_timeout_s = 0;  // the coordinator's --executor-timeout-s; 0: its default
  bool metrics = false;        // serve /metrics on a loopback port (metrics_address())
  // The coordinator's open-file limit (RLIMIT_NOFILE, soft and hard alike, as `ulimit -n` sets
  // them in the shell that starts it); 0: inherited.
  int coordinator_open_files = 0;
  // Worker i runs on worker_hosts[i]; loopback where there is none. A worker on a host of its
  // own finds its address itself (toward the coordinator), as a deployed one does.
  std::vector<Host> worker_hosts;
};

// Job specs the tests share, quick on CPU devices with synthetic data: a small_cnn FG job over
// `gpus` ranks (global_batch divisible by them), and a one-device mlp BG job.
inline nlohmann::json FgJob(const std::string& name, int64_t iterations, int gpus = 4,
                            int global_batch = 16) {
  return {{"name", name},
          {"model", "small_cnn"},
          {"role", "fg"},
          {"global_batch", global_batch},
          {"gpus", gpus},
          {"amplification_limit", 0},
          {"iterations", iterations},
          {"profile", "analytical"},
          {"optimizer", {{"name", "sgd"}, {"lr", 0.01}}},
          {"data", {{"kind", "synthetic"}, {"seed", 7}}}};
}
inline nlohmann::json BgJob(const std::string& name, int64_t iterations) {
  return {{"name", name},
          {"model", "mlp"},
          {"role", "bg"},
          {"global_batch", 8},
          {"gpus", 1},
          {"iterations", iterations},
          {"profile", "analytical"},
          {"optimizer", {{"name", "adam"}, {"lr", 0.001}}},
          {"data", {{"kind", "synthetic"}, {"seed", 3}}}};
}

// The pid of the executor running `rank` for a task under `dir` (its run spec lies there), or 0.
// Executors on every host of a multi-host test share this machine's process table.
inline pid_t FindExecutor(const std::string& dir, int rank) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
    if (args.empty() || args[0].find("deepool-executor") == std::string::npos) continue;
    bool in_dir = false, has_rank = false;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--run-spec" && args[i + 1].rfind(dir, 0) == 0) in_dir = true;
      if (args[i] == "--rank" && args[i + 1] == std::to_string(rank)) has_rank = true;
    }
    if (in_dir && has_rank) return static_cast<pid_t>(std::stoi(name));
  }
  return 0;
}

class LocalCluster {
 public:
  explicit LocalCluster(ClusterOptions options = {}) : options_(options) {
    std::string pattern = (fs::temp_directory_path() / "dp-e2e-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
    if (options_.secure) MakeSecurity();
    StartCoordinator(options_.coordinator_host.address + ":0");
    for (int i = 0; i < options_.workers; ++i) StartWorker("node-" + std::to_string(i));
    REQUIRE(WaitForNodesUp(options_.workers));
  }

  ~LocalCluster() {
    for (auto& w : workers_) w->Stop(15s);
    if (coordinator_) coordinator_->Stop(10s);
    if (std::getenv("DEEPOOL_E2E_KEEP") == nullptr) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    } else {
      std::cerr << "e2e state kept in " << dir_ << "\n";
    }
  }

  const std::string& address() const { return address_; }
  // The coordinator's /metrics "HOST:PORT" with ClusterOptions::metrics; "" otherwise.
  const std::string& metrics_address() const { return metrics_address_; }
  const std::string& dir() const { return dir_; }
  pid_t coordinator_pid() const { return coordinator_->pid(); }
  v1::CoordinatorService::Stub& stub() { return *stub_; }
  // Secure clusters: the certificates' directory (security/cert_files.h layout), the users file
  // and the admin's credentials the harness uses.
  std::string security_dir() const { return dir_ + "/security"; }
  std::string users_file() const { return security_dir() + "/users.json"; }
  const security::ClientSecurity& admin() const { return admin_; }
  // A stub that calls with other credentials.
  std::unique_ptr<v1::CoordinatorService::Stub> ConnectAs(const security::ClientSecurity& who) {
    auto stub = cli::ConnectCoordinator(address_, who);
    REQUIRE(stub.ok());
    return std::move(stub).value();
  }

  // The coordinator's --data-dir; a plain loopback one keeps its admin token there.
  std::string coordinator_data_dir() const {
    return options_.coordinator_data_dir.empty() ? dir_ + "/coordinator"
                                                 : options_.coordinator_data_dir;
  }
  // Whether the coordinator keeps its own token (no TLS, loopback, no --insecure).
  bool local_tokens() const { return !options_.secure && options_.coordinator_host.loopback(); }

  void StartCoordinator(const std::string& listen) {
    coordinator_ = LaunchCoordinator("coordinator", listen);
    AwaitCoordinator(60s);
  }

  // A second coordinator on the same store and data directory, as a standby while the first
  // leads (a PostgreSQL store): returns once it says so, {"event":"standby"}. `listen`: the
  // cluster's own address (it binds no port before it leads), or another. `name`: its log's,
  // one per standby.
  std::unique_ptr<TestProcess> StartStandbyCoordinator(const std::string& listen,
                                                       const std::string& name = "standby") {
    auto standby = LaunchCoordinator(name, listen);
    std::string line;
    const bool waiting = standby->WaitForStdout(
        [](const std::string& l) { return l.find("\"standby\"") != std::string::npos; }, 60s,
        &line);
    if (!waiting) DumpLogs();
    REQUIRE(waiting);
    return standby;
  }
  // A standby (once the leader is gone) becomes the cluster's coordinator: returns once it
  // serves, within `timeout`.
  void AdoptCoordinator(std::unique_ptr<TestProcess> standby, std::chrono::seconds timeout) {
    coordinator_ = std::move(standby);
    AwaitCoordinator(timeout);
  }

  std::unique_ptr<TestProcess> LaunchCoordinator(const std::string& name,
                                                 const std::string& listen) {
    std::vector<std::string> args = {"--listen",
                                     listen,
                                     "--data-dir",
                                     coordinator_data_dir(),
                                     "--heartbeat-interval-s",
                                     std::to_string(options_.heartbeat_interval_s),
                                     "--node-timeout-s",
                                     std::to_string(options_.node_timeout_s),
                                     "--log-level",
                                     "debug"};
    if (!options_.store.empty()) args.insert(args.end(), {"--store", options_.store});
    args.insert(args.end(), options_.coordinator_args.begin(), options_.coordinator_args.end());
    if (options_.executor_timeout_s > 0) {
      args.insert(args.end(),
                  {"--executor-timeout-s", std::to_string(options_.executor_timeout_s)});
    }
    if (options_.metrics) args.insert(args.end(), {"--metrics-listen", "127.0.0.1:0"});
    if (options_.secure) {
      const security::TlsFiles tls = security::CoordinatorTlsFiles(security_dir());
      args.insert(args.end(), {"--tls-ca", tls.ca, "--tls-cert", tls.cert, "--tls-key", tls.key,
                               "--users", users_file()});
    } else if (!options_.coordinator_host.loopback()) {
      args.push_back("--insecure");
    }
    std::vector<std::string> enter = options_.coordinator_host.enter;
    if (options_.coordinator_open_files > 0) {  // a shell lowers the limit, then becomes it
      enter.insert(enter.end(), {"/bin/sh", "-c",
                                 "ulimit -n " + std::to_string(options_.coordinator_open_files) +
                                     " && exec \"$0\" \"$@\""});
    }
    return TestProcess::Start(name, BinDir() + "/deepool-coordinator", args,
                              dir_ + "/" + name + ".log", enter);
  }

  // The coordinator's "listening" line: its address, and a client for it.
  void AwaitCoordinator(std::chrono::seconds timeout) {
    std::string line;
    bool listening = coordinator_->WaitForStdout(
        [](const std::string& l) { return l.find("\"listening\"") != std::string::npos; }, timeout,
        &line);
    if (!listening) DumpLogs();
    REQUIRE(listening);
    auto doc = nlohmann::json::parse(line);
    address_ = doc.at("address").get<std::string>();
    metrics_address_ = doc.value("metrics", std::string());
    if (local_tokens()) {
      auto token = security::ReadTokenFile(coordinator_data_dir() + "/admin.token");
      REQUIRE(token.ok());
      admin_.token = *token;
    }
    stub_ = ConnectAs(admin_);
  }

  // Hands the coordinator's process to the caller (who may pause, resume or wait for it); the
  // cluster has none until it adopts one.
  std::unique_ptr<TestProcess> ReleaseCoordinator() { return std::move(coordinator_); }

  // SIGKILL, as a crash would; the data directory stays.
  void KillCoordinator() {
    coordinator_->Signal(SIGKILL);
    REQUIRE(coordinator_->Wait(30s).has_value());
    coordinator_.reset();
  }
  // Same port, same data directory: the workers reconnect by themselves.
  void RestartCoordinator() { StartCoordinator(address_); }

  void StartWorker(const std::string& name) {
    const size_t index = workers_.size();
    const Host host = index < options_.worker_hosts.size() ? options_.worker_hosts[index] : Host();
    const std::string coordinators =
        options_.worker_coordinators_before + address_ + options_.worker_coordinators_after;
    std::vector<std::string> args = {
        "--coordinator",  coordinators,
        "--devices",      "cpu:" + std::to_string(options_.devices_per_worker),
        "--name",         name,
        "--work-dir",     dir_ + "/" + name,
        "--log-level",    "debug",
        "--kill-grace-s", "2"};
    if (host.loopback()) args.insert(args.end(), {"--address", host.address});
    if (local_tokens()) MakeNodeToken(name);
    if (options_.secure) {
      const std::string cert = security_dir() + "/nodes/" + name + ".pem";
      if (!fs::exists(cert)) {
        REQUIRE(security::IssueClusterCertificate(security_dir(), security::Role::kWorker, name,
                                                  std::chrono::hours(24))
                    .ok());
      }
      args.insert(args.end(), {"--tls-ca", security_dir() + "/ca.pem", "--tls-cert", cert,
                               "--tls-key", security_dir() + "/nodes/" + name + "-key.pem"});
    }
    workers_.push_back(TestProcess::Start(name, BinDir() + "/deepool-worker", args,
                                          dir_ + "/" + name + ".log", host.enter));
  }

  // A signal to worker `index`'s daemon alone (its executors run in process groups of their own).
  void SignalWorker(size_t index, int sig) { workers_.at(index)->Signal(sig); }

  bool WaitForNodesUp(int count, std::chrono::milliseconds timeout = 60s) {
    bool ok = PollUntil(
        [&] {
          v1::ListNodesResponse response;
          auto context = cli::UnaryContext(2s);
          if (!stub_->ListNodes(context.get(), v1::ListNodesRequest(), &response).ok()) {
            return false;
          }
          int up = 0;
          for (const auto& n : response.nodes()) up += n.state() == v1::NODE_STATE_UP;
          return up >= count;
        },
        timeout);
    if (!ok) DumpLogs();
    return ok;
  }

  grpc::Status Submit(const nlohmann::json& spec, std::string* job_id) {
    v1::SubmitJobRequest request;
    request.set_spec_json(spec.dump());
    v1::SubmitJobResponse response;
    auto context = cli::UnaryContext(10s);
    grpc::Status status = stub_->SubmitJob(context.get(), request, &response);
    if (status.ok()) *job_id = response.job_id();
    return status;
  }

  std::optional<v1::Job> GetJob(const std::string& id) {
    v1::GetJobRequest request;
    request.set_job_id(id);
    v1::Job job;
    auto context = cli::UnaryContext(5s);
    if (!stub_->GetJob(context.get(), request, &job).ok()) return std::nullopt;
    return job;
  }

  // Polls the job until `condition` holds; on timeout prints the job and the logs.
  v1::Job WaitForJob(const std::string& id, const std::function<bool(const v1::Job&)>& condition,
                     std::chrono::milliseconds timeout = 300s) {
    v1::Job last;
    bool ok = PollUntil(
        [&] {
          auto job = GetJob(id);
          if (!job) return false;
          last = *job;
          return condition(last);
        },
        timeout);
    if (!ok) {
      std::cerr << "job " << id << " now: " << cli::ToJson(last) << "\n";
      DumpLogs();
    }
    REQUIRE(ok);
    return last;
  }
  v1::Job WaitForTerminal(const std::string& id, std::chrono::milliseconds timeout = 300s) {
    return WaitForJob(
        id, [](const v1::Job& j) { return cli::IsTerminal(j.state()); }, timeout);
  }

  std::vector<v1::Node> Nodes() {
    v1::ListNodesResponse response;
    auto context = cli::UnaryContext(5s);
    if (!stub_->ListNodes(context.get(), v1::ListNodesRequest(), &response).ok()) return {};
    return {response.nodes().begin(), response.nodes().end()};
  }

  // No node lists a task: every worker reported its executors ended.
  bool NoTasksLeft() {
    auto nodes = Nodes();
    if (nodes.empty()) return false;
    for (const auto& n : nodes) {
      if (n.task_ids_size() > 0) return false;
    }
    return true;
  }

  // The deepool CLI run against this cluster: `args` with --coordinator added, and `env` (by
  // default, on a secure cluster, the admin's credentials).
  ProcessSpec CliSpec(std::vector<std::string> args,
                      const std::vector<std::string>* env = nullptr) const {
    args.push_back("--coordinator");
    args.push_back(address_);
    ProcessSpec spec;
    spec.executable = BinDir() + "/deepool";
    spec.args = args;
    if (env) {
      spec.extra_env = *env;
    } else if (local_tokens()) {
      spec.extra_env = {"DEEPOOL_TOKEN_FILE=" + coordinator_data_dir() + "/admin.token"};
    } else if (options_.secure) {
      spec.extra_env = {"DEEPOOL_TLS_CA=" + admin_.tls.ca, "DEEPOOL_TLS_CERT=" + admin_.tls.cert,
                        "DEEPOOL_TLS_KEY=" + admin_.tls.key,
                        "DEEPOOL_TOKEN_FILE=" + security_dir() + "/admin.token"};
    }
    return spec;
  }

  // Starts the CLI (CliSpec) in the background, its output appended to `log_path`.
  std::unique_ptr<ChildProcess> StartCli(std::vector<std::string> args,
                                         const std::string& log_path) const {
    ProcessSpec spec = CliSpec(std::move(args));
    spec.stdout_to = ProcessOutput::AppendTo(log_path);
    spec.stderr_to = ProcessOutput::AppendTo(log_path);
    auto child = ChildProcess::Start(spec);
    REQUIRE(child.ok());
    return std::move(child).value();
  }

  // Runs the CLI (CliSpec); returns its exit code, output in *out / *err.
  int RunCli(std::vector<std::string> args, std::string* out, std::string* err,
             const std::vector<std::string>* env = nullptr) {
    std::mutex mu;
    ProcessSpec spec = CliSpec(std::move(args), env);
    ChildCallbacks callbacks;
    callbacks.on_stdout_line = [&](const std::string& l) {
      std::lock_guard<std::mutex> lock(mu);
      *out += l + "\n";
    };
    callbacks.on_stderr_line = [&](const std::string& l) {
      std::lock_guard<std::mutex> lock(mu);
      *err += l + "\n";
    };
    auto child = ChildProcess::Start(spec, callbacks);
    REQUIRE(child.ok());
    auto exit = (*child)->Wait(120s);
    REQUIRE(exit.has_value());
    return exit->signal ? 128 + exit->signal : exit->exit_code;
  }

  // The CA, the coordinator's certificate, an admin "admin" with a certificate and a token.
  void MakeSecurity() {
    const std::chrono::seconds day = std::chrono::hours(24);
    REQUIRE(
        security::InitClusterCertificates(security_dir(), {options_.coordinator_host.address}, day)
            .ok());
    auto admin =
        security::IssueClusterCertificate(security_dir(), security::Role::kAdmin, "admin", day);
    REQUIRE(admin.ok());
    admin_.tls = *admin;
    admin_.token = security::NewToken().value();
    security::UserTable users;
    REQUIRE(users.Add("admin", security::Role::kAdmin, security::TokenDigest(admin_.token)).ok());
    REQUIRE(security::SaveUserTable(users, users_file()).ok());
    REQUIRE(
        security::WriteNewFile(security_dir() + "/admin.token", admin_.token + "\n", 0600).ok());
  }

  // A worker's token in the coordinator's users file and in WORK_DIR/node.token, where the worker
  // finds it, as `deepool token create NAME --role worker --users ... --out ...` makes them.
  // Kept when the worker starts again.
  void MakeNodeToken(const std::string& name) {
    const std::string token_file = dir_ + "/" + name + "/node.token";
    if (fs::exists(token_file)) return;
    const std::string users_file = coordinator_data_dir() + "/users.json";
    auto users = security::LoadUserTable(users_file);
    REQUIRE(users.ok());
    const std::string token = security::NewToken().value();
    REQUIRE(users->Add(name, security::Role::kWorker, security::TokenDigest(token)).ok());
    REQUIRE(security::SaveUserTable(*users, users_file).ok());
    fs::create_directories(dir_ + "/" + name);
    REQUIRE(security::WriteNewFile(token_file, token + "\n", 0600).ok());
  }

  void DumpLogs() {
    std::vector<std::string> files = {dir_ + "/coordinator.log"};
    if (fs::exists(dir_ + "/standby.log")) files.push_back(dir_ + "/standby.log");
    for (auto& w : workers_) files.push_back(w->log_path());
    for (const auto& f : files) {
      std::ifstream in(f);
      std::vector<std::string> lines;
      std::string line;
      while (std::getline(in, line)) lines.push_back(line);
      std::cerr << "==== " << f << " (last 60 lines)\n";
      for (size_t i = lines.size() > 60 ? lines.size() - 60 : 0; i < lines.size(); ++i) {
        std::cerr << lines[i] << "\n";
      }
    }
  }

 private:
  ClusterOptions options_;
  std::string dir_;
  std::string address_;
  std::string metrics_address_;
  std::unique_ptr<TestProcess> coordinator_;
  std::vector<std::unique_ptr<TestProcess>> workers_;
  std::unique_ptr<v1::CoordinatorService::Stub> stub_;
  security::ClientSecurity admin_;  // empty for an open cluster (--insecure)
};

}  // namespace deepool::e2e
