// ExecutorSupervisor against a fake executor: a shell script written by the test
// that speaks the executor's stdout contract. Real processes, no sleeps for correctness: every
// wait polls with a deadline.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "common/process_watch.h"
#include "common/subprocess.h"
#include "tests/temp_dir.h"
#include "worker/daemon/executor_supervisor.h"

namespace fs = std::filesystem;
using namespace deepool::worker::daemon;
using namespace std::chrono_literals;

namespace {

using deepool::testing::TempDir;

// The run spec's text selects the fake executor's behaviour.
constexpr const char* kFakeExecutor = R"SH(#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    --run-spec) spec=$2; shift 2;;
    --rank) rank=$2; shift 2;;
    --world-size) world=$2; shift 2;;
    --store) store=$2; shift 2;;
    --device) device=$2; shift 2;;
    *) shift;;
  esac
done
mode=$(cat "$spec")
port=${store##*:}
if [ "$rank" = 0 ] && [ "$port" = 0 ]; then
  echo '{"event":"store_ready","host":"127.0.0.1","port":45678}'
fi
echo "rank $rank of $world on $device store $store" >&2
case "$mode" in
  ok)
    for i in 0 1 2; do
      echo "{\"event\":\"iteration\",\"rank\":$rank,\"iteration\":$i,\"loss\":1.5,\"iteration_ms\":10,\"samples_per_s\":100,\"busy_ms\":8,\"idle_ms\":2}"
    done
    if [ "$rank" = 0 ]; then
      echo '{"event":"evaluation","rank":0,"iteration":3,"samples":800,"loss":0.52,"top1":0.812,"top5":0.99}'
    fi
    echo "{\"event\":\"done\",\"rank\":$rank,\"iterations\":3,\"checkpoint\":\"/tmp/ckpt-$rank.pt\",\"checkpoint_ms\":25}"
    exit 0;;
  crash1)
    if [ "$rank" = 1 ]; then
      # Crash only once the other ranks run their children, so the test can see them killed.
      while [ ! -s sleeper-0.pid ] || [ ! -s sleeper-2.pid ]; do sleep 0.05; done
      echo "boom: simulated failure" >&2; kill -9 $$
    fi
    sleep 1000 & echo $! > "sleeper-$rank.pid"; wait;;
  error)
    echo "{\"event\":\"error\",\"rank\":$rank,\"message\":\"plan: layer fc missing\"}"
    exit 3;;
  nodone)
    exit 0;;
  hang)
    sleep 1000 & echo $! > "sleeper-$rank.pid"; wait;;
  host)
    # A FG rank hosting a BG job: the attached job runs to its end, then the rank finishes.
    while read -r line; do
      case "$line" in
        *attach_background*)
          echo '{"event":"background","job_id":"bg-1","iterations":1,"samples_per_s":50,"loss":2.0}'
          # The BG job ends only when the test says so, so its checks run while it is attached.
          while [ ! -e release-bg ]; do sleep 0.02; done
          echo '{"event":"background_done","job_id":"bg-1","status":"ok","iterations":2,"samples_per_s":55,"loss":1.5,"message":""}'
          break;;
      esac
    done
    echo "{\"event\":\"done\",\"rank\":$rank,\"iterations\":3,\"checkpoint\":null}"
    exit 0;;
  host_ends)
    # The FG rank finishes right after the attach, before the BG job reports its end.
    while read -r line; do case "$line" in *attach_background*) break;; esac; done
    echo "{\"event\":\"done\",\"rank\":$rank,\"iterations\":3,\"checkpoint\":null}"
    exit 0;;
  host_detach)
    while read -r line; do
      case "$line" in
        *detach_background*bg-1*)
          echo '{"event":"background_done","job_id":"bg-1","status":"detached","iterations":0,"samples_per_s":0,"loss":null,"message":""}'
          break;;
      esac
    done
    echo "{\"event\":\"done\",\"rank\":$rank,\"iterations\":3,\"checkpoint\":null}"
    exit 0;;
  stubborn)
    trap '' TERM
    echo $$ > "stubborn-$rank.pid"
    echo "ignoring SIGTERM" >&2
    while true; do sleep 1; done;;
esac
)SH";

std::string WriteScript(const std::string& dir, const std::string& name, const char* text) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

// Records what the supervisor reports; waits poll a condition with a deadline.
class RecordingListener : public TaskListener {
 public:
  void OnStoreReady(const std::string& task_id, const std::string& host, int port) override {
    std::lock_guard<std::mutex> lock(mu_);
    store_ready_[task_id] = host + ":" + std::to_string(port);
    cv_.notify_all();
  }
  void OnIteration(const std::string& task_id, const IterationReport& report) override {
    std::lock_guard<std::mutex> lock(mu_);
    iterations_[task_id].push_back(report);
    cv_.notify_all();
  }
  void OnEvaluation(const std::string& task_id,
                    const deepool::protocol::EvaluationEvent& event) override {
    std::lock_guard<std::mutex> lock(mu_);
    evaluations_[task_id].push_back(event);
    cv_.notify_all();
  }
  void OnLogLine(const std::string& task_id, int rank, const std::string& line) override {
    std::lock_guard<std::mutex> lock(mu_);
    logs_[task_id].push_back(std::to_string(rank) + "|" + line);
    cv_.notify_all();
  }
  void OnTaskFinished(const TaskResult& result) override {
    std::lock_guard<std::mutex> lock(mu_);
    finished_count_[result.task_id]++;
    results_[result.task_id] = result;
    cv_.notify_all();
  }

  TaskResult WaitFinished(const std::string& task_id) {
    std::unique_lock<std::mutex> lock(mu_);
    bool done = cv_.wait_for(lock, 30s, [&] { return results_.count(task_id) > 0; });
    REQUIRE(done);
    return results_[task_id];
  }
  std::vector<IterationReport> Iterations(const std::string& task_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return iterations_[task_id];
  }
  std::vector<deepool::protocol::EvaluationEvent> Evaluations(const std::string& task_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return evaluations_[task_id];
  }
  std::vector<std::string> Logs(const std::string& task_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return logs_[task_id];
  }
  std::string StoreReady(const std::string& task_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return store_ready_[task_id];
  }
  int FinishedCount(const std::string& task_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_count_[task_id];
  }
  bool WaitForLog(const std::string& task_id, const std::string& needle) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 30s, [&] {
      for (const auto& l : logs_[task_id]) {
        if (l.find(needle) != std::string::npos) return true;
      }
      return false;
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> store_ready_;
  std::map<std::string, std::vector<IterationReport>> iterations_;
  std::map<std::string, std::vector<deepool::protocol::EvaluationEvent>> evaluations_;
  std::map<std::string, std::vector<std::string>> logs_;
  std::map<std::string, TaskResult> results_;
  std::map<std::string, int> finished_count_;
};

// Gone, or a zombie waiting for a reaper: either way it no longer runs.
bool ProcessGone(pid_t pid) {
  return deepool::ReadProcessRunState(pid) == deepool::ProcessRunState::kGone;
}

bool WaitUntil(const std::function<bool()>& condition) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

pid_t ReadPidFile(const std::string& path) {
  pid_t pid = 0;
  REQUIRE(WaitUntil([&] {
    std::ifstream in(path);
    return static_cast<bool>(in >> pid) && pid > 0;
  }));
  return pid;
}

struct Fixture {
  TempDir dir;
  RecordingListener listener;
  std::unique_ptr<ExecutorSupervisor> supervisor;

  explicit Fixture(std::chrono::milliseconds grace = 3000ms) {
    SupervisorOptions options;
    options.executor_path = WriteScript(dir.path(), "fake-executor", kFakeExecutor);
    options.profiler_path = WriteScript(dir.path(), "fake-profile",
                                        "#!/bin/sh\necho measuring >&2\n"
                                        "echo '{\"format\":\"deepool.profile\"}' > \"$2\"\n");
    options.work_dir = dir.path() + "/work";
    options.log_tail_lines = 5;
    options.kill_grace = grace;
    supervisor = std::make_unique<ExecutorSupervisor>(options, &listener);
  }

  TrainTask Train(const std::string& id, const std::string& mode, std::vector<int> ranks, int world,
                  int port = 29500) {
    TrainTask task;
    task.task_id = id;
    task.job_id = "job-" + id;
    task.run_spec_json = mode;
    task.world_size = world;
    task.store_host = "127.0.0.1";
    task.store_port = port;
    for (int r : ranks) task.ranks.push_back({r, "cpu", "cpu:" + std::to_string(r)});
    return task;
  }
  std::string TaskDir(const std::string& id) { return dir.path() + "/work/tasks/" + id; }
};

}  // namespace

TEST_CASE("a TRAIN task runs one executor per rank and reports success once",
          "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("t1", "ok", {0, 1}, 2)).ok());
  TaskResult result = f.listener.WaitFinished("t1");
  CHECK(result.succeeded);
  CHECK_FALSE(result.cancelled);
  CHECK(result.job_id == "job-t1");
  CHECK(result.iterations == 3);
  CHECK(result.checkpoint == "/tmp/ckpt-0.pt");
  CHECK(result.checkpoint_seconds == std::vector<double>{0.025, 0.025});  // each rank's write
  REQUIRE(result.ranks.size() == 2);
  CHECK(result.ranks[0].exit_code == 0);
  CHECK(result.ranks[1].rank == 1);
  auto iterations = f.listener.Iterations("t1");
  CHECK(iterations.size() == 6);
  REQUIRE_FALSE(iterations.empty());
  CHECK(iterations[0].loss.has_value());
  CHECK(iterations[0].samples_per_s == 100);
  CHECK(iterations[0].idle_ms == 2);
  // Rank 0's evaluation line is an event, not a log line.
  auto evaluations = f.listener.Evaluations("t1");
  REQUIRE(evaluations.size() == 1);
  CHECK(evaluations[0].iteration == 3);
  CHECK(evaluations[0].samples == 800);
  CHECK(evaluations[0].loss == 0.52);
  CHECK(evaluations[0].top1 == 0.812);
  CHECK(evaluations[0].top5 == 0.99);
  for (const std::string& log : f.listener.Logs("t1")) {
    CHECK(log.find("evaluation") == std::string::npos);
  }
  // The run spec was written for the executors, and each rank's log kept in its own file.
  std::ifstream spec(f.TaskDir("t1") + "/run.json");
  std::string text((std::istreambuf_iterator<char>(spec)), std::istreambuf_iterator<char>());
  CHECK(text == "ok");
  std::ifstream log(f.TaskDir("t1") + "/rank-1.log");
  std::string line;
  std::getline(log, line);
  CHECK(line == "rank 1 of 2 on cpu store 127.0.0.1:29500");
  CHECK(f.listener.FinishedCount("t1") == 1);
  CHECK_FALSE(f.supervisor->IsRunning("t1"));
}

TEST_CASE("a task id run again (after a worker restart) starts with fresh rank logs",
          "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("t1", "ok", {0}, 1)).ok());
  REQUIRE(f.listener.WaitFinished("t1").succeeded);
  // A new worker on the same work dir is sent the same task again.
  f.supervisor.reset();
  SupervisorOptions options;
  options.executor_path = f.dir.path() + "/fake-executor";
  options.work_dir = f.dir.path() + "/work";
  RecordingListener listener;
  ExecutorSupervisor again(options, &listener);
  REQUIRE(again.StartTrain(f.Train("t1", "ok", {0}, 1)).ok());
  REQUIRE(listener.WaitFinished("t1").succeeded);
  std::ifstream log(f.TaskDir("t1") + "/rank-0.log");
  int starts = 0;
  for (std::string line; std::getline(log, line);) starts += line.rfind("rank 0 of", 0) == 0;
  CHECK(starts == 1);
}

TEST_CASE("an IPv6 store address reaches the executors bracketed", "[worker][supervisor]") {
  Fixture f;
  TrainTask task = f.Train("t6", "ok", {1}, 2);
  task.store_host = "::1";
  REQUIRE(f.supervisor->StartTrain(task).ok());
  CHECK(f.listener.WaitFinished("t6").succeeded);
  std::ifstream log(f.TaskDir("t6") + "/rank-1.log");
  std::string line;
  std::getline(log, line);
  CHECK(line == "rank 1 of 2 on cpu store [::1]:29500");
}

TEST_CASE("with store port 0, rank 0 starts first and the others get its port",
          "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("t2", "ok", {0, 1, 2}, 3, /*port=*/0)).ok());
  TaskResult result = f.listener.WaitFinished("t2");
  CHECK(result.succeeded);
  CHECK(f.listener.StoreReady("t2") == "127.0.0.1:45678");
  std::ifstream log(f.TaskDir("t2") + "/rank-2.log");
  std::string line;
  std::getline(log, line);
  CHECK(line == "rank 2 of 3 on cpu store 127.0.0.1:45678");
}

TEST_CASE("ranks without rank 0 wait for SetStoreAddress", "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("t3", "ok", {2, 3}, 4, /*port=*/0)).ok());
  CHECK(f.supervisor->IsRunning("t3"));
  CHECK(f.listener.Logs("t3").empty());
  auto running = f.supervisor->RunningTasks();
  REQUIRE(running.size() == 1);
  CHECK(running[0].ranks == std::vector<int>{2, 3});
  CHECK(f.supervisor->SetStoreAddress("t3", "10.0.0.5", 0).code() ==
        deepool::StatusCode::kInvalidArgument);
  REQUIRE(f.supervisor->SetStoreAddress("t3", "10.0.0.5", 31000).ok());
  TaskResult result = f.listener.WaitFinished("t3");
  CHECK(result.succeeded);
  CHECK(f.listener.WaitForLog("t3", "rank 3 of 4 on cpu store 10.0.0.5:31000"));
}

TEST_CASE("a crashing rank fails its task, stops the other ranks, and the supervisor carries on",
          "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("t4", "crash1", {0, 1, 2}, 3)).ok());
  TaskResult result = f.listener.WaitFinished("t4");
  CHECK_FALSE(result.succeeded);
  CHECK_FALSE(result.cancelled);
  CHECK(result.message.find("rank 1: killed by signal 9") == 0);
  REQUIRE_FALSE(result.last_log_lines.empty());
  CHECK(result.last_log_lines.back() == "boom: simulated failure");
  // The surviving ranks' background children were killed with their process groups.
  for (int rank : {0, 2}) {
    pid_t sleeper = ReadPidFile(f.TaskDir("t4") + "/sleeper-" + std::to_string(rank) + ".pid");
    CHECK(WaitUntil([&] { return ProcessGone(sleeper); }));
  }
  // Still usable afterwards.
  REQUIRE(f.supervisor->StartTrain(f.Train("t4b", "ok", {0}, 1)).ok());
  CHECK(f.listener.WaitFinished("t4b").succeeded);
}

TEST_CASE("an executor's error event and exit without done are failures", "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("t5", "error", {0}, 1)).ok());
  TaskResult result = f.listener.WaitFinished("t5");
  CHECK_FALSE(result.succeeded);
  CHECK(result.message == "rank 0: exit code 3: plan: layer fc missing");
  REQUIRE(result.ranks.size() == 1);
  CHECK(result.ranks[0].exit_code == 3);
  CHECK(result.ranks[0].error == "plan: layer fc missing");

  REQUIRE(f.supervisor->StartTrain(f.Train("t6", "nodone", {0}, 1)).ok());
  result = f.listener.WaitFinished("t6");
  CHECK_FALSE(result.succeeded);
  CHECK(result.message == "rank 0: exited without reporting done");
}

TEST_CASE("cancel kills every rank's process group and reports a cancelled task",
          "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("t7", "hang", {0, 1}, 2)).ok());
  pid_t sleeper0 = ReadPidFile(f.TaskDir("t7") + "/sleeper-0.pid");
  pid_t sleeper1 = ReadPidFile(f.TaskDir("t7") + "/sleeper-1.pid");
  REQUIRE(f.supervisor->Cancel("t7", "the test asked").ok());
  TaskResult result = f.listener.WaitFinished("t7");
  CHECK(result.cancelled);
  CHECK_FALSE(result.succeeded);
  CHECK(result.message == "cancelled: the test asked");  // who asked reaches the job's history
  CHECK(WaitUntil([&] { return ProcessGone(sleeper0) && ProcessGone(sleeper1); }));
  CHECK(f.supervisor->Cancel("t7", "the test asked").code() == deepool::StatusCode::kNotFound);
  CHECK(f.listener.FinishedCount("t7") == 1);
}

TEST_CASE("cancel escalates to SIGKILL when an executor ignores SIGTERM", "[worker][supervisor]") {
  Fixture f(/*grace=*/100ms);
  REQUIRE(f.supervisor->StartTrain(f.Train("t8", "stubborn", {0}, 1)).ok());
  REQUIRE(f.listener.WaitForLog("t8", "ignoring SIGTERM"));
  REQUIRE(f.supervisor->Cancel("t8", "the test asked").ok());
  TaskResult result = f.listener.WaitFinished("t8");
  CHECK(result.cancelled);
  REQUIRE(result.ranks.size() == 1);
  CHECK(result.ranks[0].signal == SIGKILL);
}

// Starts a BG task on cpu:0 whose executor ignores SIGTERM, and cancels it: it lingers until the
// kill grace ends in a SIGKILL. Returns its pid.
pid_t CancelStubbornOnCpu0(Fixture& f, const std::string& id) {
  TrainTask displaced = f.Train(id, "stubborn", {0}, 1);
  displaced.background = true;
  REQUIRE(f.supervisor->StartTrain(displaced).ok());
  REQUIRE(f.listener.WaitForLog(id, "ignoring SIGTERM"));
  const pid_t lingering = ReadPidFile(f.TaskDir(id) + "/stubborn-0.pid");
  REQUIRE(f.supervisor->Cancel(id, "the test asked").ok());
  return lingering;
}

TEST_CASE("a rank waits for a stopping task's executor to leave its device",
          "[worker][supervisor]") {
  // The kill grace is long next to an "ok" run, so a rank that did not wait would finish first.
  Fixture f(/*grace=*/3000ms);
  const pid_t lingering = CancelStubbornOnCpu0(f, "t20");

  TrainTask other_device = f.Train("t22", "ok", {1}, 2, 29501);
  REQUIRE(f.supervisor->StartTrain(other_device).ok());
  REQUIRE(f.supervisor->StartTrain(f.Train("t21", "ok", {0}, 1)).ok());  // on cpu:0 too
  CHECK(f.listener.WaitFinished("t22").succeeded);  // another device: not held up
  CHECK_FALSE(ProcessGone(lingering));
  TaskResult waited = f.listener.WaitFinished("t21");
  CHECK(waited.succeeded);
  CHECK(ProcessGone(lingering));  // it started only once that one was gone
  CHECK(f.listener.WaitFinished("t20").ranks.at(0).signal == SIGKILL);
}

TEST_CASE("a profile waits for a stopping task's executor to leave its device",
          "[worker][supervisor]") {
  Fixture f(/*grace=*/3000ms);
  const pid_t lingering = CancelStubbornOnCpu0(f, "t30");

  ProfileTask profile;
  profile.task_id = "p30";
  profile.job_id = "job-p30";
  profile.args = {"--output", "{output}"};
  profile.node_device = "cpu:0";  // the displaced rank's device
  REQUIRE(f.supervisor->StartProfile(profile).ok());
  TaskResult measured = f.listener.WaitFinished("p30");
  CHECK(measured.succeeded);
  CHECK(ProcessGone(lingering));  // it started only once that one was gone
  CHECK(f.listener.WaitFinished("t30").ranks.at(0).signal == SIGKILL);
}

TEST_CASE("a task waiting for its store address is cancelled at once", "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("t9", "ok", {1}, 2, /*port=*/0)).ok());
  REQUIRE(f.supervisor->Cancel("t9", "the test asked").ok());
  TaskResult result = f.listener.WaitFinished("t9");
  CHECK(result.cancelled);
  CHECK_FALSE(f.supervisor->IsRunning("t9"));
}

TEST_CASE("malformed tasks, duplicates and missing executables are refused",
          "[worker][supervisor]") {
  Fixture f;
  CHECK(f.supervisor->StartTrain(f.Train("../escape", "ok", {0}, 1)).code() ==
        deepool::StatusCode::kInvalidArgument);
  CHECK(f.supervisor->StartTrain(f.Train("x", "ok", {}, 1)).code() ==
        deepool::StatusCode::kInvalidArgument);
  CHECK(f.supervisor->StartTrain(f.Train("x", "ok", {0, 2}, 2)).code() ==
        deepool::StatusCode::kInvalidArgument);
  CHECK(f.supervisor->StartTrain(f.Train("x", "ok", {1, 1}, 2)).code() ==
        deepool::StatusCode::kInvalidArgument);

  REQUIRE(f.supervisor->StartTrain(f.Train("dup", "hang", {0}, 1)).ok());
  CHECK(f.supervisor->StartTrain(f.Train("dup", "ok", {0}, 1)).code() ==
        deepool::StatusCode::kAlreadyExists);
  REQUIRE(f.supervisor->Cancel("dup", "the test asked").ok());
  CHECK(f.listener.WaitFinished("dup").cancelled);

  RecordingListener listener;
  SupervisorOptions options;
  options.executor_path = f.dir.path() + "/no-such-executor";
  options.work_dir = f.dir.path() + "/work2";
  ExecutorSupervisor missing(options, &listener);
  auto status = missing.StartTrain(f.Train("m", "ok", {0}, 1));
  CHECK(status.code() == deepool::StatusCode::kNotFound);
  CHECK(status.message().find("no-such-executor") != std::string::npos);
  CHECK(missing.RunningTasks().empty());
}

TEST_CASE("a PROFILE task returns the file the profiler wrote", "[worker][supervisor]") {
  Fixture f;
  ProfileTask task;
  task.task_id = "p1";
  task.job_id = "job-p";
  task.args = {"--output", "{output}"};
  REQUIRE(f.supervisor->StartProfile(task).ok());
  TaskResult result = f.listener.WaitFinished("p1");
  CHECK(result.succeeded);
  CHECK(result.profile_json == "{\"format\":\"deepool.profile\"}\n");
  CHECK(f.listener.WaitForLog("p1", "-1|measuring"));
}

TEST_CASE("a CPU profile is measured with the executors' threads, a GPU profile without",
          "[worker][supervisor]") {
  TempDir dir;
  RecordingListener listener;
  SupervisorOptions options;
  // Prints its arguments; the output path follows --output, its first two arguments.
  options.profiler_path = WriteScript(dir.path(), "fake-profile",
                                      "#!/bin/sh\necho \"args: $*.\" >&2\n"
                                      "echo '{}' > \"$2\"\n");
  options.work_dir = dir.path() + "/work";
  options.cpu_threads_per_device = 3;
  ExecutorSupervisor supervisor(options, &listener);
  for (const std::string device : {"cpu", "cuda:0"}) {
    ProfileTask task;
    task.task_id = device == "cpu" ? "p-cpu" : "p-gpu";
    task.job_id = "job-p";
    task.args = {"--output", "{output}", "--device", device};
    task.device = device;
    REQUIRE(supervisor.StartProfile(task).ok());
    CHECK(listener.WaitFinished(task.task_id).succeeded);
    const std::string expected = device == "cpu" ? "--device cpu --threads 3." : "--device cuda:0.";
    CHECK(listener.WaitForLog(task.task_id, expected));
  }
}

TEST_CASE("shutdown stops running tasks", "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("s1", "hang", {0}, 1)).ok());
  pid_t sleeper = ReadPidFile(f.TaskDir("s1") + "/sleeper-0.pid");
  f.supervisor->Shutdown();
  CHECK(f.listener.WaitFinished("s1").cancelled);
  CHECK(WaitUntil([&] { return ProcessGone(sleeper); }));
  CHECK(f.supervisor->StartTrain(f.Train("s2", "ok", {0}, 1)).code() ==
        deepool::StatusCode::kUnavailable);
}

namespace {

HostedBackgroundTask Hosted(const std::string& host_task, int host_rank) {
  HostedBackgroundTask task;
  task.task_id = "bg-task";
  task.job_id = "bg-1";
  task.host_task_id = host_task;
  task.host_rank = host_rank;
  task.background_json = R"({"job_id":"bg-1","graph":{},"batch_size":4,"iterations":2})";
  return task;
}

}  // namespace

TEST_CASE("a BG task hosted by a FG rank reports through the host's background lines",
          "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("fg", "host", {0, 1}, 2)).ok());
  // Not running here: NOT_FOUND, so the worker reports it for a requeue.
  CHECK(f.supervisor->StartHosted(Hosted("no-such-task", 0)).code() ==
        deepool::StatusCode::kNotFound);
  REQUIRE(f.supervisor->StartHosted(Hosted("fg", 1)).ok());
  CHECK(f.supervisor->StartHosted(Hosted("fg", 0)).code() == deepool::StatusCode::kAlreadyExists);
  std::ofstream(f.TaskDir("fg") + "/release-bg").put('\n');
  TaskResult bg = f.listener.WaitFinished("bg-task");
  CHECK(bg.succeeded);
  CHECK(bg.job_id == "bg-1");
  CHECK(bg.iterations == 2);
  CHECK_FALSE(bg.host_ended);
  auto progress = f.listener.Iterations("bg-task");
  REQUIRE(progress.size() == 2);  // the progress line and the done line
  CHECK(progress[0].in_fg_executor);
  CHECK(progress[0].iteration == 0);
  CHECK(progress[1].iteration == 1);
  CHECK(progress[1].samples_per_s == 55);
  // Rank 0 got no command and keeps waiting on its stdin: cancel the FG task.
  REQUIRE(f.supervisor->Cancel("fg", "the test asked").ok());
  CHECK(f.listener.WaitFinished("fg").cancelled);
}

TEST_CASE("a hosted BG task ends with host_ended when its FG rank ends first, cancel detaches",
          "[worker][supervisor]") {
  Fixture f;
  REQUIRE(f.supervisor->StartTrain(f.Train("fg", "host_ends", {0}, 1)).ok());
  REQUIRE(f.supervisor->StartHosted(Hosted("fg", 0)).ok());
  // Not checked running here: the FG rank ends at once, so the BG task may already be over
  // (it was, once, under ThreadSanitizer).
  TaskResult bg = f.listener.WaitFinished("bg-task");
  CHECK_FALSE(bg.succeeded);
  CHECK(bg.host_ended);
  CHECK(bg.message.find("ended first") != std::string::npos);
  CHECK(f.listener.WaitFinished("fg").succeeded);

  Fixture g;
  REQUIRE(g.supervisor->StartTrain(g.Train("fg2", "host_detach", {0}, 1)).ok());
  REQUIRE(g.supervisor->StartHosted(Hosted("fg2", 0)).ok());
  bool listed = false;
  for (const auto& t : g.supervisor->RunningTasks()) listed |= t.task_id == "bg-task";
  CHECK(listed);
  REQUIRE(g.supervisor->Cancel("bg-task", "the test asked").ok());
  TaskResult detached = g.listener.WaitFinished("bg-task");
  CHECK(detached.cancelled);
  CHECK_FALSE(detached.host_ended);
  CHECK(g.listener.WaitFinished("fg2").succeeded);
}
