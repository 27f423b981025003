// DispatchBuilder alone, with a NodeRegistry on a FakeClock: what a placed job's workers are sent
// (its TRAIN tasks, run spec, hosted BG spec, PROFILE task), its periodic checkpoints, and the
// precision chosen from the nodes' executor protocols.
#include "coordinator/dispatch_builder.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace deepool::coordinator {
namespace {

using nlohmann::json;

struct Cluster {
  FakeClock clock;
  NodeRegistry nodes{&clock, std::chrono::seconds(30)};

  // A node of `count` devices of `type`; its id.
  std::string Add(const std::string& name, const std::string& type, int count,
                  protocol::ProtocolRange protocol = {}) {
    std::vector<DeviceInfo> devices;
    for (int i = 0; i < count; ++i) devices.push_back({"cuda:" + std::to_string(i), type, 0});
    StatusOr<NodeRecord> node = nodes.Register(name, name + ":7000", devices, protocol);
    REQUIRE(node.ok());
    return node->id;
  }
};

JobRecord Job(const std::string& id) {
  JobRecord job;
  job.id = id;
  job.owner = "ana";
  job.spec.model = "mlp";
  job.spec.global_batch = 64;
  job.spec.gpus = 3;
  job.spec.iterations = 10;
  return job;
}

TEST_CASE("train tasks: one per node in rank order with the rank-0 node first and sent",
          "[dispatch_builder]") {
  Cluster cluster;
  const std::string a = cluster.Add("a", "a100", 2);
  const std::string b = cluster.Add("b", "a100", 1);
  DispatchBuilder builder(&cluster.nodes, {/*executor_timeout_s=*/30, "", 600});
  // Rank 0 on b: its node's task comes first though a holds more ranks.
  const std::vector<RankPlacement> placements =
      builder.PlaceRanks({{b, "cuda:0"}, {a, "cuda:0"}, {a, "cuda:1"}});
  REQUIRE(placements.size() == 3);
  CHECK(placements[0].node_name == "b");
  CHECK(placements[2].rank == 2);
  const std::vector<Task> tasks = builder.MakeTrainTasks(Job("j"), 2, placements, "{}", false);
  REQUIRE(tasks.size() == 2);
  CHECK(tasks[0].id == "j.a2." + b);
  CHECK(tasks[0].rank0_node);
  CHECK(tasks[0].phase == TaskPhase::kSent);
  CHECK_FALSE(tasks[1].rank0_node);
  CHECK(tasks[1].phase == TaskPhase::kWaitingForStore);
  const v1::TrainTask& on_a = tasks[1].assignment.train();
  REQUIRE(on_a.ranks_size() == 2);
  CHECK(on_a.ranks(0).rank() == 1);
  CHECK(on_a.ranks(1).device() == "cuda:1");
  CHECK(on_a.world_size() == 3);
  CHECK(on_a.timeout_s() == 30);
  CHECK(on_a.owner() == "ana");
  CHECK(on_a.store_address().empty());
}

TEST_CASE("periodic checkpoints are the spec's or else the cluster default or else none",
          "[dispatch_builder]") {
  Cluster cluster;
  JobRecord job = Job("j");
  DispatchBuilder without_root(&cluster.nodes, {0, "", 600});
  CHECK_FALSE(without_root.PeriodicCheckpointsOf(job).has_value());
  CHECK_FALSE(without_root.StopsAtCheckpoints(job));

  DispatchBuilder with_root(&cluster.nodes, {0, "/ckpt", 120});
  std::optional<protocol::PeriodicCheckpoints> fallback = with_root.PeriodicCheckpointsOf(job);
  REQUIRE(fallback.has_value());
  CHECK(fallback->dir == "/ckpt/j");
  CHECK(fallback->every_seconds == 120);
  CHECK(with_root.StopsAtCheckpoints(job));

  job.spec.checkpoint_dir = "/mine";
  job.spec.checkpoint_every_iterations = 5;
  std::optional<protocol::PeriodicCheckpoints> own = with_root.PeriodicCheckpointsOf(job);
  REQUIRE(own.has_value());
  CHECK(own->dir == "/mine");
  CHECK(own->every_iterations == 5);
  // A directory without an interval writes no checkpoint the job could be stopped at.
  job.spec.checkpoint_every_iterations = 0;
  job.spec.checkpoint_every_seconds = 0;
  CHECK_FALSE(with_root.StopsAtCheckpoints(job));
}

TEST_CASE("the run spec carries the job with its precision and the default checkpoints",
          "[dispatch_builder]") {
  Cluster cluster;
  DispatchBuilder builder(&cluster.nodes, {0, "/ckpt", 60});
  JobRecord job = Job("j");
  job.spec.accumulation_steps = 4;
  const json doc = json::parse(builder.RunSpecJson(job, planner::Precision::kBf16, "{}", "{}"));
  CHECK(doc["job_id"] == "j");
  CHECK(doc["iterations"] == 10);
  CHECK(doc["precision"] == "bf16");
  CHECK(doc["accumulation_steps"] == 4);
  CHECK(doc["checkpoint"]["dir"] == "/ckpt/j");

  const json bg = json::parse(builder.BackgroundJson(job, planner::Precision::kFp32, "{}"));
  CHECK(bg.dump().find("/ckpt/j") != std::string::npos);
}

TEST_CASE("precision: bf16 by default only where every node reads protocol 6",
          "[dispatch_builder]") {
  Cluster cluster;
  const std::string now = cluster.Add("now", "a100", 1);
  const std::string old =
      cluster.Add("old", "a100", 1, {1, protocol::kPrecisionProtocolVersion - 1});
  const std::string cpu = cluster.Add("cpu", "cpu", 1);
  DispatchBuilder builder(&cluster.nodes, {});
  const JobRecord job = Job("j");
  CHECK(builder.PrecisionOn(job, {{now, "cuda:0"}}) == planner::Precision::kBf16);
  CHECK(builder.PrecisionOn(job, {{now, "cuda:0"}, {old, "cuda:0"}}) == planner::Precision::kFp32);
  CHECK(builder.PrecisionOn(job, {{cpu, "cuda:0"}}) == planner::Precision::kFp32);
  CHECK(builder.PrecisionOn(job, {}) == planner::Precision::kFp32);
}

TEST_CASE("a profile task measures the job's graph where the scheduler says",
          "[dispatch_builder]") {
  Cluster cluster;
  DispatchBuilder builder(&cluster.nodes, {});
  const Task task = builder.MakeProfileTask(
      Job("j"),
      {"j.profile.1", {"n1", "cuda:1"}, "a100", "{\"g\":1}", {8, 16}, planner::Precision::kBf16});
  CHECK(task.id == "j.profile.1");
  CHECK(task.node_id == "n1");
  const v1::ProfileTask& profile = task.assignment.profile();
  CHECK(profile.device() == "cuda:1");
  CHECK(profile.device_type() == "a100");
  CHECK(profile.graph_json() == "{\"g\":1}");
  CHECK(profile.batch_sizes_size() == 2);
  CHECK(profile.precision() == "bf16");
  const Task default_precision =
      builder.MakeProfileTask(Job("j"), {"t", {"n1", "cuda:0"}, "a100", "{}", {8}, std::nullopt});
  CHECK(default_precision.assignment.profile().precision().empty());
}

}  // namespace
}  // namespace deepool::coordinator
