// WorkerDaemon against a FakeNodeService served in-process on 127.0.0.1:0 with a real gRPC
// channel, and a fake executor script. Waits poll with deadlines.
#include "worker/daemon/worker_daemon.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "deepool/v1/node.grpc.pb.h"
#include "protocol/coordinator_status.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using namespace deepool;
using namespace deepool::worker::daemon;
using namespace std::chrono_literals;

namespace {

constexpr const char* kFakeExecutor = R"SH(#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    --run-spec) spec=$2; shift 2;;
    --rank) rank=$2; shift 2;;
    --store) store=$2; shift 2;;
    *) shift;;
  esac
done
echo "$rank" >> starts.txt
mode=$(cat "$spec")
if [ "$rank" = 0 ] && [ "${store##*:}" = 0 ]; then
  echo '{"event":"store_ready","host":"127.0.0.1","port":45678}'
fi
echo "rank $rank store $store" >&2
case "$mode" in
  ok)
    echo "{\"event\":\"iteration\",\"rank\":$rank,\"iteration\":0,\"loss\":2.5,\"iteration_ms\":5,\"samples_per_s\":80,\"busy_ms\":4,\"idle_ms\":1}"
    if [ "$rank" = 0 ]; then
      echo '{"event":"evaluation","rank":0,"iteration":1,"samples":64,"loss":null,"top1":0.5,"top5":0.75}'
    fi
    echo "{\"event\":\"done\",\"rank\":$rank,\"iterations\":1,\"checkpoint\":null}"
    exit 0;;
  garbled)
    printf 'bad \377 byte\n' >&2
    echo "{\"event\":\"iteration\",\"rank\":$rank,\"iteration\":0,\"loss\":2.5,\"iteration_ms\":5,\"samples_per_s\":80,\"busy_ms\":4,\"idle_ms\":1}"
    echo "{\"event\":\"done\",\"rank\":$rank,\"iterations\":1,\"checkpoint\":null}"
    exit 0;;
  hang)
    echo $$ > "rank-$rank.pid"
    sleep 1000 & wait;;
esac
)SH";

// A profiler that writes its own command line as the profile: what the daemon asked it for.
constexpr const char* kFakeProfiler = R"SH(#!/bin/sh
args="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --output) out=$2; shift 2;;
    *) shift;;
  esac
done
echo "$args" > "$out"
)SH";

class FakeNodeService final : public v1::NodeService::Service {
 public:
  grpc::Status RegisterNode(grpc::ServerContext* context, const v1::RegisterNodeRequest* request,
                            v1::RegisterNodeResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (starting_) return Starting(context);
    if (refuse_registrations_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not now");
    registrations_.push_back(*request);
    known_ = true;
    response->set_node_id("n-" + request->name());
    response->set_heartbeat_interval_ms(50);
    response->set_node_timeout_ms(node_timeout_ms_);
    cv_.notify_all();
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (starting_) return Starting(context);
    if (unreachable_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "link down");
    if (!known_) return UnknownNode(context, request->node_id());
    if (not_found_without_key_) {
      not_found_answers_++;
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "node " + request->node_id() + " is fine");
    }
    heartbeats_++;
    for (auto& c : heartbeat_commands_) *response->add_commands() = c;
    heartbeat_commands_.clear();
    return grpc::Status::OK;
  }
  grpc::Status StreamTasks(grpc::ServerContext* context, const v1::StreamTasksRequest* request,
                           grpc::ServerWriter<v1::TaskCommand>* writer) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!known_) return UnknownNode(context, request->node_id());
    while (!context->IsCancelled() && !shutting_down_ && known_) {
      while (!commands_.empty()) {
        v1::TaskCommand command = commands_.front();
        commands_.pop_front();
        lock.unlock();
        writer->Write(command);
        lock.lock();
      }
      cv_.wait_for(lock, 20ms);
    }
    return grpc::Status::OK;
  }
  grpc::Status ReportProgress(grpc::ServerContext* context,
                              const v1::ReportProgressRequest* request,
                              v1::ReportProgressResponse*) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (silent_reports_) {  // as a coordinator that stopped answering: until the call's deadline
      ++silent_calls_;
      while (!context->IsCancelled() && !shutting_down_) cv_.wait_for(lock, 20ms);
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no answer");
    }
    progress_.push_back(*request);
    cv_.notify_all();
    return grpc::Status::OK;
  }
  grpc::Status ReportTaskExit(grpc::ServerContext*, const v1::ReportTaskExitRequest* request,
                              v1::ReportTaskExitResponse*) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (refuse_exits_ > 0) {
      refuse_exits_--;
      refused_exits_++;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
    }
    exits_.push_back(*request);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  // As the coordinator answers a node it does not know: NOT_FOUND, "register again".
  static grpc::Status UnknownNode(grpc::ServerContext* context, const std::string& node_id) {
    context->AddTrailingMetadata(protocol::kRegisterAgainKey, "1");
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown node " + node_id);
  }

  void Push(const v1::TaskCommand& command) {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.push_back(command);
    cv_.notify_all();
  }
  void PushInHeartbeat(const v1::TaskCommand& command) {
    std::lock_guard<std::mutex> lock(mu_);
    heartbeat_commands_.push_back(command);
  }
  void Forget() {
    std::lock_guard<std::mutex> lock(mu_);
    known_ = false;
    cv_.notify_all();
  }
  // Heartbeats answer NOT_FOUND without the register-again key, as a proxy or another service
  // might: a status whose text even names the node, but not the coordinator's request.
  void AnswerNotFoundWithoutKey() {
    std::lock_guard<std::mutex> lock(mu_);
    not_found_without_key_ = true;
  }
  // Heartbeats fail as across a cut link (other calls still get through).
  void SetUnreachable(bool unreachable) {
    std::lock_guard<std::mutex> lock(mu_);
    unreachable_ = unreachable;
  }
  // Answers registrations and heartbeats as a restarted coordinator still loading its store
  // does (coordinator/startup_server.h), having forgotten the node.
  void SetStarting(bool starting) {
    std::lock_guard<std::mutex> lock(mu_);
    starting_ = starting;
    if (starting) known_ = false;
  }
  // Registrations fail UNAVAILABLE (other calls are answered).
  void RefuseRegistrations(bool refuse) {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_registrations_ = refuse;
  }
  void RefuseExits(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_exits_ = n;
  }
  void Shutdown() {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    cv_.notify_all();
  }
  template <typename Fn>
  auto With(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    return fn(*this);
  }

  std::vector<v1::RegisterNodeRequest> registrations_;
  std::vector<v1::ReportProgressRequest> progress_;
  std::vector<v1::ReportTaskExitRequest> exits_;
  int heartbeats_ = 0;
  int not_found_answers_ = 0;
  int refused_exits_ = 0;
  int64_t node_timeout_ms_ = 0;  // sent at registration; set before the daemon starts
  bool silent_reports_ = false;  // progress reports get no answer (set through With)
  int silent_calls_ = 0;         // such reports received

 private:
  static grpc::Status Starting(grpc::ServerContext* context) {
    context->AddTrailingMetadata(protocol::kCoordinatorStartingKey, "1");
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is starting");
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool known_ = false;
  bool shutting_down_ = false;
  bool unreachable_ = false;
  bool starting_ = false;
  bool not_found_without_key_ = false;
  bool refuse_registrations_ = false;
  int refuse_exits_ = 0;
  std::deque<v1::TaskCommand> commands_;
  std::vector<v1::TaskCommand> heartbeat_commands_;
};

bool PollUntil(const std::function<bool()>& condition) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

struct Fixture {
  deepool::testing::TempDir dir;  // first, so removed after everything below is gone
  FakeNodeService service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<WorkerDaemon> daemon;

  // node_timeout_ms: what the fake coordinator says at registration (0: nothing, no lease).
  explicit Fixture(int64_t node_timeout_ms = 0,
                   std::optional<std::chrono::milliseconds> coordinator_lease = std::nullopt,
                   std::chrono::milliseconds report_interval = 20ms) {
    service.node_timeout_ms_ = node_timeout_ms;
    std::string executor = dir.File("fake-executor");
    std::ofstream(executor) << kFakeExecutor;
    fs::permissions(executor, fs::perms::owner_all);

    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(port > 0);

    WorkerOptions options;
    options.name = "w1";
    options.address = "127.0.0.1";
    options.devices = {{"cpu:0", "cpu", 0, "cpu", "cpu", 1 << 30},
                       {"cpu:1", "cpu", 1, "cpu", "cpu", 1 << 30}};
    options.retry_interval = 50ms;
    options.report_interval = report_interval;
    options.coordinator_lease = coordinator_lease;
    SupervisorOptions supervisor;
    supervisor.executor_path = executor;
    supervisor.profiler_path = dir.File("fake-profiler");
    std::ofstream(supervisor.profiler_path) << kFakeProfiler;
    fs::permissions(supervisor.profiler_path, fs::perms::owner_all);
    supervisor.work_dir = dir.File("work");
    supervisor.kill_grace = 500ms;
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials());
    daemon = std::make_unique<WorkerDaemon>(options, v1::NodeService::NewStub(channel), supervisor);
    daemon->Start();
    REQUIRE(PollUntil([&] { return daemon->node_id() == "n-w1"; }));
  }
  ~Fixture() {
    daemon->Stop();
    service.Shutdown();
    server->Shutdown(std::chrono::system_clock::now() + 2s);
  }

  static v1::TaskCommand Train(const std::string& id, const std::string& mode,
                               std::vector<std::pair<int, std::string>> ranks, int world,
                               const std::string& store) {
    v1::TaskCommand command;
    auto* a = command.mutable_assign();
    a->set_task_id(id);
    a->set_job_id("job-" + id);
    a->mutable_train()->set_run_spec_json(mode);
    a->mutable_train()->set_world_size(world);
    a->mutable_train()->set_store_address(store);
    for (auto& [rank, device] : ranks) {
      auto* rd = a->mutable_train()->add_ranks();
      rd->set_rank(rank);
      rd->set_device(device);
    }
    return command;
  }
  std::optional<v1::ReportTaskExitRequest> ExitOf(const std::string& task_id) {
    return service.With([&](FakeNodeService& s) -> std::optional<v1::ReportTaskExitRequest> {
      for (const auto& e : s.exits_) {
        if (e.task_id() == task_id) return e;
      }
      return std::nullopt;
    });
  }
  int ExitCount(const std::string& task_id) {
    return service.With([&](FakeNodeService& s) {
      int n = 0;
      for (const auto& e : s.exits_) n += e.task_id() == task_id;
      return n;
    });
  }
  int Heartbeats() {
    return service.With([](FakeNodeService& s) { return s.heartbeats_; });
  }
  // Whether a log line of the task's progress reports contains `text`.
  bool Logged(const std::string& task_id, const std::string& text) {
    return service.With([&](FakeNodeService& s) {
      for (const auto& p : s.progress_) {
        for (const auto& l : p.logs()) {
          if (p.task_id() == task_id && l.line().find(text) != std::string::npos) return true;
        }
      }
      return false;
    });
  }
  int Starts(const std::string& task_id) {
    std::ifstream in(dir.File("work/tasks/" + task_id + "/starts.txt"));
    int n = 0;
    std::string line;
    while (std::getline(in, line)) ++n;
    return n;
  }
};

}  // namespace

TEST_CASE("the daemon registers its devices and runs a TRAIN task to a reported exit",
          "[worker][daemon]") {
  Fixture f;
  auto registration = f.service.With([](FakeNodeService& s) { return s.registrations_.at(0); });
  CHECK(registration.name() == "w1");
  REQUIRE(registration.devices_size() == 2);
  CHECK(registration.devices(1).device() == "cpu:1");
  CHECK(registration.devices(1).type() == "cpu");

  auto command = Fixture::Train("t1", "ok", {{0, "cpu:0"}, {1, "cpu:1"}}, 2, "127.0.0.1:0");
  f.service.Push(command);
  f.service.Push(command);  // at-least-once delivery: a repeat is a no-op
  REQUIRE(PollUntil([&] { return f.ExitOf("t1").has_value(); }));
  auto exit = *f.ExitOf("t1");
  CHECK(exit.outcome() == v1::TASK_OUTCOME_SUCCEEDED);
  CHECK(exit.node_id() == "n-w1");
  CHECK(exit.ranks_size() == 2);
  CHECK(f.Starts("t1") == 2);
  // Progress: the store address, both ranks' iterations, log lines and rank 0's evaluation.
  REQUIRE(PollUntil([&] {
    return f.service.With([](FakeNodeService& s) {
      bool store = false;
      int iterations = 0, logs = 0, evaluations = 0;
      for (const auto& p : s.progress_) {
        store |= p.store_ready() == "127.0.0.1:45678";
        iterations += p.iterations_size();
        logs += p.logs_size();
        evaluations += p.evaluations_size();
      }
      return store && iterations == 2 && logs >= 2 && evaluations == 1;
    });
  }));
  const v1::Evaluation evaluation = f.service.With([](FakeNodeService& s) {
    for (const auto& p : s.progress_) {
      if (p.evaluations_size() > 0) return p.evaluations(0);
    }
    return v1::Evaluation();
  });
  CHECK(evaluation.iteration() == 1);
  CHECK(evaluation.samples() == 64);
  CHECK_FALSE(evaluation.has_loss());
  CHECK(evaluation.top1() == 0.5);
  CHECK(evaluation.top5() == 0.75);
  CHECK(evaluation.time_ms() > 0);
  // Heartbeats keep going; a repeat in a heartbeat reply is a no-op too.
  f.service.PushInHeartbeat(command);
  int beats = f.service.With([](FakeNodeService& s) { return s.heartbeats_; });
  REQUIRE(PollUntil([&] {
    return f.service.With([](FakeNodeService& s) { return s.heartbeats_; }) > beats + 2;
  }));
  CHECK(f.Starts("t1") == 2);
  CHECK(f.ExitCount("t1") == 1);
}

TEST_CASE("a task's output that is not UTF-8 is reported, repaired, with its store and exit",
          "[worker][daemon]") {
  // Protobuf refuses a string that is not UTF-8, and the coordinator refused the whole report:
  // the store address and the iterations with it, or the task's exit, were lost.
  Fixture f;
  f.service.Push(Fixture::Train("t1", "garbled", {{0, "cpu:0"}}, 1, "127.0.0.1:0"));
  REQUIRE(PollUntil([&] { return f.ExitOf("t1").has_value(); }));
  const v1::ReportTaskExitRequest exit = *f.ExitOf("t1");
  CHECK(exit.outcome() == v1::TASK_OUTCOME_SUCCEEDED);
  bool kept_in_exit = false;
  for (const std::string& line : exit.last_log_lines()) {
    kept_in_exit |= line == "bad \xEF\xBF\xBD byte";
  }
  CHECK(kept_in_exit);
  REQUIRE(PollUntil([&] { return f.Logged("t1", "bad \xEF\xBF\xBD byte"); }));
  CHECK(f.service.With([](FakeNodeService& s) {
    bool store = false;
    for (const auto& p : s.progress_) store |= p.store_ready() == "127.0.0.1:45678";
    return store;
  }));
}

TEST_CASE("a PROFILE task runs the profiler for its device, batches and the job's optimizer",
          "[worker][daemon]") {
  Fixture f;
  v1::TaskCommand command;
  v1::TaskAssignment* assign = command.mutable_assign();
  assign->set_task_id("p1");
  assign->set_job_id("job-p1");
  v1::ProfileTask* profile = assign->mutable_profile();
  profile->set_model("mlp");
  profile->set_device("cpu:1");
  profile->set_device_type("cpu");
  profile->add_batch_sizes(4);
  profile->add_batch_sizes(8);
  profile->mutable_optimizer()->set_name("adam");
  profile->mutable_optimizer()->set_momentum(0);
  profile->mutable_optimizer()->set_weight_decay(0.01);
  f.service.Push(command);
  REQUIRE(PollUntil([&] { return f.ExitOf("p1").has_value(); }));
  const v1::ReportTaskExitRequest exit = *f.ExitOf("p1");
  CHECK(exit.outcome() == v1::TASK_OUTCOME_SUCCEEDED);
  const std::string args = exit.result_json();
  CHECK_THAT(args, Catch::StartsWith("--model mlp --device cpu --device-name cpu"));
  CHECK_THAT(args, Catch::Contains("--batch-sizes 4,8"));
  CHECK_THAT(args, Catch::Contains("--optimizer adam --momentum 0 --weight-decay 0.01"));
  // Without an optimizer (a coordinator from before it was sent) the profiler's default holds.
  profile->clear_optimizer();
  assign->set_task_id("p2");
  f.service.Push(command);
  REQUIRE(PollUntil([&] { return f.ExitOf("p2").has_value(); }));
  CHECK_THAT(f.ExitOf("p2")->result_json(), !Catch::Contains("--optimizer"));
  CHECK_THAT(f.ExitOf("p2")->result_json(), !Catch::Contains("--precision"));
  // A 16-bit job's profile is measured at its precision.
  profile->set_precision("bf16");
  assign->set_task_id("p3");
  f.service.Push(command);
  REQUIRE(PollUntil([&] { return f.ExitOf("p3").has_value(); }));
  CHECK_THAT(f.ExitOf("p3")->result_json(), Catch::Contains("--precision bf16 --output"));
}

TEST_CASE("cancel commands kill the task and report CANCELLED", "[worker][daemon]") {
  Fixture f;
  f.service.Push(Fixture::Train("t2", "hang", {{0, "cpu:0"}}, 1, "127.0.0.1:29500"));
  REQUIRE(PollUntil([&] { return f.daemon->supervisor().IsRunning("t2"); }));
  v1::TaskCommand cancel;
  cancel.mutable_cancel()->set_task_id("t2");
  cancel.mutable_cancel()->set_reason("user asked");
  f.service.Push(cancel);
  REQUIRE(PollUntil([&] { return f.ExitOf("t2").has_value(); }));
  CHECK(f.ExitOf("t2")->outcome() == v1::TASK_OUTCOME_CANCELLED);
}

TEST_CASE("a stop kills the executors within their kill grace, whatever the coordinator does",
          "[worker][daemon]") {
  Fixture f;
  f.service.With([](FakeNodeService& s) { return s.silent_reports_ = true; });
  f.service.Push(Fixture::Train("t9", "hang", {{0, "cpu:0"}}, 1, "127.0.0.1:29500"));
  const std::string pid_file = f.dir.File("work/tasks/t9/rank-0.pid");
  pid_t pid = 0;
  REQUIRE(PollUntil([&] {
    std::ifstream in(pid_file);
    return static_cast<bool>(in >> pid) && pid > 0;
  }));
  // A progress report waits for its answer (up to its 5 s deadline) when the stop comes.
  REQUIRE(PollUntil(
      [&] { return f.service.With([](FakeNodeService& s) { return s.silent_calls_; }) > 0; }));
  const auto start = std::chrono::steady_clock::now();
  auto stopped = std::async(std::launch::async, [&] { f.daemon->Stop(); });
  REQUIRE(PollUntil([&] { return ::kill(pid, 0) != 0; }));
  // Within the kill grace (500 ms) and the reaping, not after the report's deadline.
  CHECK(std::chrono::steady_clock::now() - start < 3s);
  stopped.get();
}

TEST_CASE("an assignment for a device the node does not have fails with a reason",
          "[worker][daemon]") {
  Fixture f;
  f.service.Push(Fixture::Train("t3", "ok", {{0, "cuda:3"}}, 1, "127.0.0.1:29500"));
  REQUIRE(PollUntil([&] { return f.ExitOf("t3").has_value(); }));
  auto exit = *f.ExitOf("t3");
  CHECK(exit.outcome() == v1::TASK_OUTCOME_FAILED);
  CHECK(exit.error().find("cuda:3") != std::string::npos);
  f.service.Push(Fixture::Train("t4", "ok", {{0, "cpu:0"}}, 1, "no-port"));
  REQUIRE(PollUntil([&] { return f.ExitOf("t4").has_value(); }));
  CHECK(f.ExitOf("t4")->error().find("store_address") != std::string::npos);
}

TEST_CASE("when the coordinator forgets the node, the daemon registers again with its tasks",
          "[worker][daemon]") {
  Fixture f;
  f.service.Push(Fixture::Train("t5", "hang", {{0, "cpu:0"}, {1, "cpu:1"}}, 2, "127.0.0.1:29500"));
  REQUIRE(PollUntil([&] { return f.daemon->supervisor().IsRunning("t5"); }));
  f.service.Forget();
  REQUIRE(PollUntil([&] { return f.daemon->registrations() >= 2; }));
  auto again = f.service.With([](FakeNodeService& s) { return s.registrations_.back(); });
  REQUIRE(again.running_tasks_size() == 1);
  CHECK(again.running_tasks(0).task_id() == "t5");
  CHECK(again.running_tasks(0).job_id() == "job-t5");
  CHECK(again.running_tasks(0).ranks_size() == 2);
  CHECK(f.daemon->supervisor().IsRunning("t5"));  // the executors were left alone
}

TEST_CASE("only the coordinator's register-again key makes the daemon register again",
          "[worker][daemon]") {
  Fixture f;
  f.service.AnswerNotFoundWithoutKey();
  REQUIRE(PollUntil([&] {
    return f.service.With([](FakeNodeService& s) { return s.not_found_answers_ >= 5; });
  }));
  CHECK(f.daemon->registrations() == 1);
  CHECK(f.service.With([](FakeNodeService& s) { return s.registrations_.size(); }) == 1);
}

TEST_CASE(
    "a task that ended while its exit could not be reported is listed when the node registers",
    "[worker][daemon]") {
  Fixture f;
  f.service.RefuseExits(1000);  // the coordinator is away (restarting) when the task ends
  f.service.Push(Fixture::Train("t12", "ok", {{0, "cpu:0"}}, 1, "127.0.0.1:29500"));
  // Ended, and its exit tried (and refused).
  REQUIRE(PollUntil([&] { return f.service.With([](auto& s) { return s.refused_exits_ > 0; }); }));
  f.service.Forget();  // back, it no longer knows the node: the worker registers again
  REQUIRE(PollUntil([&] { return f.daemon->registrations() >= 2; }));
  auto again = f.service.With([](FakeNodeService& s) { return s.registrations_.back(); });
  REQUIRE(again.running_tasks_size() == 1);  // not running, but not lost: its exit follows
  CHECK(again.running_tasks(0).task_id() == "t12");
  CHECK(again.running_tasks(0).ranks_size() == 0);
  f.service.RefuseExits(0);
  REQUIRE(PollUntil([&] { return f.ExitOf("t12").has_value(); }));
  CHECK(f.ExitOf("t12")->outcome() == v1::TASK_OUTCOME_SUCCEEDED);
}

// A task's end frees its devices: the coordinator hears of it at once, with the task's last
// progress before it, not when the progress batch is next due.
TEST_CASE("a task's exit is reported without waiting for the report interval", "[worker][daemon]") {
  Fixture f(0, std::nullopt, /*report_interval=*/1h);
  f.service.Push(Fixture::Train("t13", "ok", {{0, "cpu:0"}}, 1, "127.0.0.1:29500"));
  REQUIRE(PollUntil([&] { return f.ExitOf("t13").has_value(); }));
  CHECK(f.ExitOf("t13")->outcome() == v1::TASK_OUTCOME_SUCCEEDED);
  CHECK(f.service.With([](FakeNodeService& s) {
    for (const auto& p : s.progress_) {
      if (p.task_id() == "t13" && p.iterations_size() > 0) return true;
    }
    return false;
  }));
}

TEST_CASE("task exits are retried until the coordinator takes them", "[worker][daemon]") {
  Fixture f;
  f.service.RefuseExits(3);
  f.service.Push(Fixture::Train("t6", "ok", {{0, "cpu:0"}}, 1, "127.0.0.1:29500"));
  REQUIRE(PollUntil([&] { return f.ExitOf("t6").has_value(); }));
  CHECK(f.ExitOf("t6")->outcome() == v1::TASK_OUTCOME_SUCCEEDED);
  CHECK(f.ExitCount("t6") == 1);
}

TEST_CASE("a worker the coordinator stops answering stops its tasks when its lease runs out",
          "[worker][daemon]") {
  // Node timeout 600 ms, heartbeats every 50 ms: the lease is 550 ms.
  Fixture f(600);
  f.service.Push(Fixture::Train("t7", "hang", {{0, "cpu:0"}}, 1, "127.0.0.1:29500"));
  REQUIRE(PollUntil([&] { return f.daemon->supervisor().IsRunning("t7"); }));
  // Answered heartbeats keep it: the task outlives many leases' worth of them.
  const int beats = f.Heartbeats();
  REQUIRE(PollUntil([&] { return f.Heartbeats() > beats + 30; }));
  CHECK(f.daemon->supervisor().IsRunning("t7"));

  const auto cut = std::chrono::steady_clock::now();
  f.service.SetUnreachable(true);
  REQUIRE(PollUntil([&] { return f.ExitOf("t7").has_value(); }));
  const auto stopped_after = std::chrono::steady_clock::now() - cut;
  CHECK(f.ExitOf("t7")->outcome() == v1::TASK_OUTCOME_CANCELLED);
  CHECK(stopped_after >= 450ms);  // the lease ran from the last answer, at most 50 ms earlier
  CHECK(stopped_after < 600ms + 500ms);  // within the lease and the kill grace
  REQUIRE(PollUntil([&] { return f.Logged("t7", "has not answered for"); }));

  // Answers again: a new task runs, and is not stopped by the outage that is over.
  f.service.SetUnreachable(false);
  f.service.Push(Fixture::Train("t8", "hang", {{0, "cpu:0"}}, 1, "127.0.0.1:29500"));
  REQUIRE(PollUntil([&] { return f.daemon->supervisor().IsRunning("t8"); }));
  const int again = f.Heartbeats();
  REQUIRE(PollUntil([&] { return f.Heartbeats() > again + 30; }));
  CHECK(f.daemon->supervisor().IsRunning("t8"));
}

TEST_CASE("a coordinator that answers 'starting' keeps the lease: tasks run on, then re-register",
          "[worker][daemon]") {
  // Node timeout 600 ms, heartbeats every 50 ms: the lease is 550 ms.
  Fixture f(600);
  f.service.Push(Fixture::Train("t10", "hang", {{0, "cpu:0"}}, 1, "127.0.0.1:29500"));
  REQUIRE(PollUntil([&] { return f.daemon->supervisor().IsRunning("t10"); }));
  const size_t registered = f.service.With([](auto& s) { return s.registrations_.size(); });
  f.service.SetStarting(true);
  // A fixed wait for a thing that must not happen: about four leases of "starting" answers.
  const int beats = f.Heartbeats();
  std::this_thread::sleep_for(2s);
  CHECK(f.Heartbeats() == beats);  // none reached the (forgetful) coordinator's handler
  CHECK(f.daemon->supervisor().IsRunning("t10"));
  CHECK_FALSE(f.ExitOf("t10").has_value());
  // Started: the worker registers again, listing the task it kept.
  f.service.SetStarting(false);
  REQUIRE(PollUntil([&] {
    return f.service.With([](auto& s) { return s.registrations_.size(); }) > registered;
  }));
  v1::RegisterNodeRequest again = f.service.With([](auto& s) { return s.registrations_.back(); });
  REQUIRE(again.running_tasks_size() == 1);
  CHECK(again.running_tasks(0).task_id() == "t10");
  CHECK(f.daemon->supervisor().IsRunning("t10"));
}

TEST_CASE("with the lease off, tasks run on through a coordinator outage", "[worker][daemon]") {
  Fixture f(600, 0ms);
  f.service.Push(Fixture::Train("t9", "hang", {{0, "cpu:0"}}, 1, "127.0.0.1:29500"));
  REQUIRE(PollUntil([&] { return f.daemon->supervisor().IsRunning("t9"); }));
  f.service.SetUnreachable(true);
  // A fixed wait for a thing that must not happen: three times what the default lease would be.
  std::this_thread::sleep_for(1800ms);
  CHECK(f.daemon->supervisor().IsRunning("t9"));
  CHECK_FALSE(f.ExitOf("t9").has_value());
}

TEST_CASE("iterations held while the worker cannot register are bounded, the newest kept",
          "[worker][daemon]") {
  Fixture f;
  f.service.RefuseRegistrations(true);
  f.service.Forget();  // the next heartbeat asks to register again, which fails
  REQUIRE(PollUntil([&] { return f.daemon->node_id().empty(); }));
  constexpr int kHeld = 3000;
  for (int i = 0; i < kHeld; ++i) {
    IterationReport report;
    report.iteration = i;
    f.daemon->OnIteration("t-held", report);
  }
  f.service.RefuseRegistrations(false);
  std::vector<int64_t> reported;
  REQUIRE(PollUntil([&] {
    reported = f.service.With([](FakeNodeService& s) {
      std::vector<int64_t> iterations;
      for (const auto& p : s.progress_) {
        if (p.task_id() != "t-held") continue;
        for (const auto& it : p.iterations()) iterations.push_back(it.iteration());
      }
      return iterations;
    });
    return !reported.empty();
  }));
  CHECK(reported.size() == 1000);
  CHECK(reported.back() == kHeld - 1);
}
