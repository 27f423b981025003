#include "worker/daemon/executor_supervisor.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/host_port.h"
#include "common/json_fields.h"
#include "common/logging.h"
#include "common/thread_name.h"

namespace deepool::worker::daemon {
namespace {

namespace fs = std::filesystem;

bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

// A task's folder, empty: a task id sent again after a restart of this worker (or by a
// coordinator that started over with the same --work-dir here) must not append its rank logs
// to the earlier run's, nor find its files.
Status FreshTaskDir(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return InternalError("cannot empty " + dir + ": " + ec.message());
  fs::create_directories(dir, ec);
  if (ec) return InternalError("cannot create " + dir + ": " + ec.message());
  return Status::Ok();
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return InternalError("cannot write " + path);
  return Status::Ok();
}

// An executor's stdout line: an event, or (anything the protocol does not read) a log line.
std::optional<protocol::ExecutorEvent> ParseEvent(const std::string& line) {
  if (line.empty() || line.front() != '{') return std::nullopt;
  StatusOr<protocol::ExecutorEvent> event = protocol::ParseExecutorEvent(line);
  if (!event.ok()) return std::nullopt;
  return std::move(event).value();
}

IterationReport ToReport(int rank, const protocol::IterationEvent& e) {
  IterationReport report;
  report.rank = rank;
  report.iteration = e.iteration;
  report.loss = e.loss;
  report.iteration_ms = e.iteration_ms;
  report.samples_per_s = e.samples_per_s;
  report.busy_ms = e.busy_ms;
  report.idle_ms = e.idle_ms;
  report.data_ms = e.data_ms;
  report.total_iterations = e.total_iterations;
  if (e.sharing) {
    report.fg_busy_ms = e.sharing->fg_busy_ms;
    report.bg_busy_ms = e.sharing->bg_busy_ms;
    report.bg_samples_per_s = e.sharing->bg_samples_per_s;
    report.bg_iterations = e.sharing->bg_iterations;
    report.bg_loss = e.sharing->bg_loss;
  }
  return report;
}

}  // namespace

ExecutorSupervisor::ExecutorSupervisor(SupervisorOptions options, TaskListener* listener)
    : options_(std::move(options)), listener_(listener) {
  housekeeping_ = std::thread([this] { HousekeepingLoop(); });
}

ExecutorSupervisor::~ExecutorSupervisor() { Shutdown(); }

std::string ExecutorSupervisor::TaskDir(const std::string& task_id) const {
  return (fs::path(options_.work_dir) / "tasks" / task_id).string();
}

namespace {

// object[key] when it is a string, else "" (absent fields are left to the executor's parser).
std::string StringAt(const nlohmann::json& doc, const char* object, const char* key) {
  if (!doc.is_object() || !doc.contains(object) || !doc[object].is_object()) return "";
  const nlohmann::json& inner = doc[object];
  return inner.contains(key) && inner[key].is_string() ? inner[key].get<std::string>() : "";
}

}  // namespace

Status CheckBackgroundPaths(const PathRoots& roots, const nlohmann::json& background,
                            const std::string& owner) {
  RETURN_IF_ERROR(roots.Check("background.data.path", StringAt(background, "data", "path"), owner));
  return roots.Check("background.checkpoint.dir", StringAt(background, "checkpoint", "dir"), owner);
}

Status CheckRunSpecPaths(const PathRoots& roots, const std::string& run_spec_json,
                         const std::string& owner) {
  if (!roots.restricted()) return Status::Ok();
  ASSIGN_OR_RETURN(const nlohmann::json doc, ParseJson(run_spec_json, "run spec"));
  if (!doc.is_object()) return InvalidArgumentError("run spec: not a JSON object");
  RETURN_IF_ERROR(roots.Check("checkpoint.path", StringAt(doc, "checkpoint", "path"), owner));
  RETURN_IF_ERROR(roots.Check("checkpoint.dir", StringAt(doc, "checkpoint", "dir"), owner));
  RETURN_IF_ERROR(roots.Check("data.path", StringAt(doc, "data", "path"), owner));
  RETURN_IF_ERROR(roots.Check("init.path", StringAt(doc, "init", "path"), owner));
  if (doc.contains("eval")) {
    RETURN_IF_ERROR(roots.Check("eval.data.path", StringAt(doc["eval"], "data", "path"), owner));
  }
  // The coordinator embeds no other job's BG spec in a run spec: a "background" object here is
  // checked as this owner's.
  if (doc.contains("background")) {
    RETURN_IF_ERROR(CheckBackgroundPaths(roots, doc["background"], owner));
  }
  return Status::Ok();
}

Status ExecutorSupervisor::StartTrain(const TrainTask& train) {
  if (!ValidId(train.task_id)) {
    return InvalidArgumentError("task_id must be 1-128 of [A-Za-z0-9._-], got '" + train.task_id +
                                "'");
  }
  if (train.ranks.empty()) return InvalidArgumentError("ranks: a task needs at least one rank");
  if (train.world_size <= 0) return InvalidArgumentError("world_size must be positive");
  std::vector<int> seen;
  bool has_rank0 = false;
  for (const auto& r : train.ranks) {
    if (r.rank < 0 || r.rank >= train.world_size) {
      return InvalidArgumentError("ranks: rank " + std::to_string(r.rank) + " outside world size " +
                                  std::to_string(train.world_size));
    }
    if (std::find(seen.begin(), seen.end(), r.rank) != seen.end()) {
      return InvalidArgumentError("ranks: rank " + std::to_string(r.rank) + " assigned twice");
    }
    seen.push_back(r.rank);
    has_rank0 |= r.rank == 0;
  }
  if (train.store_host.empty()) return InvalidArgumentError("store_host is empty");
  if (train.store_port < 0 || train.store_port > 65535) {
    return InvalidArgumentError("store_port out of range");
  }

  // Refuse a running id before touching its directory: the running executors read run.json.
  RETURN_IF_ERROR(CheckNewTask(train.task_id));
  RETURN_IF_ERROR(CheckRunSpecPaths(options_.path_roots, train.run_spec_json, train.owner));
  auto task = std::make_unique<Task>();
  task->task_id = train.task_id;
  task->job_id = train.job_id;
  task->dir = TaskDir(train.task_id);
  task->train = train;
  RETURN_IF_ERROR(FreshTaskDir(task->dir));
  RETURN_IF_ERROR(WriteFile(task->dir + "/run.json", train.run_spec_json));
  for (const auto& r : train.ranks) {
    RankProcess rank;
    rank.rank = r.rank;
    rank.device = r.device;
    rank.node_device = r.node_device.empty() ? r.device : r.node_device;
    rank.tail = std::make_shared<LogTail>(options_.log_tail_lines);
    task->ranks.push_back(std::move(rank));
  }
  std::sort(task->ranks.begin(), task->ranks.end(),
            [](const RankProcess& a, const RankProcess& b) { return a.rank < b.rank; });

  std::unique_ptr<Task> failed;
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return UnavailableError("the worker is shutting down");
    if (tasks_.count(train.task_id)) {
      return AlreadyExistsError("task " + train.task_id + " is already running");
    }
    Task& t = *task;
    tasks_[train.task_id] = std::move(task);
    const std::string store = FormatHostPort(train.store_host, train.store_port);
    for (auto& rank : t.ranks) {
      // With port 0, only rank 0 starts now; the others follow its store_ready line, or the
      // coordinator's SetStoreAddress when rank 0 runs elsewhere.
      if (train.store_port == 0 && rank.rank != 0) continue;
      status = StartOrDeferRankLocked(t, rank, store);
      if (!status.ok()) break;
    }
    if (!has_rank0 && train.store_port == 0) {
      DP_LOG_INFO("task {}: waiting for the store address of rank 0", train.task_id);
    }
    if (!status.ok()) {
      failed = std::move(tasks_[train.task_id]);
      tasks_.erase(train.task_id);
    }
  }
  if (failed) {
    failed.reset();  // SIGKILLs and joins whatever had started
    return status.WithContext("task " + train.task_id);
  }
  DP_LOG_INFO("task {} (job {}): started ranks of world size {}", train.task_id, train.job_id,
              train.world_size);
  return Status::Ok();
}

Status ExecutorSupervisor::StartProfile(const ProfileTask& profile) {
  if (!ValidId(profile.task_id)) {
    return InvalidArgumentError("task_id must be 1-128 of [A-Za-z0-9._-], got '" + profile.task_id +
                                "'");
  }
  RETURN_IF_ERROR(CheckNewTask(profile.task_id));
  auto task = std::make_unique<Task>();
  task->task_id = profile.task_id;
  task->job_id = profile.job_id;
  task->profile = true;
  task->dir = TaskDir(profile.task_id);
  task->profile_output_path = task->dir + "/profile.json";
  RETURN_IF_ERROR(FreshTaskDir(task->dir));
  const std::string graph_path = task->dir + "/graph.json";
  if (!profile.graph_json.empty()) RETURN_IF_ERROR(WriteFile(graph_path, profile.graph_json));
  RankProcess proc;
  proc.rank = -1;
  proc.node_device = profile.node_device.empty() ? profile.device : profile.node_device;
  proc.tail = std::make_shared<LogTail>(options_.log_tail_lines);
  task->ranks.push_back(std::move(proc));

  ProcessSpec spec;
  spec.executable = options_.profiler_path;
  for (std::string arg : profile.args) {
    size_t at = arg.find("{output}");
    if (at != std::string::npos) arg.replace(at, 8, task->profile_output_path);
    at = arg.find("{graph}");
    if (at != std::string::npos) arg.replace(at, 7, graph_path);
    spec.args.push_back(std::move(arg));
  }
  // As an executor on this device would run (StartRank): measured with all the host's cores, a
  // CPU profile was several times faster than the ranks that share them, and on a loaded host
  // its OpenMP threads waited on each other (docs/runtime.md, "Profiler").
  if (options_.cpu_threads_per_device > 0 && profile.device == "cpu") {
    spec.args.push_back("--threads");
    spec.args.push_back(std::to_string(options_.cpu_threads_per_device));
  }
  spec.working_dir = task->dir;

  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return UnavailableError("the worker is shutting down");
  if (tasks_.count(profile.task_id)) {
    return AlreadyExistsError("task " + profile.task_id + " is already running");
  }
  const std::string task_id = profile.task_id;
  Task& t = *task;
  tasks_[task_id] = std::move(task);
  // Measured alone: not beside a displaced job's executor still stopping on the device.
  if (const std::string stopping = StoppingTaskOnLocked(t.ranks[0].node_device);
      !stopping.empty()) {
    t.deferred_profiler = spec;
    DP_LOG_INFO("task {}: the profiler waits for task {}'s executor on {} to exit", task_id,
                stopping, t.ranks[0].node_device);
    return Status::Ok();
  }
  Status started = StartProfilerLocked(t, spec);
  if (!started.ok()) tasks_.erase(task_id);
  return started;
}

Status ExecutorSupervisor::StartProfilerLocked(Task& task, const ProcessSpec& spec) {
  const std::string task_id = task.task_id;
  ChildCallbacks callbacks;
  callbacks.on_stdout_line = [this, task_id](const std::string& l) {
    OnRankLine(task_id, -1, l, true);
  };
  callbacks.on_stderr_line = [this, task_id](const std::string& l) {
    OnRankLine(task_id, -1, l, false);
  };
  callbacks.on_exit = [this, task_id](const ProcessExit& e) { OnRankExit(task_id, -1, e); };
  auto child = ChildProcess::Start(spec, std::move(callbacks));
  if (!child.ok()) return child.status().WithContext("task " + task_id);
  task.ranks[0].child = std::move(child).value();
  DP_LOG_INFO("task {} (job {}): profiling, pid {}", task_id, task.job_id,
              task.ranks[0].child->pid());
  return Status::Ok();
}

Status ExecutorSupervisor::CheckNewTask(const std::string& task_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return UnavailableError("the worker is shutting down");
  if (tasks_.count(task_id) || hosted_.count(task_id)) {
    return AlreadyExistsError("task " + task_id + " is already running");
  }
  return Status::Ok();
}

Status ExecutorSupervisor::StartRankLocked(Task& task, RankProcess& rank,
                                           const std::string& store) {
  ProcessSpec spec;
  spec.executable = options_.executor_path;
  spec.args = {"--run-spec",   task.dir + "/run.json",
               "--rank",       std::to_string(rank.rank),
               "--world-size", std::to_string(task.train.world_size),
               "--store",      store};
  if (!rank.device.empty()) {
    spec.args.push_back("--device");
    spec.args.push_back(rank.device);
  }
  if (task.train.timeout_s > 0) {
    spec.args.push_back("--timeout-s");
    spec.args.push_back(std::to_string(task.train.timeout_s));
  }
  if (options_.executor_lease.count() > 0) {
    spec.args.push_back("--worker-lease-s");
    spec.args.push_back(std::to_string(options_.executor_lease.count() / 1000.0));
    spec.args.push_back("--worker-pid");
    spec.args.push_back(std::to_string(::getpid()));
  }
  const bool cpu = rank.device.empty() || rank.device == "cpu";
  if (cpu && !options_.address.empty()) {
    spec.args.push_back("--bind-host");
    spec.args.push_back(options_.address);
  }
  if (options_.cpu_threads_per_device > 0 && cpu) {
    spec.args.push_back("--threads");
    spec.args.push_back(std::to_string(options_.cpu_threads_per_device));
  }
  spec.working_dir = task.dir;
  if (task.train.background) {
    spec.nice = 10;
  } else {
    // A FG rank may host BG jobs that arrive while it runs (StartHosted).
    spec.stdin_pipe = true;
    spec.args.push_back("--commands-on-stdin");
  }
  const std::string task_id = task.task_id;
  const int r = rank.rank;
  ChildCallbacks callbacks;
  callbacks.on_stdout_line = [this, task_id, r](const std::string& l) {
    OnRankLine(task_id, r, l, true);
  };
  callbacks.on_stderr_line = [this, task_id, r](const std::string& l) {
    OnRankLine(task_id, r, l, false);
  };
  callbacks.on_exit = [this, task_id, r](const ProcessExit& e) { OnRankExit(task_id, r, e); };
  ASSIGN_OR_RETURN(rank.child, ChildProcess::Start(spec, std::move(callbacks)));
  DP_LOG_INFO("task {}: rank {} on {} started, pid {}", task_id, r,
              rank.device.empty() ? "default device" : rank.device, rank.child->pid());
  if (task.stop_asked) RETURN_IF_ERROR(rank.child->WriteStdin(StopCommandLine()));
  return Status::Ok();
}

std::string ExecutorSupervisor::StoppingTaskOnLocked(const std::string& node_device) const {
  for (const auto& [id, other] : tasks_) {
    if (!other->cancelled && !other->failing) continue;
    for (const RankProcess& r : other->ranks) {
      if (r.child && !r.exit && r.node_device == node_device) return id;
    }
  }
  return "";
}

Status ExecutorSupervisor::StartOrDeferRankLocked(Task& task, RankProcess& rank,
                                                  const std::string& store) {
  const std::string stopping = StoppingTaskOnLocked(rank.node_device);
  if (stopping.empty()) return StartRankLocked(task, rank, store);
  rank.deferred_store = store;
  DP_LOG_INFO("task {}: rank {} waits for task {}'s executor on {} to exit", task.task_id,
              rank.rank, stopping, rank.node_device);
  return Status::Ok();
}

std::vector<TaskResult> ExecutorSupervisor::StartDeferredLocked() {
  std::vector<TaskResult> results;
  std::vector<std::string> ids;
  for (const auto& [id, task] : tasks_) ids.push_back(id);
  for (const std::string& id : ids) {
    auto it = tasks_.find(id);
    if (it == tasks_.end()) continue;
    Task& task = *it->second;
    if (task.deferred_profiler) {
      if (task.cancelled || task.failing) continue;
      if (!StoppingTaskOnLocked(task.ranks[0].node_device).empty()) continue;
      const ProcessSpec spec = *std::exchange(task.deferred_profiler, std::nullopt);
      Status started = StartProfilerLocked(task, spec);
      if (!started.ok()) {
        if (auto result = FailStartLocked(task, started)) results.push_back(std::move(*result));
      }
      continue;
    }
    for (RankProcess& rank : task.ranks) {
      if (rank.deferred_store.empty() || rank.child || rank.exit) continue;
      if (task.cancelled || task.failing) break;
      if (!StoppingTaskOnLocked(rank.node_device).empty()) continue;
      const std::string store = std::exchange(rank.deferred_store, "");
      Status started = StartRankLocked(task, rank, store);
      if (!started.ok()) {
        if (auto result = FailStartLocked(task, started)) results.push_back(std::move(*result));
        break;
      }
    }
  }
  return results;
}

std::optional<TaskResult> ExecutorSupervisor::FailStartLocked(Task& task, const Status& status) {
  task.failing = true;
  task.failure = status.message();
  task.failure_code = status.code();
  StopTaskLocked(task);
  return CollectIfDoneLocked(task.task_id);
}

Status ExecutorSupervisor::SetStoreAddress(const std::string& task_id, const std::string& host,
                                           int port) {
  if (host.empty() || port <= 0 || port > 65535) {
    return InvalidArgumentError("store address must be HOST:PORT with a port in 1..65535");
  }
  std::optional<TaskResult> result;
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tasks_.find(task_id);
    if (it == tasks_.end()) return NotFoundError("task " + task_id + " is not running");
    Task& task = *it->second;
    if (task.cancelled || task.failing) return Status::Ok();
    const std::string store = FormatHostPort(host, port);
    for (auto& rank : task.ranks) {
      if (rank.child || rank.exit || !rank.deferred_store.empty()) continue;
      status = StartOrDeferRankLocked(task, rank, store);
      if (!status.ok()) break;
    }
    if (!status.ok()) result = FailStartLocked(task, status);
  }
  if (result) listener_->OnTaskFinished(*result);
  return status;
}

void ExecutorSupervisor::OnRankLine(const std::string& task_id, int rank, const std::string& line,
                                    bool is_stdout) {
  std::optional<protocol::ExecutorEvent> event = is_stdout ? ParseEvent(line) : std::nullopt;
  std::shared_ptr<LogTail> tail;
  std::string dir;
  bool start_waiting_ranks = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tasks_.find(task_id);
    if (it == tasks_.end()) return;
    Task& task = *it->second;
    RankProcess* proc = nullptr;
    for (auto& p : task.ranks) {
      if (p.rank == rank) proc = &p;
    }
    if (!proc) return;
    tail = proc->tail;
    dir = task.dir;
    if (event) {
      if (const auto* done = std::get_if<protocol::DoneEvent>(&*event)) {
        proc->done_event = true;
        proc->iterations = done->iterations;
        if (done->checkpoint) proc->checkpoint = *done->checkpoint;
        proc->checkpoint_ms = done->checkpoint_ms;
        proc->stopped = done->stopped;
      } else if (const auto* error = std::get_if<protocol::ErrorEvent>(&*event)) {
        proc->error_event = error->message;
        proc->error_code = error->code;
      } else if (const auto* iteration = std::get_if<protocol::IterationEvent>(&*event)) {
        task.last_iteration = std::max(task.last_iteration, iteration->iteration);
      } else if (std::holds_alternative<protocol::StoreReadyEvent>(*event)) {
        start_waiting_ranks = rank == 0 && !task.profile;
      }
    }
  }
  if (!event) {
    // A log line: keep it for error reports, in the rank's log file, and forward it.
    tail->Add(line);
    std::ofstream(dir + (rank < 0 ? "/profile.log" : "/rank-" + std::to_string(rank) + ".log"),
                  std::ios::app)
        << line << '\n';
    listener_->OnLogLine(task_id, rank, line);
    return;
  }
  if (const auto* iteration = std::get_if<protocol::IterationEvent>(&*event)) {
    listener_->OnIteration(task_id, ToReport(rank, *iteration));
  } else if (const auto* ready = std::get_if<protocol::StoreReadyEvent>(&*event)) {
    if (!start_waiting_ranks) return;
    DP_LOG_INFO("task {}: store ready at {}:{}", task_id, ready->host, ready->port);
    listener_->OnStoreReady(task_id, ready->host, ready->port);
    Status started = SetStoreAddress(task_id, ready->host, ready->port);
    if (!started.ok()) DP_LOG_ERROR("task {}: {}", task_id, started.ToString());
  } else if (const auto* error = std::get_if<protocol::ErrorEvent>(&*event)) {
    tail->Add("error: " + error->message);
    listener_->OnLogLine(task_id, rank, "error: " + error->message);
  } else if (const auto* progress = std::get_if<protocol::BackgroundEvent>(&*event)) {
    OnHostedLine(task_id, rank, *progress, nullptr);
  } else if (const auto* ended = std::get_if<protocol::BackgroundDoneEvent>(&*event)) {
    OnHostedLine(task_id, rank, ended->progress, ended);
  } else if (const auto* trace = std::get_if<protocol::TraceEvent>(&*event)) {
    listener_->OnTrace(task_id, *trace);
  } else if (const auto* evaluation = std::get_if<protocol::EvaluationEvent>(&*event)) {
    listener_->OnEvaluation(task_id, *evaluation);
  }
}

void ExecutorSupervisor::OnRankExit(const std::string& task_id, int rank, const ProcessExit& exit) {
  // BG tasks it hosted end with it (their background_done lines, if any, came before).
  OnHostExit(task_id, rank);
  std::optional<TaskResult> result;
  std::vector<TaskResult> started_failures;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tasks_.find(task_id);
    if (it == tasks_.end()) return;
    Task& task = *it->second;
    RankProcess* proc = nullptr;
    for (auto& p : task.ranks) {
      if (p.rank == rank) proc = &p;
    }
    if (!proc) return;
    proc->exit = exit;
    const bool rank_ok = exit.ok() && (task.profile || proc->done_event);
    if (!rank_ok && !task.cancelled && !task.failing) {
      std::string who = task.profile ? std::string("profiler") : "rank " + std::to_string(rank);
      std::string why = exit.ok() ? "exited without reporting done" : exit.Describe();
      if (!proc->error_event.empty()) why += ": " + proc->error_event;
      task.failing = true;
      task.failure = who + ": " + why;
      task.failure_code = proc->error_event.empty() ? StatusCode::kUnknown : proc->error_code;
      task.failure_tail = proc->tail->Lines();
      DP_LOG_WARN("task {}: {}; stopping its other ranks", task_id, task.failure);
      StopTaskLocked(task);
    }
    DP_LOG_INFO("task {}: {} exited ({})", task_id,
                rank < 0 ? std::string("profiler") : "rank " + std::to_string(rank),
                exit.Describe());
    result = CollectIfDoneLocked(task_id);
    // Ranks that waited for this executor to leave their device may start now.
    started_failures = StartDeferredLocked();
  }
  for (const TaskResult& failed : started_failures) listener_->OnTaskFinished(failed);
  if (!result) return;
  cv_.notify_all();
  DP_LOG_INFO("task {}: finished: {}", result->task_id,
              result->succeeded ? "succeeded" : result->message);
  listener_->OnTaskFinished(*result);
}

std::optional<TaskResult> ExecutorSupervisor::CollectIfDoneLocked(const std::string& task_id) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return std::nullopt;
  Task& task = *it->second;
  // Done when every started rank has exited and none is left to start.
  bool all_exited = std::all_of(task.ranks.begin(), task.ranks.end(), [&](const RankProcess& p) {
    return p.exit.has_value() || (!p.child && (task.cancelled || task.failing));
  });
  if (!all_exited) return std::nullopt;

  TaskResult r;
  r.task_id = task.task_id;
  r.job_id = task.job_id;
  r.cancelled = task.cancelled;
  r.succeeded = !task.cancelled && !task.failing;
  r.message = task.cancelled ? "cancelled: " + task.cancel_reason : task.failure;
  if (!r.succeeded && !task.cancelled) r.error_code = task.failure_code;
  if (!r.succeeded && !task.failure_tail.empty()) {
    r.last_log_lines = task.failure_tail;
  } else {
    for (const auto& p : task.ranks) {
      for (auto& line : p.tail->Lines()) r.last_log_lines.push_back(line);
    }
    if (r.last_log_lines.size() > options_.log_tail_lines) {
      r.last_log_lines.erase(r.last_log_lines.begin(),
                             r.last_log_lines.end() - options_.log_tail_lines);
    }
  }
  for (const auto& p : task.ranks) {
    RankExitInfo info;
    info.rank = p.rank;
    info.started = p.child != nullptr;
    if (p.exit) {
      info.exit_code = p.exit->exit_code;
      info.signal = p.exit->signal;
    }
    info.error = p.error_event;
    info.error_code = p.error_code;
    r.ranks.push_back(std::move(info));
    r.iterations = std::max(r.iterations, p.iterations);
    if (p.stopped) r.stopped_at = std::max(r.stopped_at, p.iterations);
    if (p.rank == 0 && !p.checkpoint.empty()) r.checkpoint = p.checkpoint;
    if (p.checkpoint_ms) r.checkpoint_seconds.push_back(*p.checkpoint_ms / 1000);
  }
  if (task.profile && r.succeeded) {
    std::ifstream in(task.profile_output_path, std::ios::binary);
    r.profile_json.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (r.profile_json.empty()) {
      r.succeeded = false;
      r.message = "profiler: wrote no output to " + task.profile_output_path;
    }
  }
  finished_.push_back(std::move(it->second));
  tasks_.erase(it);
  cv_.notify_all();
  return r;
}

void ExecutorSupervisor::StopTaskLocked(Task& task) {
  for (auto& rank : task.ranks) {
    if (rank.child && !rank.exit) rank.child->SignalGroup(SIGTERM);
  }
  task.kill_at = std::chrono::steady_clock::now() + options_.kill_grace;
  cv_.notify_all();
}

Status ExecutorSupervisor::SendTraceRequest(const std::string& task_id,
                                            const protocol::TraceCommand& command) {
  protocol::ExecutorCommand trace;
  trace.kind = protocol::ExecutorCommand::Kind::kTrace;
  trace.trace = command;
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Task * task, ForegroundTrainTaskLocked(task_id));
  return WriteToRunningRanksLocked(*task, protocol::ExecutorCommandToJson(trace) + "\n");
}

Status ExecutorSupervisor::StopAtCheckpoint(const std::string& task_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Task * task, ForegroundTrainTaskLocked(task_id));
  if (task->stop_asked) return Status::Ok();
  task->stop_asked = true;
  DP_LOG_INFO("task {}: asking its ranks to stop at their next checkpoint", task_id);
  return WriteToRunningRanksLocked(*task, StopCommandLine());
}

std::string ExecutorSupervisor::StopCommandLine() {
  protocol::ExecutorCommand stop;
  stop.kind = protocol::ExecutorCommand::Kind::kStopAtCheckpoint;
  return protocol::ExecutorCommandToJson(stop) + "\n";
}

StatusOr<ExecutorSupervisor::Task*> ExecutorSupervisor::ForegroundTrainTaskLocked(
    const std::string& task_id) {
  auto it = tasks_.find(task_id);
  if (it == tasks_.end() || it->second->cancelled) {
    return NotFoundError("task " + task_id + " is not running");
  }
  Task* task = it->second.get();
  if (task->profile || task->train.background) {
    return FailedPreconditionError("task " + task_id + " runs no FG executors");
  }
  return task;
}

Status ExecutorSupervisor::WriteToRunningRanksLocked(const Task& task, const std::string& line) {
  for (const RankProcess& rank : task.ranks) {
    if (!rank.child || rank.exit) continue;  // not started yet, or gone: it reads nothing
    RETURN_IF_ERROR(rank.child->WriteStdin(line).WithContext("rank " + std::to_string(rank.rank)));
  }
  return Status::Ok();
}

Status ExecutorSupervisor::Cancel(const std::string& task_id, const std::string& why) {
  if (CancelHosted(task_id, why)) return Status::Ok();
  std::optional<TaskResult> result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tasks_.find(task_id);
    if (it == tasks_.end()) return NotFoundError("task " + task_id + " is not running");
    Task& task = *it->second;
    if (task.cancelled) return Status::Ok();
    task.cancelled = true;
    task.cancel_reason = why;
    DP_LOG_INFO("task {}: cancelling: {}", task_id, why);
    StopTaskLocked(task);
    // A task whose ranks were all still waiting for the store address ends right here.
    result = CollectIfDoneLocked(task_id);
  }
  if (result) listener_->OnTaskFinished(*result);
  return Status::Ok();
}

std::vector<RunningTaskInfo> ExecutorSupervisor::RunningTasks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RunningTaskInfo> out;
  for (const auto& [id, task] : tasks_) {
    RunningTaskInfo info;
    info.task_id = id;
    info.job_id = task->job_id;
    info.profile = task->profile;
    info.last_iteration = task->last_iteration;
    for (const auto& r : task->ranks) {
      if (r.rank >= 0) info.ranks.push_back(r.rank);
    }
    out.push_back(std::move(info));
  }
  for (const auto& [id, hosted] : hosted_) {
    RunningTaskInfo info;
    info.task_id = id;
    info.job_id = hosted.task.job_id;
    info.ranks = {0};
    out.push_back(std::move(info));
  }
  return out;
}

bool ExecutorSupervisor::IsRunning(const std::string& task_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_.count(task_id) > 0 || hosted_.count(task_id) > 0;
}

void ExecutorSupervisor::HousekeepingLoop() {
  SetCurrentThreadName("dp-supervisor");
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // Escalate overdue stops to SIGKILL.
    auto now = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> next;
    for (auto& [id, task] : tasks_) {
      if (!task->kill_at) continue;
      if (*task->kill_at <= now) {
        for (auto& rank : task->ranks) {
          if (rank.child && !rank.exit) rank.child->SignalGroup(SIGKILL);
        }
        task->kill_at.reset();
      } else if (!next || *task->kill_at < *next) {
        next = task->kill_at;
      }
    }
    if (!finished_.empty()) {
      // Destroying a ChildProcess joins its reader thread, which may need mu_: unlock first.
      std::vector<std::unique_ptr<Task>> done;
      done.swap(finished_);
      lock.unlock();
      done.clear();
      lock.lock();
      continue;
    }
    if (shutting_down_ && tasks_.empty()) break;
    if (next) {
      cv_.wait_until(lock, *next);
    } else {
      cv_.wait(lock);
    }
  }
}

void ExecutorSupervisor::Shutdown() {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_ && !housekeeping_.joinable()) return;
    shutting_down_ = true;
    for (const auto& [id, task] : tasks_) ids.push_back(id);
  }
  for (const auto& id : ids) (void)Cancel(id, "the worker is shutting down");
  cv_.notify_all();
  if (housekeeping_.joinable()) housekeeping_.join();
}

}  // namespace deepool::worker::daemon
