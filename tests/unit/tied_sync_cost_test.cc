// The cost model charges a tied parameter's synchronisation (issue 41, point 3) as the runtime
// runs it (worker/runtime/executor_tied.cc): after the gradient buckets, one fp32 all-reduce of
// the tied bytes over the whole world, all of it exposed.
#include <catch2/catch.hpp>
#include <vector>

#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/device_model.h"
#include "planner/gradient_sync.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

Graph Tied(const Graph& base) {
  std::vector<Layer> layers = base.layers();
  layers.back().tied.emplace_back("weight", "transformer.wte.weight");  // lm_head
  auto graph = Graph::Create("gpt_tiny_tied", base.input_shape(), std::move(layers), base.outputs(),
                             base.input_dtype());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

TEST_CASE("A tied parameter adds one exposed world all-reduce of its bytes", "[cost][tied]") {
  auto base = zoo::BuildModel("gpt_tiny");
  REQUIRE(base.ok());
  const Graph tied = Tied(*base);
  const Cluster cluster = ClusterPreset("dgx-a100").value();
  const auto profile = MakeAnalyticalProfile(DevicePreset("a100").value());
  const CostModel untied_model(*base, *profile, cluster, 32);
  const CostModel tied_model(tied, *profile, cluster, 32);
  const int64_t tied_bytes = 256 * 64 * 4;  // lm_head.weight, fp32

  // wte on 2 devices, lm_head on 4, the rest on 8: the world is 8 ranks.
  std::vector<int> counts(static_cast<size_t>(base->num_layers()), 8);
  counts.front() = 2;
  counts.back() = 4;
  const GradientSyncTimeline plain = untied_model.GradientSync(counts).value();
  const GradientSyncTimeline with_tie = tied_model.GradientSync(counts).value();
  const double charge = AllReduceMs(cluster, tied_bytes, 8);
  REQUIRE(charge > 0);
  CHECK(with_tie.exposed_ms == Approx(plain.exposed_ms + charge));
  CHECK(with_tie.all_reduce_ms == Approx(plain.all_reduce_ms + charge));
  REQUIRE(with_tie.buckets.size() == plain.buckets.size() + 1);
  const GradientBucketSync& sync = with_tie.buckets.back();
  CHECK(sync.devices == 8);
  CHECK(sync.bytes == tied_bytes);
  CHECK(sync.layers == std::vector<int>{base->num_layers() - 1});
  CHECK(sync.start_ms >= plain.buckets.back().end_ms);
  // The plan's iteration time carries it too.
  const double plain_ms = untied_model.Evaluate(counts, 8).value().totals.iteration_ms;
  const double tied_ms = tied_model.Evaluate(counts, 8).value().totals.iteration_ms;
  CHECK(tied_ms == Approx(plain_ms + charge));

  // On one device nothing is summed over a network.
  const std::vector<int> one(static_cast<size_t>(base->num_layers()), 1);
  CHECK(tied_model.GradientSync(one).value().exposed_ms ==
        Approx(untied_model.GradientSync(one).value().exposed_ms));
}

}  // namespace
}  // namespace deepool::planner
