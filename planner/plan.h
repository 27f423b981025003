// The plan: which devices (ranks) every layer runs on and with how many samples each.
// Written by the burst-parallel search, read by the runtime's executors and the coordinator.
// JSON: {"format": "deepool.plan", "version": 1, ...} (docs/formats.md).
//
// Sample assignment rule (shared by the planner's cost model and the runtime): a layer with
// devices d_0..d_{g-1} and per-device shares s_0..s_{g-1} (sum = global_batch) gives device d_i
// the contiguous sample range [s_0 + ... + s_{i-1}, s_0 + ... + s_i) of the global batch, in
// the batch's original order. NearEqualShares() produces the default shares.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "planner/profile_environment.h"

namespace deepool::planner {

// B samples over g devices: the first B % g devices get one more. Requires 1 <= g <= B.
std::vector<int64_t> NearEqualShares(int64_t global_batch, int devices);

struct LayerPlacement {
  std::string layer;             // the graph layer's name
  std::vector<int> devices;      // ranks, ascending
  std::vector<int64_t> samples;  // per device, same order; sums to the global batch
  // Predictions (milliseconds), for people and the simulator; the runtime ignores them.
  double forward_ms = 0;
  double backward_ms = 0;
  // Re-splits (forward + backward) into this layer, batch norm statistics all-reduces, and its
  // share of the gradient all-reduces left exposed after backward (cost_model.h).
  double comm_ms = 0;

  // [first, last) samples of the global batch that `rank` holds; {0, 0} if it is not a member.
  std::pair<int64_t, int64_t> SampleRange(int rank) const;
  bool Runs(int rank) const;
};

struct PlanTotals {
  double iteration_ms = 0;
  double gpu_seconds = 0;    // summed busy device time per iteration, in seconds
  double amplification = 0;  // gpu_seconds / the least device time of one device (cost_model.h)
  int devices_used = 0;
};

struct Plan {
  std::string model;
  int64_t global_batch = 0;
  int num_devices = 0;             // ranks 0..num_devices-1 exist; devices_used <= num_devices
  double amplification_limit = 0;  // 0 when unconstrained
  std::string profile_source;      // e.g. "a100 (analytical)", "file:vgg16.json"
  ProfileEnvironment profile_environment;  // what a measured profile was measured on; may be empty
  std::vector<LayerPlacement> layers;      // in the graph's topological order
  PlanTotals totals;
  PlanTotals data_parallel;     // the data-parallel baseline, computed beside the plan
  double single_device_ms = 0;  // iteration time on one device

  // The placement of a layer by name, or nullptr.
  const LayerPlacement* Find(std::string_view layer) const;
  // Checks internal consistency: shares sum to the batch, devices in range and distinct.
  Status Validate() const;
};

inline constexpr int kPlanFormatVersion = 1;
StatusOr<Plan> ParsePlanJson(std::string_view text);
std::string PlanToJson(const Plan& plan, int indent = 2);

// The plan for passes of `batch` samples instead of plan.global_batch (evaluation at another
// batch, Executor::Evaluate): every layer keeps its devices, and each device's samples are scaled
// from the global batch to `batch`, proportionally with largest-remainder rounding so that they
// sum to `batch` (the fractional parts decide who gets the samples left over; ties go to the
// earlier device, so every rank computes the same plan). A device may get 0 samples (when `batch`
// is smaller than a layer's device count, or its share was small): such a plan fails
// Plan::Validate(), and only evaluation runs it (a device then computes nothing for that layer;
// without gradients or batch statistics nothing else needs its samples). The predictions
// (per-layer times, totals, single_device_ms) are for the global batch, so they are cleared.
// With batch == plan.global_batch the shares are unchanged. Requires plan.Validate() and
// batch >= 1.
Plan ScalePlan(const Plan& plan, int64_t batch);

// A plan that runs every layer on all of min(devices, global_batch) ranks with near-equal shares,
// without predictions. Useful for the runtime's tests and as the data-parallel layout.
Plan DataParallelLayout(const class Graph& graph, int64_t global_batch, int devices);

// Validate() plus: the plan has exactly the graph's layers, by name, in the graph's order, and
// CheckBatchNormTraining(graph, plan.global_batch) holds.
Status CheckPlanMatchesGraph(const Plan& plan, const class Graph& graph);

// Batch norm in training needs more than one value per channel. Batch norm is synchronised over
// a layer's device set, which holds the whole global batch in every valid plan, so a batch-norm
// layer sees global_batch x H x W values per channel (H x W: its input's spatial size; 1 for a
// [C] input) whatever the placement. INVALID_ARGUMENT naming the first batch-norm layer, in
// topological order, for which that is 1 (e.g. Inception-v3's AuxLogits.conv1.bn, on a 1x1 map,
// with a global batch of 1): no plan for this batch can train the graph.
Status CheckBatchNormTraining(const class Graph& graph, int64_t global_batch);

// The same for batch norm statistics kept per device (a run spec's "batch_norm": "per_device"):
// each device of a batch-norm layer normalises its own samples, so the fewest samples any of
// its devices holds x H x W must be at least 2. INVALID_ARGUMENT naming the first layer for
// which it is not. Requires CheckPlanMatchesGraph(plan, graph).
Status CheckPerDeviceBatchNormTraining(const Plan& plan, const class Graph& graph);

// The fewest samples each device of layer `layer_id` must hold for the layer to train with
// batch norm statistics kept per device: ceil(2 / (H x W)) for a batch-norm layer (two values
// per channel on every device), 1 for any other layer. The search keeps per-device plans to
// the counts this allows (docs/planner.md, "Batch norm needs two values per channel").
int64_t FewestSamplesPerDevice(const class Graph& graph, int layer_id);

}  // namespace deepool::planner
