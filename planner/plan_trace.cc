// The predicted timeline of a plan (see plan_trace.h).
#include "planner/plan_trace.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace deepool::planner {
namespace {

// A layer's communication, split as the cost model charges it (CostModel::Sum).
struct CommParts {
  double transfer_half_ms = 0;  // each direction of the re-splits into the layer
  double forward_sync_ms = 0;   // batch norm's forward statistics
  double backward_sync_ms = 0;  // batch norm's backward statistics
  double gradient_tail_ms = 0;  // the layer's share of the exposed gradient sync
};

CommParts SplitComm(const LayerPlacement& placement, const CostModel& model, int layer_id,
                    double exposed_gradient_ms) {
  const int devices = static_cast<int>(placement.devices.size());
  const double batch_norm_ms = model.BatchNormSyncMs(layer_id, devices);
  const double sync_ms = 2 * batch_norm_ms + exposed_gradient_ms;
  CommParts parts;
  // comm_ms = re-splits + sync_ms. The plan's own comm_ms is the total that must come out (so
  // the timeline ends at iteration_ms); a rounding-level excess of sync over it is clamped.
  const double comm_ms = std::max(0.0, placement.comm_ms);
  const double scale = sync_ms > comm_ms ? comm_ms / sync_ms : 1.0;
  parts.forward_sync_ms = batch_norm_ms * scale;
  parts.backward_sync_ms = batch_norm_ms * scale;
  parts.gradient_tail_ms = exposed_gradient_ms * scale;
  parts.transfer_half_ms = (comm_ms - sync_ms * scale) / 2;
  return parts;
}

std::string Title(const Plan& plan) {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f", plan.totals.iteration_ms);
  return plan.model + ", global batch " + std::to_string(plan.global_batch) + " on " +
         std::to_string(plan.num_devices) + " devices: predicted iteration (" + ms + " ms, " +
         plan.profile_source + ")";
}

// Appends a span per device of the layer.
class SpanWriter {
 public:
  explicit SpanWriter(Timeline* timeline) : timeline_(timeline) {}

  // Returns the span's end.
  double Add(const LayerPlacement& placement, SpanKind kind, double start_ms, double duration_ms,
             bool always) {
    if (duration_ms <= 0 && !always) return start_ms;
    duration_ms = std::max(0.0, duration_ms);
    for (int rank : placement.devices) {
      TimelineSpan span;
      span.track = rank;
      span.kind = kind;
      span.name = placement.layer;
      span.iteration = 0;
      span.start_us = start_ms * 1000.0;
      span.duration_us = duration_ms * 1000.0;
      timeline_->spans.push_back(std::move(span));
    }
    return start_ms + duration_ms;
  }

  void AddWindows(const LayerPlacement& placement, SpanKind kind,
                  const std::vector<std::pair<double, double>>& windows) {
    for (const auto& [start_ms, end_ms] : windows) {
      Add(placement, kind, start_ms, end_ms - start_ms, false);
    }
  }

 private:
  Timeline* timeline_;
};

}  // namespace

StatusOr<Timeline> PredictedTimeline(const Plan& plan, const CostModel& model) {
  RETURN_IF_ERROR(plan.Validate());
  const Graph& graph = model.graph();
  if (plan.global_batch != model.global_batch()) {
    return InvalidArgumentError("plan's global batch " + std::to_string(plan.global_batch) +
                                " differs from the cost model's " +
                                std::to_string(model.global_batch()));
  }
  if (static_cast<int>(plan.layers.size()) != graph.num_layers()) {
    return InvalidArgumentError("plan has " + std::to_string(plan.layers.size()) +
                                " layers; graph '" + graph.name() + "' has " +
                                std::to_string(graph.num_layers()));
  }
  ASSIGN_OR_RETURN(const GradientSyncTimeline sync, model.GradientSync(RangesOf(plan)));
  const std::vector<double> exposed = ExposedSyncByLayer(sync, graph.num_layers());
  std::vector<CommParts> comm(plan.layers.size());
  for (size_t id = 0; id < plan.layers.size(); ++id) {
    const LayerPlacement& placement = plan.layers[id];
    if (placement.layer != graph.layer(static_cast<int>(id)).name) {
      return InvalidArgumentError("plan layer " + std::to_string(id) + " is '" + placement.layer +
                                  "'; graph '" + graph.name() + "' has '" +
                                  graph.layer(static_cast<int>(id)).name + "' there");
    }
    comm[id] = SplitComm(placement, model, static_cast<int>(id), exposed[id]);
  }

  Timeline timeline;
  timeline.title = Title(plan);
  for (int rank = 0; rank < plan.num_devices; ++rank) {
    timeline.tracks.push_back("rank " + std::to_string(rank));
  }
  ASSIGN_OR_RETURN(const std::vector<ScheduledLayer> schedule, model.Schedule(RangesOf(plan)));
  SpanWriter writer(&timeline);
  for (size_t id = 0; id < plan.layers.size(); ++id) {
    const LayerPlacement& placement = plan.layers[id];
    const ScheduledLayer& at = schedule[id];
    writer.AddWindows(placement, SpanKind::kTransfer, at.resplits_in);
    const double end_ms =
        writer.Add(placement, SpanKind::kForward, at.forward_start_ms, placement.forward_ms, true);
    writer.Add(placement, SpanKind::kAllReduce, end_ms, comm[id].forward_sync_ms, false);
  }
  for (size_t id = plan.layers.size(); id-- > 0;) {
    const LayerPlacement& placement = plan.layers[id];
    const ScheduledLayer& at = schedule[id];
    const double end_ms = writer.Add(placement, SpanKind::kBackward, at.backward_start_ms,
                                     placement.backward_ms, true);
    writer.Add(placement, SpanKind::kAllReduce, end_ms, comm[id].backward_sync_ms, false);
    writer.AddWindows(placement, SpanKind::kTransfer, at.resplits_back);
  }
  // The gradient sync tail after backward, bucket by bucket in the order they run, each layer's
  // share on its devices (a bucket's layers share one device set).
  double tail_ms = sync.backward_end_ms;
  for (const GradientBucketSync& bucket : sync.buckets) {
    for (int id : bucket.layers) {
      const size_t layer = static_cast<size_t>(id);
      tail_ms = writer.Add(plan.layers[layer], SpanKind::kAllReduce, tail_ms,
                           comm[layer].gradient_tail_ms, false);
    }
  }
  return timeline;
}

}  // namespace deepool::planner
