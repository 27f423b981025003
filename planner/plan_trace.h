// `deepool plan --trace`: the timeline of one training iteration of a plan as the cost model
// predicts it, for the Chrome trace and SVG writers in common/timeline.h. It opens beside a
// measured trace of the same plan (`deepool trace`) with the same tracks ("rank N"), kinds and
// span names (layer names), so a prediction and a measurement can be compared span by span.
//
// Spans sit where the cost model's list schedule puts them (CostModel::Schedule): layers whose
// device sets share a rank run one after another, forward in the plan's (topological) order and
// backward in reverse; concurrent branches on disjoint ranks side by side. A layer's re-splits
// and batch norm statistics take their own slots; the gradient all-reduces run in buckets beside
// backward and only their exposed tail after it is drawn (the hidden part would overlap the
// backward spans). So every span of a layer starts at the same time on each of its ranks, no two
// spans of a rank overlap, and the last span ends at the plan's predicted iteration_ms. A rank
// outside a layer's devices is idle or runs another branch while that layer runs.
// Threading: a pure function; the CostModel it reads is not thread-safe (cost_model.h).
#pragma once

#include "common/status.h"
#include "common/timeline.h"
#include "planner/cost_model.h"
#include "planner/plan.h"

namespace deepool::planner {

// The predicted iteration (iteration 0) of `plan`, which must have been evaluated by `model`'s
// graph, profile, cluster and global batch (as PlanBurstParallel's plans are): the model splits
// each layer's comm_ms into its parts. Tracks are ranks 0..num_devices-1. Per layer, on each of
// its devices, in time order:
//   forward:  transfer (the forward half of the re-splits into the layer), forward, all-reduce
//             (synchronised batch norm's forward statistics);
//   backward: backward, all-reduce (batch norm's backward statistics), transfer (the activation
//             gradients going back: the re-splits' backward half);
//   then the gradient sync tail: per bucket, in the order they run, an all-reduce span per layer
//             of the bucket with its share of the bucket's exposed time.
// Forward and backward spans are always there; transfer and all-reduce spans only when they
// take time. INVALID_ARGUMENT when the plan does not match the model's graph or batch.
StatusOr<Timeline> PredictedTimeline(const Plan& plan, const CostModel& model);

}  // namespace deepool::planner
