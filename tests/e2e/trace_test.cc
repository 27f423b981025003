// `deepool trace` end to end: real daemons and executors record a running job's iterations and
// the CLI writes them as a Chrome trace (and SVG) that matches the job's plan.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "planner/plan.h"
#include "tests/e2e/local_cluster.h"

using namespace deepool;
using namespace deepool::e2e;
using nlohmann::json;

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

planner::Plan PlanOf(LocalCluster& cluster, const std::string& job) {
  v1::GetJobPlanRequest request;
  request.set_job_id(job);
  v1::GetJobPlanResponse response;
  auto context = cli::UnaryContext(5s);
  REQUIRE(cluster.stub().GetJobPlan(context.get(), request, &response).ok());
  StatusOr<planner::Plan> plan = planner::ParsePlanJson(response.plan_json());
  REQUIRE(plan.ok());
  return *plan;
}

}  // namespace

TEST_CASE("deepool trace records every rank's layers of a running job as its plan places them",
          "[e2e]") {
  LocalCluster cluster;
  std::string job, bg;
  REQUIRE(cluster.Submit(FgJob("traced", 1'000'000), &job).ok());
  cluster.WaitForJob(job, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 3;
  });
  // A BG job runs inside one of the FG ranks' executors (every device holds a FG rank): its
  // units are traced on a track of their own beside that rank's.
  REQUIRE(cluster.Submit(BgJob("beside", 1'000'000), &bg).ok());
  cluster.WaitForJob(bg, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_RUNNING && j.progress().iteration() >= 1;
  });
  const std::string trace_path = cluster.dir() + "/traced.json";
  const std::string svg_path = cluster.dir() + "/traced.svg";
  std::string out, err;
  const int code = cluster.RunCli(
      {"trace", job, "-o", trace_path, "--svg", svg_path, "--iterations", "2"}, &out, &err);
  INFO(out << err);
  REQUIRE(code == 0);
  CHECK(out.find("wrote " + trace_path) != std::string::npos);
  CHECK(out.find("rank 3: iterations ") != std::string::npos);

  const planner::Plan plan = PlanOf(cluster, job);  // which layers each rank runs
  REQUIRE(plan.num_devices == 4);

  const json trace = json::parse(ReadFile(trace_path));
  std::map<int, std::string> track_names;
  std::map<int, std::set<std::string>> forwards;  // per track, per iteration below
  std::map<int, std::set<int64_t>> iterations;
  std::map<int, std::set<std::string>> kinds;
  std::set<std::string> bg_units;  // "<track name>: <span name>"
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("ph") == "M" && event.at("name") == "thread_name") {
      track_names[event.at("tid").get<int>()] = event.at("args").at("name").get<std::string>();
    }
    if (event.at("ph") != "X") continue;
    const int track = event.at("tid").get<int>();
    if (event.at("cat") == "background") {
      bg_units.insert(track_names.at(track) + ": " + event.at("name").get<std::string>());
      continue;
    }
    const int64_t iteration = event.at("args").at("iteration").get<int64_t>();
    iterations[track].insert(iteration);
    kinds[track].insert(event.at("cat").get<std::string>());
    if (event.at("cat") == "forward") forwards[track].insert(event.at("name").get<std::string>());
    CHECK(event.at("dur").get<double>() >= 0);
    CHECK(event.at("ts").get<double>() >= 0);
  }
  // A track per rank, and one for the BG job's units when one ran in the window (below).
  REQUIRE(track_names.size() == 4 + bg_units.size());
  for (const auto& [track, name] : track_names) {
    INFO(name);
    if (name.find(" BG") != std::string::npos) continue;
    REQUIRE(name.rfind("rank ", 0) == 0);
    const int rank = std::stoi(name.substr(5));
    // Exactly the layers the plan runs on this rank, forward, in two consecutive iterations.
    std::set<std::string> planned;
    for (const planner::LayerPlacement& layer : plan.layers) {
      if (layer.Runs(rank)) planned.insert(layer.layer);
    }
    CHECK(forwards[track] == planned);
    REQUIRE(iterations[track].size() == 2);
    CHECK(*iterations[track].rbegin() == *iterations[track].begin() + 1);
    if (!planned.empty()) {
      CHECK(kinds[track].count("backward") == 1);
      CHECK(kinds[track].count("optimizer") == 1);
    }
    CHECK(kinds[track].count("wait") == 1);  // every rank waits at least for the loss sum
  }
  const std::string svg = ReadFile(svg_path);
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("rank 3") != std::string::npos);

  // The BG job's units, on a track of their own after the hosting rank's. Its thread runs at
  // idle priority, so on a loaded machine (ctest -j2 beside it, another e2e test starving it
  // for ten 100-iteration windows in a row) a window may see none: the longest windows, again
  // until one shows a unit or two minutes pass.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  int windows = 0;
  for (; bg_units.empty() && std::chrono::steady_clock::now() < deadline; ++windows) {
    out.clear();
    REQUIRE(cluster.RunCli({"trace", job, "-o", trace_path, "--iterations", "100"}, &out, &err) ==
            0);
    // Named: a range-for over a member of a temporary document reads freed memory (before
    // C++23 only the outermost temporary lives on), which once crashed this test.
    const json window = json::parse(ReadFile(trace_path));
    for (const json& event : window.at("traceEvents")) {
      if (event.at("ph") == "M" && event.at("name") == "thread_name") {
        track_names[event.at("tid").get<int>()] = event.at("args").at("name").get<std::string>();
      }
      if (event.at("ph") == "X" && event.at("cat") == "background") {
        bg_units.insert(track_names.at(event.at("tid").get<int>()) + ": " +
                        event.at("name").get<std::string>());
      }
    }
  }
  INFO(windows << " trace windows of 100 iterations");
  REQUIRE(bg_units.size() == 1);
  CHECK(std::regex_match(*bg_units.begin(), std::regex("rank [0-3] BG: unit of " + bg)));

  REQUIRE(cluster.RunCli({"cancel", job}, &out, &err) == 0);
  REQUIRE(cluster.RunCli({"cancel", bg}, &out, &err) == 0);
  cluster.WaitForTerminal(job);
  cluster.WaitForTerminal(bg);

  // A finished job cannot be traced, and the CLI says why.
  out.clear();
  err.clear();
  CHECK(cluster.RunCli({"trace", job}, &out, &err) != 0);
  CHECK(err.find("only a running FG job can be traced") != std::string::npos);
}
