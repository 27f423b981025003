#include "worker/daemon/worker_daemon.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/host_port.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "common/worker_lease.h"
#include "protocol/coordinator_status.h"
#include "protocol/version.h"
#include "security/transport.h"
#include "worker/daemon/coordinator_replies.h"

namespace deepool::worker::daemon {
namespace {

// deepool-profile's command line for a PROFILE assignment (worker/bin/profile_main.cc):
//   (--model NAME | --graph FILE) --device D [--device-name TYPE] --batch-sizes a,b
//   [--optimizer NAME --momentum M --weight-decay W] [--precision P] --output F
std::vector<std::string> ProfileArgs(const v1::ProfileTask& profile, const std::string& device) {
  std::vector<std::string> args;
  if (!profile.graph_json().empty()) {
    args = {"--graph", "{graph}"};
  } else {
    args = {"--model", profile.model()};
  }
  args.insert(args.end(), {"--device", device});
  // The profile is cached under (model, device type): name the device as the coordinator does.
  if (!profile.device_type().empty()) {
    args.insert(args.end(), {"--device-name", profile.device_type()});
  }
  if (profile.batch_sizes_size() > 0) {
    std::string sizes;
    for (int64_t b : profile.batch_sizes()) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
    args.insert(args.end(), {"--batch-sizes", sizes});
  }
  // The job's optimizer, whose step the iteration overhead includes.
  if (profile.has_optimizer() && !profile.optimizer().name().empty()) {
    const v1::OptimizerSpec& optimizer = profile.optimizer();
    const auto exact = [](double value) {
      char text[32];
      std::snprintf(text, sizeof(text), "%.17g", value);
      return std::string(text);
    };
    args.insert(args.end(),
                {"--optimizer", optimizer.name(), "--momentum", exact(optimizer.momentum()),
                 "--weight-decay", exact(optimizer.weight_decay())});
  }
  // The job's precision, the profile's to time and record.
  if (!profile.precision().empty()) args.insert(args.end(), {"--precision", profile.precision()});
  args.insert(args.end(), {"--output", "{output}"});
  return args;
}

}  // namespace

WorkerDaemon::WorkerDaemon(WorkerOptions options,
                           std::unique_ptr<v1::NodeService::StubInterface> stub,
                           SupervisorOptions supervisor_options)
    : options_(std::move(options)), stub_(std::move(stub)) {
  supervisor_ = std::make_unique<ExecutorSupervisor>(std::move(supervisor_options), this);
}

WorkerDaemon::~WorkerDaemon() { Stop(); }

void WorkerDaemon::Start() {
  control_thread_ = std::thread([this] { ControlLoop(); });
  stream_thread_ = std::thread([this] { StreamLoop(); });
  report_thread_ = std::thread([this] { ReportLoop(); });
}

void WorkerDaemon::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !control_thread_.joinable()) return;
    stopping_ = true;
    if (stream_context_) stream_context_->TryCancel();
  }
  cv_.notify_all();
  // The executors first, within their kill grace: a coordinator that does not answer holds up
  // the threads below (each call waits up to its deadline), and must not keep them training
  // past the SIGTERM (systemd's SIGKILL would come before their exits were reported).
  supervisor_->Shutdown();
  for (auto* t : {&control_thread_, &stream_thread_, &report_thread_}) {
    if (t->joinable()) t->join();
  }
  // One last attempt to tell the coordinator, each call within kStoppingRpcTimeout.
  FlushProgress();
  FlushExits();
}

std::string WorkerDaemon::node_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return node_id_;
}

std::unique_ptr<grpc::ClientContext> WorkerDaemon::NewContext() const {
  return NewContext(options_.rpc_timeout);
}

std::unique_ptr<grpc::ClientContext> WorkerDaemon::NewContext(
    std::chrono::milliseconds timeout) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) timeout = std::min(timeout, kStoppingRpcTimeout);
  }
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

bool WorkerDaemon::SleepFor(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, d, [this] { return stopping_; });
  return !stopping_;
}

void WorkerDaemon::ForgetRegistration(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (node_id_.empty()) return;
  DP_LOG_WARN("coordinator forgot node {} ({}); registering again", node_id_, why);
  node_id_.clear();
  if (stream_context_) stream_context_->TryCancel();
  cv_.notify_all();
}

std::vector<v1::RunningTask> WorkerDaemon::RunningTaskProtos() const {
  std::vector<v1::RunningTask> out;
  for (const auto& task : supervisor_->RunningTasks()) {
    v1::RunningTask proto;
    proto.set_task_id(task.task_id);
    proto.set_job_id(task.job_id);
    for (int r : task.ranks) proto.add_ranks(r);
    out.push_back(std::move(proto));
  }
  return out;
}

// ---- control: register and heartbeat ----

void WorkerDaemon::ControlLoop() {
  SetCurrentThreadName("dp-worker-ctl");
  int failures = 0;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    if (node_id().empty()) {
      // Exits first: the coordinator must not take a task that ended meanwhile for a lost one.
      FlushExits();
      if (Register()) {
        failures = 0;
      } else {
        ++failures;
        EnforceLease();
        if (!SleepFor(options_.retry_interval)) return;
      }
      continue;
    }
    Heartbeat();
    EnforceLease();
    std::chrono::milliseconds interval;
    {
      std::lock_guard<std::mutex> lock(mu_);
      interval = heartbeat_interval_;
    }
    // Wake early when the registration is lost, so re-registering is prompt.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, interval, [this] { return stopping_ || node_id_.empty(); });
  }
}

bool WorkerDaemon::Register() {
  v1::RegisterNodeRequest request;
  request.set_name(options_.name);
  request.set_address(options_.address);
  request.set_version(options_.version);
  request.set_protocol_version(protocol::kProtocolVersion);
  request.set_oldest_protocol_version(protocol::kOldestProtocolVersion);
  for (const auto& d : options_.devices) {
    auto* device = request.add_devices();
    device->set_device(d.name);
    device->set_type(d.type);
    device->set_memory_bytes(d.memory_bytes);
  }
  for (auto& task : RunningTaskProtos()) *request.add_running_tasks() = std::move(task);
  // A task that ended while the coordinator was away is still this node's until its exit is
  // taken (which needs a registration first): listed, it is not counted lost.
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const PendingExit& exit : exits_) {
      v1::RunningTask ended;
      ended.set_task_id(exit.request.task_id());
      *request.add_running_tasks() = std::move(ended);
    }
  }
  v1::RegisterNodeResponse response;
  auto context = NewContext();
  grpc::Status status = stub_->RegisterNode(context.get(), request, &response);
  if (OnStartingAnswer(*context, status)) return false;
  if (!status.ok()) {
    static std::atomic<int> logged{0};
    if (logged++ % 20 == 0) {
      // A refused TLS handshake is no outage: say what the worker refused, or was refused.
      const std::string refusal = security::DescribeTlsRefusal(status.error_message());
      DP_LOG_WARN("cannot register with the coordinator: {}",
                  refusal.empty() ? FromGrpc(status).ToString() : refusal);
    }
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    node_id_ = response.node_id();
    last_node_id_ = node_id_;
    if (response.heartbeat_interval_ms() > 0) {
      heartbeat_interval_ = std::chrono::milliseconds(response.heartbeat_interval_ms());
    }
  }
  RenewLease(&response);
  registrations_++;
  cv_.notify_all();
  DP_LOG_INFO("registered as node {} with {} devices and {} running tasks, executor protocol {}",
              response.node_id(), options_.devices.size(), request.running_tasks_size(),
              response.protocol_version());
  for (const auto& task_id : response.cancel_task_ids()) {
    DP_LOG_INFO("task {}: the coordinator no longer wants it; cancelling", task_id);
    CancelTask(task_id, "the coordinator did not want it when this worker registered again");
  }
  return true;
}

void WorkerDaemon::Heartbeat() {
  v1::HeartbeatRequest request;
  request.set_node_id(node_id());
  for (auto& task : RunningTaskProtos()) *request.add_running_tasks() = std::move(task);
  v1::HeartbeatResponse response;
  auto context = NewContext(HeartbeatTimeout());
  grpc::Status status = stub_->Heartbeat(context.get(), request, &response);
  if (OnStartingAnswer(*context, status)) return;
  if (AsksToRegisterAgain(*context, status)) {
    RenewLease(nullptr);  // an answer: the coordinator is there (it restarted)
    ForgetRegistration("heartbeat: " + status.error_message());
    return;
  }
  if (!status.ok()) {
    DP_LOG_DEBUG("heartbeat failed: {}", FromGrpc(status).ToString());
    return;
  }
  RenewLease(nullptr);
  for (const auto& command : response.commands()) HandleCommand(command);
}

bool WorkerDaemon::OnStartingAnswer(const grpc::ClientContext& context,
                                    const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
      context.GetServerTrailingMetadata().count(protocol::kCoordinatorStartingKey) == 0) {
    return false;
  }
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = !coordinator_starting_;
    coordinator_starting_ = true;
  }
  if (first) {
    DP_LOG_INFO("the coordinator is starting (loading its job store); keeping {} task(s) running",
                supervisor_->RunningTasks().size());
  }
  RenewLease(nullptr);
  return true;
}

void WorkerDaemon::RenewLease(const v1::RegisterNodeResponse* registration) {
  std::lock_guard<std::mutex> lock(mu_);
  if (registration) {
    using std::chrono::milliseconds;
    if (options_.coordinator_lease) {
      lease_ = *options_.coordinator_lease;
    } else if (registration->node_timeout_ms() > 0) {
      lease_ =
          DefaultWorkerLease(milliseconds(registration->node_timeout_ms()), heartbeat_interval_);
    } else {
      lease_ = milliseconds(0);  // a coordinator that does not say: no lease
    }
  }
  last_answer_ = options_.clock->Now();
  if (registration) coordinator_starting_ = false;
  if (lease_lost_) DP_LOG_INFO("the coordinator answers again");
  lease_lost_ = false;
}

std::chrono::milliseconds WorkerDaemon::HeartbeatTimeout() const {
  using std::chrono::milliseconds;
  std::lock_guard<std::mutex> lock(mu_);
  if (lease_ <= milliseconds(0) || !last_answer_ || lease_lost_) return options_.rpc_timeout;
  const auto left =
      std::chrono::duration_cast<milliseconds>(*last_answer_ + lease_ - options_.clock->Now());
  return std::clamp(left, milliseconds(50), options_.rpc_timeout);
}

void WorkerDaemon::EnforceLease() {
  std::chrono::milliseconds lease;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lease_ <= std::chrono::milliseconds(0) || !last_answer_ || lease_lost_) return;
    if (options_.clock->Now() - *last_answer_ < lease_) return;
    lease_lost_ = true;
    lease = lease_;
  }
  const std::vector<RunningTaskInfo> tasks = supervisor_->RunningTasks();
  const std::string why = fmt::format(
      "the coordinator has not answered for {:.1f} s (this worker's lease, "
      "--coordinator-lease-s): it has declared this node DOWN by now, so the task is stopped",
      lease.count() / 1000.0);
  DP_LOG_WARN("{}; stopping {} task(s)", why, tasks.size());
  for (const RunningTaskInfo& task : tasks) {
    AddWorkerLogLine(task.task_id, why);
    Status cancelled = supervisor_->Cancel(task.task_id, why);
    if (!cancelled.ok() && cancelled.code() != StatusCode::kNotFound) {
      DP_LOG_WARN("task {}: cannot stop it: {}", task.task_id, cancelled.ToString());
    }
  }
}

// ---- tasks: the command stream ----

void WorkerDaemon::StreamLoop() {
  SetCurrentThreadName("dp-worker-tasks");
  while (true) {
    std::string node;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !node_id_.empty(); });
      if (stopping_) return;
      node = node_id_;
    }
    grpc::ClientContext context;  // no deadline: the stream lives as long as the registration
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stream_context_ = &context;
    }
    v1::StreamTasksRequest request;
    request.set_node_id(node);
    auto reader = stub_->StreamTasks(&context, request);
    v1::TaskCommand command;
    while (reader->Read(&command)) HandleCommand(command);
    grpc::Status status = reader->Finish();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stream_context_ = nullptr;
    }
    if (AsksToRegisterAgain(context, status)) {
      if (node_id() == node) ForgetRegistration("task stream: " + status.error_message());
    } else if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
      DP_LOG_DEBUG("task stream ended: {}", FromGrpc(status).ToString());
    }
    if (!SleepFor(options_.retry_interval)) return;
  }
}

void WorkerDaemon::CancelTask(const std::string& task_id, const std::string& why) {
  const Status cancelled = supervisor_->Cancel(task_id, why);
  if (!cancelled.ok()) DP_LOG_DEBUG("cancel of task {}: {}", task_id, cancelled.ToString());
}

void WorkerDaemon::HandleCommand(const v1::TaskCommand& command) {
  if (command.has_assign()) {
    HandleAssignment(command.assign());
  } else if (command.has_cancel()) {
    const auto& cancel = command.cancel();
    Status status = supervisor_->Cancel(
        cancel.task_id(), cancel.reason().empty() ? "the coordinator asked" : cancel.reason());
    if (status.ok()) {
      DP_LOG_INFO("task {}: cancel requested ({})", cancel.task_id(),
                  cancel.reason().empty() ? "no reason given" : cancel.reason());
    } else {
      DP_LOG_DEBUG("cancel of task {}: {}", cancel.task_id(), status.ToString());
    }
  }
}

void WorkerDaemon::HandleAssignment(const v1::TaskAssignment& assignment) {
  if (!RememberTask(assignment.task_id())) return;  // a known id is a no-op
  if (assignment.has_profile()) {
    StartProfileTask(assignment);
  } else if (!assignment.has_train()) {
    QueueStartFailure(assignment, "the assignment carries no task this worker knows");
  } else if (!assignment.train().host_task_id().empty()) {
    StartHostedTask(assignment);
  } else {
    StartTrainTask(assignment);
  }
}

bool WorkerDaemon::RememberTask(const std::string& task_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!known_tasks_.insert(task_id).second) return false;
  known_order_.push_back(task_id);
  while (known_order_.size() > 10000) {
    known_tasks_.erase(known_order_.front());
    known_order_.pop_front();
  }
  return true;
}

const LocalDevice* WorkerDaemon::FindDevice(const std::string& name) const {
  for (const auto& d : options_.devices) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

void WorkerDaemon::StartProfileTask(const v1::TaskAssignment& assignment) {
  const auto& p = assignment.profile();
  const LocalDevice* device = FindDevice(p.device());
  if (!device) {
    QueueStartFailure(assignment, "device '" + p.device() + "' is not one of this node's");
    return;
  }
  ProfileTask task;
  task.task_id = assignment.task_id();
  task.job_id = assignment.job_id();
  task.graph_json = p.graph_json();
  task.args = ProfileArgs(p, device->ExecutorDevice());
  task.device = device->ExecutorDevice();
  task.node_device = device->name;
  DP_LOG_INFO("task {} (job {}): profiling {} on {}", task.task_id, task.job_id,
              p.model().empty() ? std::string("an inline graph") : p.model() + "'s graph",
              p.device());
  Status status = supervisor_->StartProfile(task);
  if (!status.ok()) QueueStartFailure(assignment, status.ToString());
}

void WorkerDaemon::StartHostedTask(const v1::TaskAssignment& assignment) {
  const auto& t = assignment.train();
  HostedBackgroundTask hosted;
  hosted.task_id = assignment.task_id();
  hosted.job_id = assignment.job_id();
  hosted.host_task_id = t.host_task_id();
  hosted.host_rank = t.host_rank();
  hosted.background_json = t.background_json();
  hosted.owner = t.owner();
  Status status = supervisor_->StartHosted(hosted);
  if (status.code() == deepool::StatusCode::kNotFound) {
    // The FG rank ended meanwhile: the coordinator requeues the BG job.
    QueueStartFailure(assignment, status.ToString(), /*host_ended=*/true);
  } else if (!status.ok()) {
    QueueStartFailure(assignment, status.ToString());
  } else {
    AddWorkerLogLine(hosted.task_id, "[worker " + options_.name + "] task " + hosted.task_id +
                                         ": runs inside the FG executor of task " +
                                         hosted.host_task_id + " rank " +
                                         std::to_string(hosted.host_rank));
  }
}

void WorkerDaemon::StartTrainTask(const v1::TaskAssignment& assignment) {
  const auto& t = assignment.train();
  StatusOr<HostPort> store = ParseHostPort(t.store_address());
  if (!store.ok()) {
    QueueStartFailure(assignment, "store_address: " + store.status().message());
    return;
  }
  TrainTask task;
  task.task_id = assignment.task_id();
  task.job_id = assignment.job_id();
  task.run_spec_json = t.run_spec_json();
  task.world_size = t.world_size();
  task.store_host = store->host;
  task.store_port = store->port;
  task.timeout_s = static_cast<int>(t.timeout_s());
  task.background = t.background();
  task.owner = t.owner();
  for (const auto& rd : t.ranks()) {
    const LocalDevice* device = FindDevice(rd.device());
    if (!device) {
      QueueStartFailure(assignment, "rank " + std::to_string(rd.rank()) + ": device '" +
                                        rd.device() + "' is not one of this node's");
      return;
    }
    task.ranks.push_back({rd.rank(), device->ExecutorDevice(), device->name});
  }
  DP_LOG_INFO("task {} (job {}): {} rank(s) of {}{}, store {}", task.task_id, task.job_id,
              task.ranks.size(), task.world_size, task.background ? " (background)" : "",
              t.store_address());
  metrics_.OnTrainStarted(task);  // before: its first iteration may come at once
  Status status = supervisor_->StartTrain(task);
  if (!status.ok()) {
    TaskResult refused;
    refused.task_id = task.task_id;
    metrics_.OnTaskFinished(refused);
    QueueStartFailure(assignment, status.ToString());
    return;
  }
  std::string placement;
  for (const auto& r : t.ranks()) {
    if (!placement.empty()) placement += ", ";
    placement.append("rank ").append(std::to_string(r.rank())).append(" on ").append(r.device());
  }
  AddWorkerLogLine(task.task_id, "[worker " + options_.name + "] task " + task.task_id +
                                     ": started " + placement);
}

void WorkerDaemon::AddWorkerLogLine(const std::string& task_id, const std::string& line) {
  v1::LogLine log;
  log.set_rank(-1);
  log.set_line(line);
  log.set_time_ms(options_.clock->WallMillis());
  std::lock_guard<std::mutex> lock(mu_);
  progress_[task_id].logs.push_back(std::move(log));
}

void WorkerDaemon::QueueStartFailure(const v1::TaskAssignment& assignment, const std::string& error,
                                     bool host_ended) {
  DP_LOG_ERROR("task {}: cannot start: {}", assignment.task_id(), error);
  PendingExit exit;
  exit.request.set_task_id(assignment.task_id());
  exit.request.set_outcome(v1::TASK_OUTCOME_FAILED);
  exit.request.set_host_ended(host_ended);
  exit.request.set_error("worker " + options_.name + ": " + error);
  {
    std::lock_guard<std::mutex> lock(mu_);
    exits_.push_back(std::move(exit));
    exit_queued_ = true;
  }
  cv_.notify_all();
}

std::string WorkerDaemon::MetricsText() const {
  return metrics_.Render(static_cast<int>(supervisor_->RunningTasks().size()), !node_id().empty());
}

}  // namespace deepool::worker::daemon
