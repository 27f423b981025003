// End to end on loopback (a real coordinator, two workers with two CPU devices each, real
// executors): a job submitted with `deepool submit --precision bf16` is planned at bf16 and
// trains at bf16, as the run spec each worker was given says, and a job that names no precision
// trains fp32 on CPUs (docs/coordinator.md, "Precision"); a job submitted with
// --accumulation-steps 2 --gradient-precision bf16 is planned for one pass of half its batch and
// every rank's run spec carries both (docs/coordinator.md, "Gradient accumulation").
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tests/e2e/local_cluster.h"

using namespace deepool;
using namespace deepool::e2e;
using nlohmann::json;

namespace {

// The run specs the workers were given for `job_id` (each task's run.json in its work dir).
std::vector<json> RunSpecsOf(const LocalCluster& cluster, const std::string& job_id) {
  std::vector<json> specs;
  for (const auto& entry : fs::recursive_directory_iterator(cluster.dir())) {
    const std::string task = entry.path().parent_path().filename().string();
    if (entry.path().filename() != "run.json" || task.rfind(job_id + ".", 0) != 0) continue;
    std::ifstream in(entry.path());
    specs.push_back(json::parse(in));
  }
  return specs;
}

std::string SubmitWithCli(LocalCluster& cluster, const json& spec,
                          const std::vector<std::string>& flags) {
  const std::string path = cluster.dir() + "/" + spec["name"].get<std::string>() + ".json";
  std::ofstream(path) << spec.dump();
  std::vector<std::string> args{"submit", path, "--detach"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::string out, err;
  INFO(err);
  REQUIRE(cluster.RunCli(args, &out, &err) == 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

TEST_CASE("a job submitted at bf16 trains at bf16 on the CPU cluster and a default one at fp32",
          "[e2e][precision]") {
  LocalCluster cluster;
  const std::string bf16 = SubmitWithCli(cluster, FgJob("bf16", 3, 4), {"--precision", "bf16"});
  v1::Job job = cluster.WaitForTerminal(bf16);
  INFO(cli::ToJson(job));
  REQUIRE(job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(job.spec().precision() == "bf16");
  CHECK(job.progress().iteration() == 3);
  bool planned_at_bf16 = false;
  for (const v1::StateTransition& change : job.history()) {
    planned_at_bf16 |= change.reason() == "planning on 4 cpu devices at bf16";
  }
  CHECK(planned_at_bf16);
  const std::vector<json> specs = RunSpecsOf(cluster, bf16);
  REQUIRE(specs.size() == 2);  // one task per worker
  for (const json& spec : specs) {
    CHECK(spec["precision"] == "bf16");
    CHECK(spec["version"] == 6);
    CHECK(spec["plan"]["profile_source"] == "analytical:cpu (bf16)");
  }

  const std::string fp32 = SubmitWithCli(cluster, FgJob("default", 2, 2), {});
  job = cluster.WaitForTerminal(fp32);
  REQUIRE(job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(job.spec().precision().empty());
  const std::vector<json> fp32_specs = RunSpecsOf(cluster, fp32);
  REQUIRE_FALSE(fp32_specs.empty());
  for (const json& spec : fp32_specs) CHECK_FALSE(spec.contains("precision"));
}

TEST_CASE("a job submitted with 2 accumulation steps and bf16 gradients trains them on every rank",
          "[e2e][precision][accumulation]") {
  LocalCluster cluster;
  // 16 samples an iteration, in two passes of 8 over 2 CPU devices.
  const std::string id =
      SubmitWithCli(cluster, FgJob("accumulated", 3, 2, 16),
                    {"--accumulation-steps", "2", "--gradient-precision", "bf16"});
  const v1::Job job = cluster.WaitForTerminal(id);
  INFO(cli::ToJson(job));
  REQUIRE(job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(job.spec().accumulation_steps() == 2);
  CHECK(job.spec().gradient_precision() == "bf16");
  CHECK(job.progress().iteration() == 3);
  const std::vector<json> specs = RunSpecsOf(cluster, id);
  REQUIRE_FALSE(specs.empty());
  for (const json& spec : specs) {
    CHECK(spec["version"] == 8);
    CHECK(spec["accumulation_steps"] == 2);
    CHECK(spec["gradient_precision"] == "bf16");
    CHECK(spec["plan"]["global_batch"] == 8);  // one pass
  }
}
