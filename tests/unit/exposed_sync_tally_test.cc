// ExposedSyncTally (planner/gradient_sync.h), the allocation-free gradient sync that the cost
// model's totals use: the same exposed tail, per layer and in total, to the last bit, as the
// timeline (ScheduleGradientSync, AppendTiedParameterSync, ExposedSyncByLayer) that
// CostModel::GradientSync and plan traces show.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/device_model.h"
#include "planner/gradient_sync.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

// One iteration's gradients in backward order (descending layer id, rising ready times) on a
// few device sets, with sizes around the first-bucket and default caps, some of them skipped
// (one device, no bytes).
std::vector<ReadyGradient> RandomGradients(std::mt19937& rng, int num_layers) {
  const std::vector<std::pair<int, int>> sets = {{0, 1}, {0, 2}, {0, 8}, {2, 2}, {4, 4}, {0, 4}};
  std::uniform_int_distribution<size_t> set_of(0, sets.size() - 1);
  std::uniform_int_distribution<int64_t> bytes_of(0, 6 << 20);
  std::uniform_real_distribution<double> step_of(0.0, 2.0);
  std::vector<ReadyGradient> gradients;
  double now_ms = 0;
  for (int id = num_layers - 1; id >= 0; --id) {
    const auto [first, devices] = sets[set_of(rng)];
    now_ms += step_of(rng);
    const int64_t bytes = rng() % 5 == 0 ? 0 : bytes_of(rng);
    gradients.push_back(ReadyGradient{id, devices, bytes, now_ms, first});
  }
  return gradients;
}

TEST_CASE("The tally's exposed sync equals the timeline's to the bit", "[gradient_sync][tally]") {
  const Cluster cluster = ClusterPreset("dgx-a100").value();
  std::mt19937 rng(20261206);
  ExposedSyncTally tally;  // one for every case: what one plan leaves must not reach the next
  int exposed_cases = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int num_layers = 1 + trial % 40;
    const std::vector<ReadyGradient> gradients = RandomGradients(rng, num_layers);
    GradientSyncOptions options;
    options.bucket_bytes = std::vector<int64_t>{0, 500'000, 4 << 20, 25 << 20}[trial % 4];
    options.overlap = trial % 3 != 0;
    options.tree = trial % 5 != 0;
    options.precision = trial % 7 == 0 ? Precision::kBf16 : Precision::kFp32;
    const double backward_end_ms = gradients.back().ready_ms + 1.0;
    std::vector<int> tied_layers;
    std::vector<int64_t> tied_bytes;
    if (trial % 2 == 0) {  // the last layer tied twice (two ties), layer 0 once
      tied_layers = {num_layers - 1, 0, num_layers - 1};
      tied_bytes = {1 << 16, 3 << 20, 12'345};
    }
    const int world = 1 + trial % 9;

    GradientSyncTimeline timeline =
        ScheduleGradientSync(gradients, backward_end_ms, cluster, options);
    AppendTiedParameterSync(timeline, tied_layers, tied_bytes, world, cluster, options);
    const std::vector<double> expected = ExposedSyncByLayer(timeline, num_layers);

    tally.Start(num_layers, options);
    for (const ReadyGradient& gradient : gradients) tally.Add(gradient);
    tally.Finish(backward_end_ms, cluster, tied_layers, tied_bytes, world);

    INFO("trial " << trial);
    CHECK(tally.exposed_ms() == timeline.exposed_ms);
    REQUIRE(tally.exposed_by_layer().size() == expected.size());
    for (size_t id = 0; id < expected.size(); ++id) {
      INFO("layer " << id);
      CHECK(tally.exposed_by_layer()[id] == expected[id]);
    }
    if (timeline.exposed_ms > 0) ++exposed_cases;
  }
  CHECK(exposed_cases > 200);  // the cases do expose sync, so the comparison has teeth
}

// The cost model's totals and Evaluate's per-layer figures come from the tally; GradientSync
// from the timeline. Both ways must agree exactly, for the search's nested ranges and for
// concurrent ones (the list schedule), with the same model costing plan after plan.
TEST_CASE("Totals and Evaluate charge the exposed sync the timeline gives", "[cost][tally]") {
  const Cluster cluster = ClusterPreset("dgx-a100").value();
  const auto profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  std::mt19937 rng(7);
  for (const char* name : {"resnet50", "inception_v3", "gpt_tiny"}) {
    auto graph = zoo::BuildModel(name);
    REQUIRE(graph.ok());
    const CostModel model(*graph, *profile, cluster, 32);
    const size_t n = static_cast<size_t>(graph->num_layers());
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<DeviceRange> ranges(n);
      const bool concurrent = trial % 2 == 1;
      for (DeviceRange& range : ranges) {
        const int count = 1 << (rng() % 4);  // 1, 2, 4 or 8
        const int first = concurrent && count < 8 ? count * static_cast<int>(rng() % 2) : 0;
        range = DeviceRange{first, count};
      }
      INFO(name << " trial " << trial);
      const Plan plan = model.Evaluate(ranges, 8).value();
      const GradientSyncTimeline timeline = model.GradientSync(ranges).value();
      const std::vector<double> exposed = ExposedSyncByLayer(timeline, graph->num_layers());
      const std::vector<LayerCost> costs = model.LayerCostsOf(ranges, 8).value();
      REQUIRE(plan.layers.size() == n);
      for (size_t id = 0; id < n; ++id) {
        CHECK(plan.layers[id].comm_ms == costs[id].comm_ms + exposed[id]);
      }
      const PlanTotals totals = model.TotalsOfCosts(ranges, 8, costs).value();
      CHECK(totals.iteration_ms == plan.totals.iteration_ms);
      if (concurrent && !FromRankZero(ranges)) {
        CHECK(totals.iteration_ms == timeline.backward_end_ms + timeline.exposed_ms);
      }
    }
  }
}

// CostOf's charges are kept per (count, layer) in each model (cost_model.h): asked in any order,
// and by models built from another with other options (ring only and small buckets; batch norm
// statistics per device), they are what the formulas give.
TEST_CASE("Cached per-layer charges follow the count and the model's options", "[cost][tally]") {
  const Cluster cluster = ClusterPreset("dgx-a100").value();
  const auto profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  auto graph = zoo::BuildModel("resnet50");
  REQUIRE(graph.ok());
  const CostModel model(*graph, *profile, cluster, 64);
  CostModelOptions ring_small_buckets;
  ring_small_buckets.gradient_sync.tree = false;
  ring_small_buckets.gradient_sync.bucket_bytes = 1 << 20;
  const CostModel other(model, ring_small_buckets);
  CostModelOptions per_device_statistics;
  per_device_statistics.sync_batch_norm = false;
  const CostModel unsynchronised(model, per_device_statistics);
  for (const CostModel* costed : {&model, &other, &unsynchronised}) {
    const GradientSyncOptions& options = costed->options().gradient_sync;
    for (int pass = 0; pass < 2; ++pass) {  // rising counts, then falling: hits and misses
      for (int step = 0; step < 16; ++step) {
        const int devices = pass == 0 ? step + 1 : 16 - step;
        for (int id = 0; id < graph->num_layers(); ++id) {
          const Layer& layer = graph->layer(id);
          const double batch_norm_ms =
              costed->options().sync_batch_norm && layer.op == Op::kBatchNorm2d
                  ? AllReduceMs(cluster, (2 * layer.output_shape.front() + 1) * 8, devices,
                                options.tree)
                  : 0.0;
          INFO("layer " << id << " on " << devices);
          CHECK(costed->BatchNormSyncMs(id, devices) == batch_norm_ms);
          CHECK(costed->AmortisedGradientSyncMs(id, devices) ==
                AmortisedAllReduceMs(cluster, costed->GradientBytes(id), devices, options));
        }
      }
    }
  }
}

}  // namespace
}  // namespace deepool::planner
