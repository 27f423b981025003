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

std::vector<int> CountsOf(const Plan& plan) {
  std::vector<int> counts;
  for (const LayerPlacement& placement : plan.layers) {
    counts.push_back(static_cast<int>(placement.devices.size()));
  }
  return counts;
}

std::string Title(const Plan& plan) {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f", plan.totals.iteration_ms);
  return plan.model + ", global batch " + std::to_string(plan.global_batch) + " on " +
         std::to_string(plan.num_devices) + " devices: predicted iteration (" + ms + " ms, " +
         plan.profile_source + ")";
}

// Appends spans to the timeline at a running clock, one per device of the layer.
class SpanWriter {
 public:
  explicit SpanWriter(Timeline* timeline) : timeline_(timeline) {}

  void Add(const LayerPlacement& placement, SpanKind kind, double duration_ms, bool always) {
    if (duration_ms <= 0 && !always) return;
    duration_ms = std::max(0.0, duration_ms);
    for (int rank : placement.devices) {
      TimelineSpan span;
      span.track = rank;
      span.kind = kind;
      span.name = placement.layer;
      span.iteration = 0;
      span.start_us = now_ms_ * 1000.0;
      span.duration_us = duration_ms * 1000.0;
      timeline_->spans.push_back(std::move(span));
    }
    now_ms_ += duration_ms;
  }

 private:
  Timeline* timeline_;
  double now_ms_ = 0;
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
  ASSIGN_OR_RETURN(const GradientSyncTimeline sync, model.GradientSync(CountsOf(plan)));
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
  SpanWriter writer(&timeline);
  for (size_t id = 0; id < plan.layers.size(); ++id) {
    const LayerPlacement& placement = plan.layers[id];
    writer.Add(placement, SpanKind::kTransfer, comm[id].transfer_half_ms, false);
    writer.Add(placement, SpanKind::kForward, placement.forward_ms, true);
    writer.Add(placement, SpanKind::kAllReduce, comm[id].forward_sync_ms, false);
  }
  for (size_t id = plan.layers.size(); id-- > 0;) {
    const LayerPlacement& placement = plan.layers[id];
    writer.Add(placement, SpanKind::kBackward, placement.backward_ms, true);
    writer.Add(placement, SpanKind::kAllReduce, comm[id].backward_sync_ms, false);
    writer.Add(placement, SpanKind::kTransfer, comm[id].transfer_half_ms, false);
  }
  // The gradient sync tail, bucket by bucket in the order they run, each layer's share on its
  // devices (a bucket's layers share one device set).
  for (const GradientBucketSync& bucket : sync.buckets) {
    for (int id : bucket.layers) {
      const size_t layer = static_cast<size_t>(id);
      writer.Add(plan.layers[layer], SpanKind::kAllReduce, comm[layer].gradient_tail_ms, false);
    }
  }
  return timeline;
}

}  // namespace deepool::planner
