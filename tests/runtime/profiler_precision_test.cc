// Profiles at a precision (issue 43, point 3; docs/runtime.md, "Profiling at a precision"): the
// layers run as the executor trains at it (forward under autocast, activations 16-bit, backward
// outside autocast), the profile records the precision, and the planner accepts it for a plan at
// that precision and refuses it for another.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "planner/cluster.h"
#include "planner/graph.h"
#include "planner/profile_table.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"
#include "tests/temp_dir.h"
#include "worker/runtime/profiling/profiler.h"

namespace deepool::worker {
namespace {

using deepool::testing::TempDir;

// Records, as each timed run ends, whether the calling thread's CPU ops ran under autocast and
// at which dtype; every duration is 1 ms.
class AutocastRecordingTimer final : public DeviceTimer {
 public:
  struct Stop {
    bool autocast = false;
    torch::ScalarType dtype = torch::kFloat;
  };
  void Start() override {}
  double StopMs() override {
    stops.push_back({at::autocast::is_autocast_enabled(c10::DeviceType::CPU),
                     at::autocast::get_autocast_dtype(c10::DeviceType::CPU)});
    return 1;
  }
  std::vector<Stop> stops;
};

planner::Graph SmallCnn() {
  StatusOr<planner::Graph> graph = planner::zoo::BuildModel("small_cnn");
  REQUIRE(graph.ok());
  return *std::move(graph);
}

StatusOr<planner::ProfileData> ProfileWith(const planner::Graph& graph, DeviceTimer* timer,
                                           std::optional<planner::Precision> precision) {
  ProfilerOptions options;
  options.batch_sizes = {2};
  options.warmup = 0;
  options.repeats = 1;
  options.device_name = "cpu";
  options.precision = precision;
  LayerProfiler profiler(torch::kCPU, timer, options);
  return profiler.Run(graph);
}

TEST_CASE("at bf16 every forward runs under autocast and every backward outside it",
          "[profiler][precision]") {
  const planner::Graph graph = SmallCnn();
  AutocastRecordingTimer timer;
  StatusOr<planner::ProfileData> data = ProfileWith(graph, &timer, planner::Precision::kBf16);
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  CHECK(data->precision == planner::Precision::kBf16);
  // A forward's stop, then its backward's (every small_cnn layer has a backward at batch 2).
  REQUIRE(timer.stops.size() == 2 * static_cast<size_t>(graph.num_layers()));
  for (size_t i = 0; i < timer.stops.size(); i += 2) {
    INFO("layer " << graph.layer(static_cast<int>(i / 2)).name);
    CHECK(timer.stops[i].autocast);
    CHECK(timer.stops[i].dtype == torch::kBFloat16);
    CHECK_FALSE(timer.stops[i + 1].autocast);
  }
  // Unset: no autocast, and nothing recorded (fp32 as profiles always measured).
  AutocastRecordingTimer plain;
  StatusOr<planner::ProfileData> fp32 = ProfileWith(graph, &plain, std::nullopt);
  REQUIRE(fp32.ok());
  CHECK_FALSE(fp32->precision.has_value());
  for (const AutocastRecordingTimer::Stop& stop : plain.stops) CHECK_FALSE(stop.autocast);
}

TEST_CASE("a CPU profile at bf16 records bf16, times differently and plans only at bf16",
          "[profiler][precision]") {
  TempDir dir;
  const planner::Graph graph = SmallCnn();
  auto profile_at = [&](std::optional<planner::Precision> precision, const std::string& name) {
    ProfileToolOptions options;
    options.model = "small_cnn";
    options.batch_sizes = {8};
    options.warmup = 1;
    options.repeats = 3;
    options.iteration_overhead = false;
    options.precision = precision;
    options.output_path = dir.File(name);
    std::ostringstream progress;
    const Status status = RunProfileTool(options, progress);
    INFO(status.ToString());
    REQUIRE(status.ok());
    std::ifstream in(options.output_path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const std::string bf16_json = profile_at(planner::Precision::kBf16, "small_cnn.bf16.json");
  const std::string fp32_json = profile_at(std::nullopt, "small_cnn.json");

  StatusOr<planner::ProfileData> bf16 = planner::ParseProfileJson(bf16_json);
  StatusOr<planner::ProfileData> fp32 = planner::ParseProfileJson(fp32_json);
  REQUIRE(bf16.ok());
  REQUIRE(fp32.ok());
  CHECK(bf16->precision == planner::Precision::kBf16);
  CHECK_FALSE(fp32->precision.has_value());
  // What it was measured on, recorded beside the precision (issue 43, point 7).
  CHECK_FALSE(bf16->environment.torch.empty());
  CHECK_FALSE(bf16->environment.device_model.empty());
  // The convolutions run in bf16 under autocast: their times are not fp32's.
  int differing = 0;
  for (size_t i = 0; i < bf16->layers.size(); ++i) {
    differing +=
        bf16->layers[i].batches.at(0).forward_ms != fp32->layers[i].batches.at(0).forward_ms;
  }
  CHECK(differing > 0);

  // `deepool plan --profile P.bf16 --precision bf16` plans with it; at fp32 it is refused.
  StatusOr<std::unique_ptr<planner::TableProfile>> table =
      planner::ParseProfileTable(bf16_json, graph, {});
  REQUIRE(table.ok());
  planner::PlanOptions options;
  options.global_batch = 8;
  options.devices = 1;
  options.precision = planner::Precision::kBf16;
  const planner::Cluster cluster = *planner::ClusterPreset("cpu-1");
  StatusOr<planner::Plan> at_bf16 = planner::PlanBurstParallel(graph, **table, cluster, options);
  INFO(at_bf16.status().ToString());
  CHECK(at_bf16.ok());
  options.precision = planner::Precision::kFp32;
  StatusOr<planner::Plan> at_fp32 = planner::PlanBurstParallel(graph, **table, cluster, options);
  REQUIRE_FALSE(at_fp32.ok());
  CHECK(at_fp32.status().code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(at_fp32.status().message(), Catch::Contains("bf16"));
}

}  // namespace
}  // namespace deepool::worker
