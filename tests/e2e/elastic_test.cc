// Elastic training end to end: real coordinator, workers and executors on loopback. A FG job
// with periodic checkpoints whose node dies is requeued, resumes from its newest whole
// checkpoint on the node that remains, and ends with the same bits as an uninterrupted run.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/e2e/local_cluster.h"

using namespace deepool;
using namespace deepool::e2e;
using nlohmann::json;

namespace {

constexpr int64_t kIterations = 300;

json CheckpointedJob(const std::string& name, const std::string& dir) {
  json spec = FgJob(name, kIterations, /*gpus=*/2, /*global_batch=*/8);
  spec["optimizer"] = {{"name", "sgd"}, {"lr", 0.01}, {"momentum", 0.9}};
  spec["checkpoint"] = {{"dir", dir}, {"every_iterations", 10}, {"keep", 2}};
  spec["requeue_on_failure"] = true;
  return spec;
}

// The final checkpoint's manifest: its rank files' sizes and digests say whether two runs
// ended with the same bits.
json FinalManifest(const std::string& dir, int64_t iterations = kIterations) {
  char name[32];
  std::snprintf(name, sizeof name, "iter-%012lld", static_cast<long long>(iterations));
  std::ifstream in(dir + "/" + name + "/MANIFEST.json");
  REQUIRE(in);
  return json::parse(in);
}

}  // namespace

TEST_CASE("a FG job whose node dies resumes from its checkpoint and ends as an uninterrupted run",
          "[e2e][elastic]") {
  ClusterOptions options;
  options.node_timeout_s = 3;
  LocalCluster cluster(options);
  REQUIRE(cluster.WaitForNodesUp(2));
  const std::string victim_dir = cluster.dir() + "/ck-victim";
  const std::string reference_dir = cluster.dir() + "/ck-reference";

  std::string victim;
  REQUIRE(cluster.Submit(CheckpointedJob("victim", victim_dir), &victim).ok());
  v1::Job running = cluster.WaitForJob(victim, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 25;
  });
  std::set<std::string> nodes;
  for (const auto& d : running.devices()) nodes.insert(d.node_name());
  REQUIRE(nodes.size() == 1);  // two devices of one worker
  const std::string lost = *nodes.begin();
  // The same spec on the other worker, never interrupted.
  std::string reference;
  REQUIRE(cluster.Submit(CheckpointedJob("reference", reference_dir), &reference).ok());
  cluster.WaitForJob(reference,
                     [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING; });

  const int64_t iteration_at_kill = cluster.GetJob(victim)->progress().iteration();
  const auto killed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  cluster.SignalWorker(lost == "node-0" ? 0 : 1, SIGKILL);
  v1::Job ended = cluster.WaitForTerminal(victim, 600s);
  INFO(cli::ToJson(ended));
  REQUIRE(ended.state() == v1::JOB_STATE_SUCCEEDED);
  int64_t requeued_ms = 0, running_again_ms = 0, training_again_ms = 0;
  std::string training_again;
  for (const auto& change : ended.history()) {
    if (change.code() == v1::REASON_CODE_REQUEUED) requeued_ms = change.time_ms();
    if (requeued_ms > 0 && running_again_ms == 0 && change.state() == v1::JOB_STATE_RUNNING) {
      running_again_ms = change.time_ms();
    }
    if (change.reason().find("training again from iteration") != std::string::npos) {
      training_again_ms = change.time_ms();
      training_again = change.reason();
    }
  }
  CHECK(requeued_ms > 0);
  CHECK(running_again_ms >= requeued_ms);
  CHECK(training_again_ms >= running_again_ms);
  for (const auto& d : ended.devices()) CHECK(d.node_name() != lost);
  REQUIRE(cluster.WaitForTerminal(reference, 300s).state() == v1::JOB_STATE_SUCCEEDED);

  // The second attempt started from a checkpoint, not from iteration 0.
  std::string log, err;
  REQUIRE(cluster.RunCli({"logs", victim}, &log, &err) == 0);
  INFO(log.substr(0, 4000));
  const size_t resumed = log.find("resumed from " + victim_dir + "/iter-");
  REQUIRE(resumed != std::string::npos);
  const int64_t resumed_at = std::stoll(log.substr(resumed + 19 + victim_dir.size(), 12));
  CHECK(resumed_at % 10 == 0);
  CHECK(resumed_at > 0);
  // Recovery as the coordinator saw it (docs/benchmarks.md, "Elastic recovery").
  CHECK(training_again.find("training again from iteration " + std::to_string(resumed_at) + ": ") !=
        std::string::npos);
  std::printf(
      "node loss to requeue %lld ms (node timeout %.0f s); requeue to RUNNING (re-plan and "
      "dispatch) %lld ms; RUNNING to the first iteration reported (restart) %lld ms; "
      "progress at the kill %lld, resumed at %lld; history: %s\n",
      static_cast<long long>(requeued_ms - killed_ms), options.node_timeout_s,
      static_cast<long long>(running_again_ms - requeued_ms),
      static_cast<long long>(training_again_ms - running_again_ms),
      static_cast<long long>(iteration_at_kill), static_cast<long long>(resumed_at),
      training_again.c_str());
  const json victim_manifest = FinalManifest(victim_dir);
  const json reference_manifest = FinalManifest(reference_dir);
  CHECK(victim_manifest["files"] == reference_manifest["files"]);
  CHECK(victim_manifest["world_size"] == 2);
}

TEST_CASE("a FG job that re-plans on node loss goes on from its checkpoint on the devices left",
          "[e2e][elastic]") {
  ClusterOptions options;
  options.node_timeout_s = 3;
  LocalCluster cluster(options);
  REQUIRE(cluster.WaitForNodesUp(2));
  const std::string dir = cluster.dir() + "/ck-elastic";
  json spec = CheckpointedJob("elastic", dir);
  spec["gpus"] = 4;  // both workers
  spec.erase("requeue_on_failure");
  spec["on_node_loss"] = "replan";
  std::string id;
  REQUIRE(cluster.Submit(spec, &id).ok());
  cluster.WaitForJob(id, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 25;
  });
  cluster.SignalWorker(1, SIGKILL);
  v1::Job ended = cluster.WaitForTerminal(id, 600s);
  INFO(cli::ToJson(ended));
  REQUIRE(ended.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(ended.devices_size() == 2);
  for (const auto& d : ended.devices()) CHECK(d.node_name() == "node-0");
  bool replanned = false;
  for (const auto& change : ended.history()) {
    replanned |= change.reason().find("re-planned from 4: only 2 schedulable") != std::string::npos;
  }
  CHECK(replanned);
  std::string log, err;
  REQUIRE(cluster.RunCli({"logs", id}, &log, &err) == 0);
  INFO(log.substr(0, 4000));
  // Written by 4 ranks, resumed by 2; the last checkpoint is the 2-rank plan's.
  CHECK(log.find("written by 4 rank(s)") != std::string::npos);
  CHECK(FinalManifest(dir)["world_size"] == 2);
}

TEST_CASE("deepool resize shrinks and grows a running FG job at its checkpoints",
          "[e2e][elastic]") {
  LocalCluster cluster;
  REQUIRE(cluster.WaitForNodesUp(2));
  const std::string dir = cluster.dir() + "/ck-resize";
  json spec = CheckpointedJob("resized", dir);
  spec["gpus"] = 4;  // both workers
  // Each resize takes effect about a progress report (1 s) after it is asked for: the job must
  // still be running by then, with iterations of a few ms on an idle machine.
  constexpr int64_t kResizedIterations = 1000;
  spec["iterations"] = kResizedIterations;
  std::string id;
  REQUIRE(cluster.Submit(spec, &id).ok());
  cluster.WaitForJob(id, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 25;
  });
  std::string out, err;
  const int64_t asked_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  REQUIRE(cluster.RunCli({"resize", id, "--gpus", "2"}, &out, &err) == 0);
  CHECK(out.find("stops at its next checkpoint (every 10 iterations), then resumes on 2") !=
        std::string::npos);
  v1::Job smaller = cluster.WaitForJob(id, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.devices_size() == 2 && j.attempt() == 2 &&
           j.progress().iteration() >= 5;
  });
  CHECK(smaller.spec().gpus() == 2);
  REQUIRE(cluster.RunCli({"resize", id, "--gpus", "4"}, &out, &err) == 0);
  v1::Job ended = cluster.WaitForTerminal(id, 600s);
  INFO(cli::ToJson(ended));
  REQUIRE(ended.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(ended.devices_size() == 4);
  CHECK(ended.attempt() == 3);
  std::vector<std::string> resizes;
  for (const auto& change : ended.history()) {
    if (change.state() == v1::JOB_STATE_PENDING && change.code() == v1::REASON_CODE_RESIZED) {
      resizes.push_back(change.reason());
    }
  }
  REQUIRE(resizes.size() == 2);
  // The first resize as the coordinator saw it (docs/benchmarks.md, "Resizing").
  int64_t stopped_ms = 0, running_ms = 0, training_ms = 0;
  for (const auto& change : ended.history()) {
    if (stopped_ms == 0 && change.code() == v1::REASON_CODE_RESIZED &&
        change.state() == v1::JOB_STATE_PENDING) {
      stopped_ms = change.time_ms();
    } else if (stopped_ms > 0 && running_ms == 0 && change.state() == v1::JOB_STATE_RUNNING &&
               change.code() != v1::REASON_CODE_RESIZED) {
      running_ms = change.time_ms();
    }
    if (running_ms > 0 && training_ms == 0 &&
        change.reason().find("training again from iteration") != std::string::npos) {
      training_ms = change.time_ms();
    }
  }
  std::printf(
      "resize 4 -> 2: asked to stopped at a checkpoint %lld ms; stopped to RUNNING %lld ms; "
      "RUNNING to the first iteration reported %lld ms; %s\n",
      static_cast<long long>(stopped_ms - asked_ms),
      static_cast<long long>(running_ms - stopped_ms),
      static_cast<long long>(training_ms - running_ms), resizes[0].c_str());
  CHECK(resizes[0].find("resized from 4 to 2 devices: stopped at the checkpoint of iteration") !=
        std::string::npos);
  CHECK(resizes[1].find("resized from 2 to 4 devices") != std::string::npos);
  // Each new attempt went on from the checkpoint the previous one stopped at.
  std::string log;
  REQUIRE(cluster.RunCli({"logs", id}, &log, &err) == 0);
  INFO(log.substr(0, 4000));
  CHECK(log.find("written by 4 rank(s)") != std::string::npos);
  CHECK(log.find("written by 2 rank(s)") != std::string::npos);
  CHECK(log.find("resumed from " + dir + "/iter-000000000000") == std::string::npos);
  CHECK(FinalManifest(dir, kResizedIterations)["world_size"] == 4);
}

TEST_CASE("deepool drain --evacuate moves a FG job to the other worker at its next checkpoint",
          "[e2e][elastic]") {
  LocalCluster cluster;
  REQUIRE(cluster.WaitForNodesUp(2));
  const std::string dir = cluster.dir() + "/ck-evacuate";
  std::string id;
  REQUIRE(cluster.Submit(CheckpointedJob("evacuated", dir), &id).ok());
  v1::Job running = cluster.WaitForJob(id, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 15;
  });
  const std::string node = running.devices(0).node_name();
  std::string out, err;
  REQUIRE(cluster.RunCli({"drain", node, "--evacuate"}, &out, &err) == 0);
  INFO(out << err);
  CHECK(out.find(id + " stops at its next checkpoint and resumes on other nodes") !=
        std::string::npos);
  v1::Job ended = cluster.WaitForTerminal(id, 600s);
  INFO(cli::ToJson(ended));
  REQUIRE(ended.state() == v1::JOB_STATE_SUCCEEDED);
  for (const auto& d : ended.devices()) CHECK(d.node_name() != node);
  bool evacuated = false;
  for (const auto& change : ended.history()) {
    evacuated |= change.code() == v1::REASON_CODE_EVACUATED &&
                 change.state() == v1::JOB_STATE_PENDING &&
                 change.reason().find("evacuated from draining node " + node) != std::string::npos;
  }
  CHECK(evacuated);
  std::string log;
  REQUIRE(cluster.RunCli({"logs", id}, &log, &err) == 0);
  CHECK(log.find("resumed from " + dir + "/iter-") != std::string::npos);
}
