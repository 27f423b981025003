// End to end on loopback: a real coordinator and two workers with two CPU devices each, real
// executors. Each test case starts its own cluster in a temporary directory.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/e2e/local_cluster.h"

using namespace deepool;
using namespace deepool::e2e;
using nlohmann::json;

namespace {

std::set<std::string> NodesOf(const v1::Job& job) {
  std::set<std::string> nodes;
  for (const auto& d : job.devices()) nodes.insert(d.node_id());
  return nodes;
}

ClusterOptions OneDevice() {
  ClusterOptions options;
  options.workers = 1;
  options.devices_per_worker = 1;
  return options;
}

// A BG job's progress came from a FG rank's executor, and the worker started no process for it.
void CheckRanInsideFgExecutor(LocalCluster& cluster, const v1::Job& bg_job, const std::string& fg) {
  REQUIRE(bg_job.progress().devices_size() == 1);
  CHECK(bg_job.progress().devices(0).shared_executor());
  CHECK(bg_job.progress().devices(0).fg_job_id() == fg);
  std::string out, err;
  CHECK(cluster.RunCli({"logs", bg_job.job_id()}, &out, &err) == 0);
  CHECK(out.find("runs inside the FG executor of task") != std::string::npos);
  CHECK(out.find("started rank") == std::string::npos);
}

}  // namespace

TEST_CASE("a FG burst-parallel job over 4 ranks on 2 workers and a BG job run to completion",
          "[e2e]") {
  LocalCluster cluster;
  std::string fg, bg;
  REQUIRE(cluster.Submit(FgJob("fg-demo", 6), &fg).ok());
  REQUIRE(cluster.Submit(BgJob("bg-demo", 6), &bg).ok());

  v1::Job fg_job = cluster.WaitForTerminal(fg);
  v1::Job bg_job = cluster.WaitForTerminal(bg);
  INFO(cli::ToJson(fg_job));
  INFO(cli::ToJson(bg_job));
  REQUIRE(fg_job.state() == v1::JOB_STATE_SUCCEEDED);
  REQUIRE(bg_job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(fg_job.progress().iteration() == 6);
  CHECK(bg_job.progress().iteration() == 6);
  CHECK(fg_job.progress().samples_per_s() > 0);
  // Four ranks, spread over both workers.
  REQUIRE(fg_job.devices_size() == 4);
  CHECK(NodesOf(fg_job).size() == 2);
  CHECK(bg_job.devices_size() == 1);
  CHECK(fg_job.has_plan());
  // Every rank's iteration lines reached the coordinator: one device row per rank.
  REQUIRE(fg_job.progress().devices_size() == 4);
  for (int r = 0; r < 4; ++r) {
    const auto& row = fg_job.progress().devices(r);
    CHECK(row.rank() == r);
    CHECK(row.device() == fg_job.devices(r).device());
    CHECK(row.iteration() == 6);
    CHECK(row.fg_job_id() == fg);
  }
  REQUIRE(bg_job.progress().devices_size() == 1);
  CHECK(bg_job.progress().devices(0).bg_job_id() == bg);
  // The FG job holds every device: the BG job ran inside a FG executor, or only after the FG job
  // ended (had it finished first), never as a process competing with a FG rank.
  const int64_t fg_ended_ms = fg_job.history(fg_job.history_size() - 1).time_ms();
  for (const auto& h : bg_job.history()) {
    if (h.state() != v1::JOB_STATE_RUNNING) continue;
    INFO(h.reason());
    CHECK((h.reason().find("inside the executor of job " + fg) != std::string::npos ||
           h.time_ms() >= fg_ended_ms));
  }
  // The states it went through, in order.
  std::vector<v1::JobState> states;
  for (const auto& h : fg_job.history()) states.push_back(h.state());
  REQUIRE(states.size() >= 3);
  CHECK(states.front() == v1::JOB_STATE_PENDING);
  CHECK(std::find(states.begin(), states.end(), v1::JOB_STATE_RUNNING) != states.end());
  CHECK(states.back() == v1::JOB_STATE_SUCCEEDED);

  // The CLI sees the same: a table with both jobs, detail with the plan, logs, nodes.
  std::string out, err;
  CHECK(cluster.RunCli({"status"}, &out, &err) == 0);
  CHECK(out.find(fg) != std::string::npos);
  CHECK(out.find("SUCCEEDED") != std::string::npos);
  CHECK(out.find("cluster    FG 0 jobs") != std::string::npos);  // both finished
  CHECK(out.find("0/4 busy") != std::string::npos);
  out.clear();
  CHECK(cluster.RunCli({"status", fg}, &out, &err) == 0);
  CHECK(out.find("plan") != std::string::npos);
  CHECK(out.find("iteration 6/6") != std::string::npos);
  // The per-device table's header; its columns widen with the values (an IDLE of 123ms).
  CHECK(std::regex_search(out, std::regex("FG BUSY +BG BUSY +IDLE")));
  out.clear();
  CHECK(cluster.RunCli({"status", "--json"}, &out, &err) == 0);
  auto listed = json::parse(out);
  CHECK(listed.at("jobs").size() == 2);
  CHECK(listed.at("summary").at("devices") == 4);
  out.clear();
  // One job a page: the listing says how to go on, and the next page holds the other job.
  CHECK(cluster.RunCli({"status", "--limit", "1"}, &out, &err) == 0);
  std::smatch token;
  REQUIRE(std::regex_search(err, token, std::regex("deepool status --page (\\S+)")));
  const bool newest_is_bg = out.find(bg) != std::string::npos;
  CHECK(out.find(newest_is_bg ? fg : bg) == std::string::npos);
  out.clear();
  err.clear();
  CHECK(cluster.RunCli({"status", "--page", token[1].str()}, &out, &err) == 0);
  CHECK(out.find(newest_is_bg ? fg : bg) != std::string::npos);
  CHECK(out.find(newest_is_bg ? bg : fg) == std::string::npos);
  CHECK(err.find("--page") == std::string::npos);  // the list ended
  out.clear();
  CHECK(cluster.RunCli({"nodes"}, &out, &err) == 0);
  CHECK(out.find("node-0") != std::string::npos);
  CHECK(out.find("node-1") != std::string::npos);
  out.clear();
  CHECK(cluster.RunCli({"logs", fg}, &out, &err) == 0);
  // The workers' own lines say where the ranks ran.
  CHECK(out.find("started rank 0 on cpu:0") != std::string::npos);
  CHECK(PollUntil([&] { return cluster.NoTasksLeft(); }));
}

TEST_CASE("a BG job submitted while a FG job runs runs inside the FG executor and succeeds",
          "[e2e]") {
  LocalCluster cluster;
  std::string fg, bg;
  REQUIRE(cluster.Submit(FgJob("fg-host", 100000), &fg).ok());
  // Every FG rank reports iterations: each device has a running executor to host a BG job.
  cluster.WaitForJob(fg, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().devices_size() == 4;
  });
  REQUIRE(cluster.Submit(BgJob("bg-inside", 3), &bg).ok());
  v1::Job bg_job = cluster.WaitForTerminal(bg);
  INFO(cli::ToJson(bg_job));
  REQUIRE(bg_job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(bg_job.progress().iteration() == 3);
  // Dispatched into a FG rank's executor, and its progress came from that executor.
  bool inside = false;
  for (const auto& h : bg_job.history()) {
    inside |= h.reason().find("inside the executor of job " + fg) != std::string::npos;
  }
  CHECK(inside);
  CheckRanInsideFgExecutor(cluster, bg_job, fg);
  std::string out, err;

  CHECK(cluster.RunCli({"cancel", fg}, &out, &err) == 0);
  CHECK(cluster.WaitForTerminal(fg).state() == v1::JOB_STATE_CANCELLED);
  CHECK(PollUntil([&] { return cluster.NoTasksLeft(); }));
}

TEST_CASE("a BG job submitted with a FG job waits for a FG rank and runs inside its executor",
          "[e2e]") {
  LocalCluster cluster;
  std::string fg, bg;
  // Submitted together: the FG job takes all four devices while the BG job is still pending.
  REQUIRE(cluster.Submit(FgJob("fg-first", 100000), &fg).ok());
  REQUIRE(cluster.Submit(BgJob("bg-waits", 3), &bg).ok());
  v1::Job bg_job = cluster.WaitForTerminal(bg);
  INFO(cli::ToJson(bg_job));
  REQUIRE(bg_job.state() == v1::JOB_STATE_SUCCEEDED);
  // Dispatched once, into a FG executor; never as its own process.
  int dispatches = 0;
  bool inside = false;
  for (const auto& h : bg_job.history()) {
    if (h.state() != v1::JOB_STATE_RUNNING) continue;
    ++dispatches;
    inside = h.reason().find("inside the executor of job " + fg) != std::string::npos;
  }
  CHECK(dispatches == 1);
  CHECK(inside);
  CheckRanInsideFgExecutor(cluster, bg_job, fg);
  std::string out, err;

  CHECK(cluster.RunCli({"cancel", fg}, &out, &err) == 0);
  CHECK(cluster.WaitForTerminal(fg).state() == v1::JOB_STATE_CANCELLED);
  CHECK(PollUntil([&] { return cluster.NoTasksLeft(); }));
}

TEST_CASE("cancel works on a pending and on a running job", "[e2e]") {
  LocalCluster cluster;
  // Pending: 8 devices wanted, 4 exist.
  std::string pending;
  REQUIRE(cluster.Submit(FgJob("too-big", 5, /*gpus=*/8), &pending).ok());
  v1::Job waiting = cluster.WaitForJob(
      pending, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_PENDING; });
  CHECK_FALSE(waiting.reason().empty());
  std::string out, err;
  // --why names the decision and the devices behind it.
  waiting = cluster.WaitForJob(pending, [](const v1::Job& j) {
    return j.reason_code() == v1::REASON_CODE_NOT_ENOUGH_DEVICES;
  });
  CHECK(waiting.queue_position() == 1);
  CHECK(cluster.RunCli({"status", pending, "--why"}, &out, &err) == 0);
  INFO(out);
  CHECK(out.find("needs 8 device(s)") != std::string::npos);
  CHECK(out.find("NOT_ENOUGH_DEVICES") != std::string::npos);
  CHECK(out.find("#1 among the pending FG jobs") != std::string::npos);
  CHECK(out.find("cpu             4          4") != std::string::npos);
  CHECK(cluster.RunCli({"status", "--why"}, &out, &err) == cli::kExitUsage);
  CHECK(cluster.RunCli({"cancel", pending}, &out, &err) == 0);
  CHECK(cluster.WaitForTerminal(pending).state() == v1::JOB_STATE_CANCELLED);

  // Running: long enough that it is still going when cancelled.
  std::string running;
  REQUIRE(cluster.Submit(FgJob("long", 100000), &running).ok());
  cluster.WaitForJob(running, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 1;
  });
  CHECK(cluster.RunCli({"cancel", running}, &out, &err) == 0);
  v1::Job cancelled = cluster.WaitForTerminal(running);
  CHECK(cancelled.state() == v1::JOB_STATE_CANCELLED);
  // The workers killed the executors and reported it: no task is left on any node.
  CHECK(PollUntil([&] { return cluster.NoTasksLeft(); }));
  // Cancelling a finished job is refused.
  err.clear();
  CHECK(cluster.RunCli({"cancel", running}, &out, &err) == cli::kExitFailure);
  CHECK_FALSE(err.empty());
  CHECK(cluster.RunCli({"cancel", "no-such-job"}, &out, &err) == cli::kExitNotFound);
}

TEST_CASE("a job whose executor is killed fails naming that rank, not a peer's closed connection",
          "[e2e]") {
  LocalCluster cluster;
  std::string id;
  REQUIRE(cluster.Submit(FgJob("victim", 100000), &id).ok());
  v1::Job running = cluster.WaitForJob(id, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 2;
  });
  int victim_rank = -1;
  for (const v1::DeviceAssignment& d : running.devices())
    victim_rank = std::max(victim_rank, d.rank());
  REQUIRE(victim_rank > 0);
  const pid_t victim = FindExecutor(cluster.dir(), victim_rank);
  REQUIRE(victim > 0);
  REQUIRE(kill(victim, SIGKILL) == 0);
  v1::Job end = cluster.WaitForTerminal(id);
  INFO(cli::ToJson(end));
  CHECK(end.state() == v1::JOB_STATE_FAILED);
  CHECK_THAT(end.reason(),
             Catch::Contains("rank " + std::to_string(victim_rank) + ": killed by signal 9"));
  CHECK(PollUntil([&] { return cluster.NoTasksLeft(); }));
}

TEST_CASE("an executor stopped (SIGSTOP) mid-job: the job fails within the timeout, none is left",
          "[e2e]") {
  ClusterOptions options;
  options.executor_timeout_s = 6;  // the ranks' communication timeout
  LocalCluster cluster(options);
  std::string id;
  REQUIRE(cluster.Submit(FgJob("frozen", 100000), &id).ok());
  v1::Job running = cluster.WaitForJob(id, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 2;
  });
  int victim_rank = -1;
  for (const v1::DeviceAssignment& d : running.devices())
    victim_rank = std::max(victim_rank, d.rank());
  const pid_t victim = FindExecutor(cluster.dir(), victim_rank);
  REQUIRE(victim > 0);
  const auto stopped_at = std::chrono::steady_clock::now();
  REQUIRE(kill(victim, SIGSTOP) == 0);
  v1::Job end = cluster.WaitForTerminal(id, 120s);
  const auto failed_after = std::chrono::steady_clock::now() - stopped_at;
  INFO(cli::ToJson(end));
  CHECK(end.state() == v1::JOB_STATE_FAILED);
  CHECK_FALSE(end.reason().empty());
  // The peers waited for the stopped rank up to their timeout, not forever.
  CHECK(failed_after < 6s + 30s);
  WARN("failed " << std::chrono::duration_cast<std::chrono::milliseconds>(failed_after).count()
                 << " ms after the stop: " << end.reason());
  // The stopped executor is killed (SIGKILL reaches a stopped process) and the devices freed.
  CHECK(PollUntil([&] { return FindExecutor(cluster.dir(), victim_rank) == 0; }, 30s));
  CHECK(PollUntil([&] { return cluster.NoTasksLeft(); }));
}

TEST_CASE("executors end with their worker daemon: killed, or stopped past its lease", "[e2e]") {
  LocalCluster cluster;  // node timeout 20 s; the workers' executor lease is the default 5 s
  std::string id;
  REQUIRE(cluster.Submit(FgJob("orphans", 100000), &id).ok());
  v1::Job running = cluster.WaitForJob(id, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 2;
  });
  std::vector<int> on_node_1;
  for (const v1::DeviceAssignment& d : running.devices()) {
    if (d.node_name() == "node-1") on_node_1.push_back(d.rank());
  }
  REQUIRE_FALSE(on_node_1.empty());
  const std::string node_1_dir = cluster.dir() + "/node-1";
  auto none_left = [&] {
    for (int rank : on_node_1) {
      if (FindExecutor(node_1_dir, rank) != 0) return false;
    }
    return true;
  };
  REQUIRE_FALSE(none_left());

  SECTION("the daemon is killed: its executors end within a poll") {
    cluster.SignalWorker(1, SIGKILL);
    CHECK(PollUntil(none_left, 10s));
  }
  SECTION("the daemon is stopped: its executors end after the lease, before the node is DOWN") {
    const auto stopped_at = std::chrono::steady_clock::now();
    cluster.SignalWorker(1, SIGSTOP);
    CHECK(PollUntil(none_left, 15s));
    const auto waited = std::chrono::steady_clock::now() - stopped_at;
    CHECK(waited >= 5s);
    CHECK(waited < 20s);
    cluster.SignalWorker(1, SIGCONT);
    // Back, the worker finds its executors gone (their reason on stdout) and the job fails.
    v1::Job end = cluster.WaitForTerminal(id, 60s);
    INFO(cli::ToJson(end));
    CHECK(end.state() == v1::JOB_STATE_FAILED);
  }
}

TEST_CASE("a coordinator killed with SIGKILL and restarted mid-run loses nothing", "[e2e]") {
  // Plain loopback and mutual TLS: a TLS worker must come back as promptly as a plain one.
  const bool secure = GENERATE(false, true);
  INFO((secure ? "mutual TLS" : "plain loopback"));
  ClusterOptions options;
  options.secure = secure;
  // The coordinator's default heartbeat: between a worker's calls its channel sits unpolled, and
  // a TLS handshake left unattended there never finished (the worker never came back).
  options.heartbeat_interval_s = 1;
  // Every report stored, so all the progress a client saw survives the kill. By default progress
  // reaches the store at most every 5 s and may step back that much (JobManager::UpdateProgress,
  // tested in service/job_manager_test); states, history and placements are stored at once.
  options.coordinator_args = {"--progress-store-interval-s", "0"};
  LocalCluster cluster(options);
  std::string done_before, fg;
  REQUIRE(cluster.Submit(BgJob("finished-before", 2), &done_before).ok());
  REQUIRE(cluster.WaitForTerminal(done_before).state() == v1::JOB_STATE_SUCCEEDED);
  REQUIRE(cluster.Submit(FgJob("survivor", 300), &fg).ok());
  v1::Job before = cluster.WaitForJob(fg, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 1;
  });

  cluster.KillCoordinator();
  // A user submits while the coordinator is down: `deepool submit` keeps trying.
  const std::string submit_log = cluster.dir() + "/submit-during-restart.log";
  auto submit =
      cluster.StartCli({"submit", "--model", "mlp", "--gpus", "1", "--global-batch", "8",
                        "--iterations", "2", "--bg", "--profile", "analytical", "--detach"},
                       submit_log);
  // An outage as a supervisor's restart makes (the scenario, not a wait for a condition).
  std::this_thread::sleep_for(1300ms);
  cluster.RestartCoordinator();
  const auto restarted = std::chrono::steady_clock::now();
  std::optional<ProcessExit> submitted = submit->Wait(60s);
  REQUIRE(submitted.has_value());
  {
    std::ifstream log(submit_log);
    INFO("deepool submit: " << std::string(std::istreambuf_iterator<char>(log), {}));
    CHECK(submitted->ok());
  }

  // Everything it knew is back right away.
  auto after_restart = cluster.GetJob(fg);
  REQUIRE(after_restart.has_value());
  CHECK(after_restart->history_size() >= before.history_size());
  CHECK(after_restart->progress().iteration() >= before.progress().iteration());
  auto finished = cluster.GetJob(done_before);
  REQUIRE(finished.has_value());
  CHECK(finished->state() == v1::JOB_STATE_SUCCEEDED);
  // The workers re-register within a few seconds (far inside their 19.8 s lease, so no
  // executor is stopped), and the running job, reconciled, finishes.
  REQUIRE(cluster.WaitForNodesUp(2));
  const auto back_after = std::chrono::steady_clock::now() - restarted;
  INFO("workers back after " << std::chrono::duration<double>(back_after).count() << " s");
  CHECK(back_after < 8s);
  v1::Job end = cluster.WaitForTerminal(fg);
  INFO(cli::ToJson(end));
  CHECK(end.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(end.progress().iteration() == 300);
  CHECK(end.attempt() == before.attempt());  // not restarted from scratch
}

TEST_CASE("a coordinator killed while a worker measures a profile: measured again, succeeds",
          "[e2e]") {
  LocalCluster cluster;
  nlohmann::json spec = FgJob("measured", 5, 2);
  spec["profile"] = "measured";
  std::string id;
  REQUIRE(cluster.Submit(spec, &id).ok());
  cluster.WaitForJob(id, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_PROFILING; });
  cluster.KillCoordinator();
  cluster.RestartCoordinator();
  v1::Job end = cluster.WaitForTerminal(id);
  INFO(cli::ToJson(end));
  CHECK(end.state() == v1::JOB_STATE_SUCCEEDED);
}

TEST_CASE("a job whose task is larger than gRPC's default 4 MiB reaches its worker and succeeds",
          "[e2e]") {
  LocalCluster cluster(OneDevice());
  // 1,300 layers with 2,000-character names: a 5.4 MB graph, and a larger task with its plan.
  const std::string pad(2000, 'x');
  json layers = json::array({{{"name", "fc"},
                              {"op", "linear"},
                              {"inputs", {"input"}},
                              {"in_features", 32},
                              {"out_features", 10}}});
  std::string previous = "fc";
  for (int i = 0; i < 1300; ++i) {
    std::string name = "relu" + std::to_string(i) + "-" + pad;
    layers.push_back({{"name", name}, {"op", "relu"}, {"inputs", {previous}}});
    previous = std::move(name);
  }
  json spec = FgJob("large-graph", 2, /*gpus=*/1);
  spec.erase("model");
  spec["graph"] = {{"format", "deepool.graph"},
                   {"version", 1},
                   {"name", "padded"},
                   {"input", {{"shape", {32}}}},
                   {"layers", layers}};
  REQUIRE(spec["graph"].dump().size() > (5u << 20));
  std::string id;
  REQUIRE(cluster.Submit(spec, &id).ok());
  v1::Job end = cluster.WaitForTerminal(id, 180s);
  INFO(cli::ToJson(end));
  CHECK(end.state() == v1::JOB_STATE_SUCCEEDED);
}

TEST_CASE("malformed specs are refused with INVALID_ARGUMENT naming the field", "[e2e]") {
  LocalCluster cluster(OneDevice());
  struct Case {
    json spec;
    std::string field;
  };
  json unknown = FgJob("x", 1);
  unknown["colour"] = "blue";
  json no_batch = FgJob("x", 1);
  no_batch.erase("global_batch");
  json zero_iterations = FgJob("x", 1);
  zero_iterations["iterations"] = 0;
  json bad_role = FgJob("x", 1);
  bad_role["role"] = "urgent";
  json bg_two = BgJob("x", 1);
  bg_two["gpus"] = 2;
  json bad_lr = FgJob("x", 1);
  bad_lr["optimizer"]["lr"] = "fast";
  for (const auto& c : std::vector<Case>{{unknown, "colour"},
                                         {no_batch, "global_batch"},
                                         {zero_iterations, "iterations"},
                                         {bad_role, "role"},
                                         {bg_two, "gpus"},
                                         {bad_lr, "optimizer.lr"}}) {
    INFO(c.spec.dump());
    std::string id;
    grpc::Status status = cluster.Submit(c.spec, &id);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(status.error_message().find(c.field) != std::string::npos);
  }
  // Through the CLI: exit code 3 and the field on stderr.
  std::string spec_path = cluster.dir() + "/bad.json";
  std::ofstream(spec_path) << zero_iterations.dump();
  std::string out, err;
  CHECK(cluster.RunCli({"submit", spec_path, "--detach"}, &out, &err) == cli::kExitInvalidInput);
  CHECK(err.find("iterations") != std::string::npos);
  err.clear();
  CHECK(cluster.RunCli({"submit", "--model", "small_cnn", "--global-batch", "4", "--iterations",
                        "2", "--gpus", "0", "--detach"},
                       &out, &err) == cli::kExitInvalidInput);
  CHECK(err.find("gpus") != std::string::npos);
  // Nothing was stored.
  out.clear();
  CHECK(cluster.RunCli({"status"}, &out, &err) == 0);
  CHECK(out.rfind("no jobs\n\ncluster    FG 0 jobs", 0) == 0);
  CHECK(out.find("0/1 busy (0 FG, 0 BG, 0 shared), 1 idle") != std::string::npos);
}

TEST_CASE("submit's checkpoint and gradient bucket flags set the spec's fields", "[e2e]") {
  LocalCluster cluster(OneDevice());
  const std::string spec_path = cluster.dir() + "/with-path.json";
  json spec = FgJob("ck", 1);
  spec["checkpoint"] = cluster.dir() + "/final.pt";  // the string form: the path, kept
  std::ofstream(spec_path) << spec.dump();
  std::string out, err;
  REQUIRE(cluster.RunCli(
              {"submit", spec_path, "--checkpoint-dir", cluster.dir() + "/ck", "--checkpoint-every",
               "3", "--checkpoint-keep", "4", "--checkpoint-every-seconds", "60",
               "--gradient-bucket-mb", "0.5", "--detach"},
              &out, &err) == 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  std::optional<v1::Job> job = cluster.GetJob(out);
  REQUIRE(job.has_value());
  CHECK(job->spec().checkpoint_path() == cluster.dir() + "/final.pt");
  CHECK(job->spec().checkpoint_dir() == cluster.dir() + "/ck");
  CHECK(job->spec().checkpoint_every_iterations() == 3);
  CHECK(job->spec().checkpoint_keep() == 4);
  CHECK(job->spec().checkpoint_every_seconds() == 60);
  CHECK(job->spec().gradient_bucket_mb() == 0.5);
  // Without a directory the periodic fields are refused by the coordinator, naming them.
  out.clear();
  err.clear();
  CHECK(cluster.RunCli({"submit", "--model", "small_cnn", "--global-batch", "4", "--iterations",
                        "2", "--checkpoint-every", "3", "--detach"},
                       &out, &err) == cli::kExitInvalidInput);
  CHECK_THAT(err, Catch::Contains("checkpoint"));
}

TEST_CASE("submit's eval flags set the spec's eval", "[e2e][eval]") {
  LocalCluster cluster(OneDevice());
  const std::string spec_path = cluster.dir() + "/job.json";
  std::ofstream(spec_path) << FgJob("evaluated", 1).dump();
  std::string out, err;
  REQUIRE(cluster.RunCli({"submit", spec_path, "--eval-data", "cifar10:" + cluster.dir() + "/val",
                          "--eval-every", "5", "--eval-batch", "96", "--detach"},
                         &out, &err) == 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  std::optional<v1::Job> job = cluster.GetJob(out);
  REQUIRE(job.has_value());
  REQUIRE(job->spec().has_eval());
  CHECK(job->spec().eval().data().kind() == "cifar10");
  CHECK(job->spec().eval().data().path() == cluster.dir() + "/val");
  CHECK(job->spec().eval().every_iterations() == 5);
  CHECK(job->spec().eval().batch() == 96);
  // A data flag in another form is refused before anything is sent, naming the flag.
  out.clear();
  err.clear();
  CHECK(cluster.RunCli({"submit", spec_path, "--eval-data", "imagenet", "--detach"}, &out, &err) ==
        cli::kExitInvalidInput);
  CHECK_THAT(err, Catch::Contains("--eval-data must be synthetic, cifar10:PATH, "
                                  "image_folder:PATH or tokens:PATH, not imagenet"));
  // --eval-every without a data set: the coordinator refuses the eval, naming its data.
  err.clear();
  CHECK(cluster.RunCli({"submit", spec_path, "--eval-every", "5", "--detach"}, &out, &err) ==
        cli::kExitInvalidInput);
  CHECK_THAT(err, Catch::Contains("eval.data: is required"));
}

TEST_CASE("an epochs job trains the iterations its executors count and shows them",
          "[e2e][epochs]") {
  // Two epochs of the synthetic set's 1,024 samples at a global batch of 512: 4 iterations,
  // which only the executors can count; the coordinator learns the total from their events.
  LocalCluster cluster;
  json spec = FgJob("epochs", 0, 4, 512);
  spec.erase("iterations");
  spec["epochs"] = 2;
  std::string id;
  REQUIRE(cluster.Submit(spec, &id).ok());
  v1::Job job = cluster.WaitForTerminal(id);
  INFO(cli::ToJson(job));
  REQUIRE(job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(job.spec().epochs() == 2);
  CHECK(job.progress().iterations() == 4);
  CHECK(job.progress().iteration() == 4);
  std::string out, err;
  REQUIRE(cluster.RunCli({"status", id}, &out, &err) == 0);
  CHECK_THAT(out, Catch::Contains("iteration 4/4 (epoch 2 of 2)"));
}

TEST_CASE("an evaluated job's results reach its progress, status and logs", "[e2e][eval]") {
  // Four ranks on two workers evaluate the held-out set after iterations 3 and 6; rank 0's
  // results travel through its worker to the coordinator and the CLI.
  LocalCluster cluster;
  json spec = FgJob("evaluated", 6);
  // In passes of 48 samples, three times the global batch: the plan scaled to it.
  spec["eval"] = {
      {"data", {{"kind", "synthetic"}, {"seed", 8}}}, {"every_iterations", 3}, {"batch", 48}};
  std::string id;
  REQUIRE(cluster.Submit(spec, &id).ok());
  v1::Job job = cluster.WaitForTerminal(id);
  INFO(cli::ToJson(job));
  REQUIRE(job.state() == v1::JOB_STATE_SUCCEEDED);
  REQUIRE(job.progress().evaluations_size() == 2);
  for (int k = 0; k < 2; ++k) {
    const v1::Evaluation& evaluation = job.progress().evaluations(k);
    CHECK(evaluation.iteration() == 3 * (k + 1));
    CHECK(evaluation.samples() == 1024);  // the synthetic set, once
    CHECK(evaluation.has_loss());
    CHECK(evaluation.top1() >= 0);
    CHECK(evaluation.top5() >= evaluation.top1());
    CHECK(evaluation.top5() <= 1);
  }
  std::string out, err;
  REQUIRE(cluster.RunCli({"status", id}, &out, &err) == 0);
  CHECK_THAT(out, Catch::Contains("iteration 6: top-1"));
  out.clear();
  REQUIRE(cluster.RunCli({"logs", id}, &out, &err) == 0);
  CHECK_THAT(out, Catch::Contains("evaluation after iteration 3"));
}
