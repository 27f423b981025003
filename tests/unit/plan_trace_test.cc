// The predicted timeline of a plan: it ends at the plan's iteration time, every layer's spans
// sit on exactly its devices' tracks, spans on a track never overlap, each layer's spans add up
// to its predicted time, and plans that do not match the cost model are refused.
#include "planner/plan_trace.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/device_model.h"
#include "planner/graph.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

constexpr int64_t kBatch = 32;

// A zoo model's plan at G devices (amplification limit 2, as `deepool plan` defaults to), with
// what it was planned from: the cost model keeps references to the graph, profile and cluster.
struct Planned {
  Graph graph;
  std::unique_ptr<Profile> profile;
  Cluster cluster;
  Plan plan;
  Timeline timeline;
};

std::unique_ptr<Planned> PlanAndTrace(const std::string& model_name, int devices) {
  auto graph = zoo::BuildModel(model_name);
  REQUIRE(graph.ok());
  auto cluster = ClusterPreset("dgx-a100");
  REQUIRE(cluster.ok());
  auto planned = std::unique_ptr<Planned>(
      new Planned{*std::move(graph), MakeAnalyticalProfile(DevicePreset("a100").value()),
                  ResizeCluster(*cluster, devices), Plan{}, Timeline{}});
  PlanOptions options;
  options.global_batch = kBatch;
  options.devices = devices;
  options.amplification_limit = 2.0;
  auto plan = PlanBurstParallel(planned->graph, *planned->profile, planned->cluster, options);
  REQUIRE(plan.ok());
  planned->plan = *std::move(plan);
  const CostModel model(planned->graph, *planned->profile, planned->cluster, kBatch);
  auto timeline = PredictedTimeline(planned->plan, model);
  REQUIRE(timeline.ok());
  planned->timeline = *std::move(timeline);
  return planned;
}

// The cases every property is checked on: models with and without batch norm, branches
// (resnet50's residuals, inception's concatenations) and chains, on one node and on two.
struct Case {
  const char* model;
  int devices;
};
constexpr Case kCases[] = {{"resnet50", 1}, {"resnet50", 4}, {"resnet50", 8}, {"resnet50", 16},
                           {"vgg16", 1},    {"vgg16", 8},    {"vgg16", 16},   {"inception_v3", 8}};

TEST_CASE("the predicted timeline ends at the plan's iteration time", "[plan_trace]") {
  for (const Case& c : kCases) {
    INFO(c.model << " on " << c.devices);
    const auto planned = PlanAndTrace(c.model, c.devices);
    double end_us = 0;
    for (const TimelineSpan& span : planned->timeline.spans) {
      end_us = std::max(end_us, span.start_us + span.duration_us);
      CHECK(span.iteration == 0);
      CHECK(span.start_us >= 0);
    }
    const double iteration_us = planned->plan.totals.iteration_ms * 1000.0;
    CHECK(std::abs(end_us - iteration_us) <= 1e-6 * iteration_us);
  }
}

TEST_CASE("the predicted timeline has one track per rank", "[plan_trace]") {
  const auto planned = PlanAndTrace("vgg16", 4);
  CHECK(planned->timeline.tracks ==
        std::vector<std::string>{"rank 0", "rank 1", "rank 2", "rank 3"});
  CHECK_THAT(planned->timeline.title, Catch::Contains("vgg16"));
}

TEST_CASE("a layer's forward span appears once on each of its devices and nowhere else",
          "[plan_trace]") {
  for (const Case& c : kCases) {
    INFO(c.model << " on " << c.devices);
    const auto planned = PlanAndTrace(c.model, c.devices);
    std::map<std::string, std::multiset<int>> forward_tracks;
    std::map<std::string, std::set<double>> forward_starts;
    for (const TimelineSpan& span : planned->timeline.spans) {
      if (span.kind != SpanKind::kForward) continue;
      forward_tracks[span.name].insert(span.track);
      forward_starts[span.name].insert(span.start_us);
    }
    CHECK(forward_tracks.size() == planned->plan.layers.size());
    for (const LayerPlacement& layer : planned->plan.layers) {
      INFO(layer.layer);
      const std::multiset<int> devices(layer.devices.begin(), layer.devices.end());
      CHECK(forward_tracks[layer.layer] == devices);
      // The model is serial: the layer starts at the same time on all its devices.
      CHECK(forward_starts[layer.layer].size() == 1);
    }
  }
}

TEST_CASE("spans on a track never overlap", "[plan_trace]") {
  for (const Case& c : kCases) {
    INFO(c.model << " on " << c.devices);
    const auto planned = PlanAndTrace(c.model, c.devices);
    std::vector<std::vector<const TimelineSpan*>> tracks(planned->timeline.tracks.size());
    for (const TimelineSpan& span : planned->timeline.spans) {
      REQUIRE(span.track >= 0);
      REQUIRE(static_cast<size_t>(span.track) < tracks.size());
      tracks[static_cast<size_t>(span.track)].push_back(&span);
    }
    for (size_t track = 0; track < tracks.size(); ++track) {
      std::vector<const TimelineSpan*>& spans = tracks[track];
      std::stable_sort(spans.begin(), spans.end(),
                       [](const auto* a, const auto* b) { return a->start_us < b->start_us; });
      for (size_t i = 1; i < spans.size(); ++i) {
        const TimelineSpan& before = *spans[i - 1];
        INFO("rank " << track << ": " << before.name << " then " << spans[i]->name);
        // Starts are running sums of the same durations: equal up to rounding.
        CHECK(spans[i]->start_us >= before.start_us + before.duration_us - 1e-6);
      }
    }
  }
}

TEST_CASE("a layer's spans add up to its predicted time with communication split by kind",
          "[plan_trace]") {
  for (const Case& c : kCases) {
    INFO(c.model << " on " << c.devices);
    const auto planned = PlanAndTrace(c.model, c.devices);
    std::map<std::string, std::map<SpanKind, double>> ms;  // on the layer's first device
    for (const TimelineSpan& span : planned->timeline.spans) {
      const LayerPlacement* layer = planned->plan.Find(span.name);
      REQUIRE(layer != nullptr);
      if (span.track == layer->devices.front()) ms[span.name][span.kind] += span.duration_us / 1e3;
    }
    const CostModel model(planned->graph, *planned->profile, planned->cluster, kBatch);
    // All-reduces: batch norm's statistics both ways and the layer's share of the exposed
    // gradient sync tail (the hidden part of the bucketed all-reduces is not drawn).
    const std::vector<double> exposed = ExposedSyncByLayer(
        model.GradientSync(RangesOf(planned->plan)).value(), planned->graph.num_layers());
    for (size_t id = 0; id < planned->plan.layers.size(); ++id) {
      const LayerPlacement& layer = planned->plan.layers[id];
      INFO(layer.layer);
      std::map<SpanKind, double>& kinds = ms[layer.layer];
      const int devices = static_cast<int>(layer.devices.size());
      CHECK(kinds[SpanKind::kForward] == Approx(layer.forward_ms));
      CHECK(kinds[SpanKind::kBackward] == Approx(layer.backward_ms));
      CHECK(kinds[SpanKind::kAllReduce] ==
            Approx(2 * model.BatchNormSyncMs(static_cast<int>(id), devices) + exposed[id])
                .margin(1e-12));
      CHECK(kinds[SpanKind::kTransfer] + kinds[SpanKind::kAllReduce] ==
            Approx(layer.comm_ms).margin(1e-12));
    }
  }
}

TEST_CASE("a plan that the cost model did not evaluate is refused", "[plan_trace]") {
  const auto planned = PlanAndTrace("vgg16", 4);
  auto other_graph = zoo::BuildModel("resnet50");
  REQUIRE(other_graph.ok());
  const CostModel other(*other_graph, *planned->profile, planned->cluster, kBatch);
  auto mismatched = PredictedTimeline(planned->plan, other);
  REQUIRE_FALSE(mismatched.ok());
  CHECK(mismatched.status().code() == StatusCode::kInvalidArgument);

  const CostModel other_batch(planned->graph, *planned->profile, planned->cluster, kBatch * 2);
  auto wrong_batch = PredictedTimeline(planned->plan, other_batch);
  REQUIRE_FALSE(wrong_batch.ok());
  CHECK_THAT(wrong_batch.status().message(), Catch::Contains("global batch"));

  Plan broken = planned->plan;
  broken.layers.front().devices = {0, 9};  // outside num_devices
  const CostModel model(planned->graph, *planned->profile, planned->cluster, kBatch);
  CHECK_FALSE(PredictedTimeline(broken, model).ok());
}

}  // namespace
}  // namespace deepool::planner
