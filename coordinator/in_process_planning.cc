#include "coordinator/in_process_planning.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>

#include "common/byte_size.h"
#include "common/limits.h"
#include "coordinator/device_memory.h"
#include "coordinator/initial_weights_check.h"
#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "planner/profile_table.h"
#include "planner/search.h"
#include "planner/speedup_curve.h"
#include "planner/speedup_curve_cache.h"
#include "planner/zoo/zoo.h"

namespace deepool::coordinator {
namespace {

planner::zoo::ModelOptions ModelOptionsOf(const JobSpec& spec) {
  return planner::zoo::JobModelOptions(spec.num_classes, spec.image_size, spec.data.kind);
}

// The graph a job trains: its inline graph, or its zoo model built with the job's options.
StatusOr<planner::Graph> BuildGraph(const JobSpec& spec) {
  if (!spec.graph_json.empty()) {
    StatusOr<planner::Graph> graph = planner::ParseGraphJson(spec.graph_json);
    if (!graph.ok()) return InvalidArgumentError("graph: " + graph.status().message());
    return graph;
  }
  StatusOr<planner::Graph> graph = planner::zoo::BuildModel(spec.model, ModelOptionsOf(spec));
  if (!graph.ok()) return InvalidArgumentError("model: " + graph.status().message());
  return graph;
}

// Refuses a model no device could hold, whatever the plan: every device of a layer keeps the
// layer's weights, gradients and optimizer state, and the devices of any plan together keep the
// activations of the whole global batch for backward, so one of them keeps at least its share.
Status CheckModelFits(const planner::Graph& graph, const JobSpec& spec) {
  if (graph.num_layers() > kMaxGraphLayers) {
    return InvalidArgumentError("graph: has " + std::to_string(graph.num_layers()) +
                                " layers; at most " + std::to_string(kMaxGraphLayers) +
                                " are accepted");
  }
  // Weights, gradients and the optimizer's state: SGD's momentum, or Adam's (AdamW's) two moments.
  const int64_t state_copies = spec.optimizer.name == "sgd" ? 3 : 4;
  const int64_t state_bytes = graph.total_params() * 4 * state_copies;
  if (graph.total_params() > kMaxDeviceMemoryBytes / 16 || state_bytes > kMaxDeviceMemoryBytes) {
    return InvalidArgumentError(
        "model: its weights with their gradients and optimizer state "
        "need more than " +
        FormatBytes(kMaxDeviceMemoryBytes, ByteUnit::kGiB) + " per device");
  }
  // One pass's samples are what the activations hold (accumulation runs the passes one by one).
  const int64_t per_device_batch = (PassBatch(spec) + spec.gpus - 1) / spec.gpus;
  int64_t activation_bytes = 0;
  for (const planner::Layer& layer : graph.layers()) {
    const int64_t layer_bytes = layer.output_bytes * per_device_batch;
    if (layer.output_bytes > kMaxDeviceMemoryBytes / per_device_batch ||
        activation_bytes > kMaxDeviceMemoryBytes - layer_bytes) {
      return InvalidArgumentError(
          "global_batch: the activations of " + std::to_string(per_device_batch) +
          " samples per device (global_batch / accumulation_steps / gpus) need "
          "more than " +
          FormatBytes(kMaxDeviceMemoryBytes, ByteUnit::kGiB) +
          "; use a smaller batch or more gpus");
    }
    activation_bytes += layer_bytes;
  }
  return Status::Ok();
}

// The links of a cluster of `device_type` devices: the matching preset's, reshaped.
planner::Cluster ClusterFor(const ClusterShape& shape) {
  StatusOr<planner::Cluster> base = planner::ClusterPreset(
      planner::DefaultClusterPresetFor(shape.device_type, shape.devices_per_node));
  planner::Cluster cluster = base.ok() ? *base : planner::Cluster{};
  cluster.name = "coordinator:" + shape.device_type;
  cluster.device_type = shape.device_type;
  cluster.nodes = shape.nodes;
  cluster.devices_per_node = shape.devices_per_node;
  if (shape.nodes > 1 && cluster.inter_node.bandwidth_gbps <= 0) {
    cluster.inter_node = cluster.intra_node;
  }
  return cluster;
}

// The plan is for one pass of the job's PassBatch; an iteration of `accumulation_steps` passes is
// predicted to take that many times as long (an upper bound: the gradient all-reduces and the
// optimizer step run once per iteration, not once per pass), and so is each rank's busy time.
PlannedJob ToPlannedJob(const planner::Graph& graph, const planner::Plan& plan,
                        int64_t accumulation_steps) {
  const double passes = static_cast<double>(accumulation_steps);
  PlannedJob out;
  out.graph_json = planner::GraphToJson(graph, -1);
  out.plan_json = planner::PlanToJson(plan, -1);
  out.world_size = plan.num_devices;
  out.iteration_ms = plan.totals.iteration_ms * passes;
  out.rank_busy_ms.assign(static_cast<size_t>(std::max(plan.num_devices, 0)), 0.0);
  for (const planner::LayerPlacement& layer : plan.layers) {
    for (int rank : layer.devices) {
      if (rank >= 0 && rank < plan.num_devices) {
        out.rank_busy_ms[static_cast<size_t>(rank)] +=
            (layer.forward_ms + layer.backward_ms) * passes;
      }
    }
  }
  return out;
}

// What a profile's iteration overhead depends on of the job's optimizer: the kind of step it
// takes. Empty for the default (SGD with momentum, no weight decay), so that keys of profiles
// measured before the optimizer counted stay the same.
std::string OptimizerStepKey(const jobspec::OptimizerSpec& optimizer) {
  std::string step = optimizer.name;
  if (optimizer.name == "sgd") step += optimizer.momentum > 0 ? "+momentum" : "";
  if (optimizer.weight_decay > 0) step += "+weight_decay";
  return step == "sgd+momentum" ? std::string() : "/optimizer=" + step;
}

// Whether a measured profile (the cache's, or a PROFILE task's: `profile_json`, empty for none)
// times the job at `precision`: recorded at it, or unrecorded and fp32 or tf32 (what a
// PROFILE task measures). One for another precision is passed over for the analytical model
// at the job's (the plan's profile_source then names it: "analytical:cpu (bf16)"), and
// refused only when there is no such model (FAILED_PRECONDITION naming both precisions).
StatusOr<bool> UsesMeasuredProfile(const std::string& profile_json,
                                   std::optional<planner::Precision> precision,
                                   bool analytical_at_precision) {
  if (profile_json.empty()) return false;
  if (!precision) return true;
  ASSIGN_OR_RETURN(const std::optional<planner::Precision> recorded,
                   planner::RecordedProfilePrecision(profile_json));
  if (planner::CompatiblePrecisions(recorded, *precision)) return true;
  if (analytical_at_precision) return false;
  return FailedPreconditionError(std::string("the measured profile is for ") +
                                 (recorded ? planner::PrecisionName(*recorded) : "fp32") +
                                 ", the job trains at " + planner::PrecisionName(*precision) +
                                 " and no analytical model times it");
}

// What a FG plan of `spec` on `shape` is searched over: the job's graph, its profile (measured
// or the analytical preset's, both kept here for `profile` to point at), the cluster's links and
// the search options (devices left for the caller). PlanForeground and SpeedupCurve both start
// here, so a job's curve is made from the inputs its plan will be made from.
struct ForegroundInputs {
  explicit ForegroundInputs(planner::Graph g) : graph(std::move(g)) {}
  planner::Graph graph;  // a TableProfile reads it: never moved once parsed against
  std::unique_ptr<planner::Profile> analytical;
  std::unique_ptr<planner::TableProfile> measured;
  const planner::Profile* profile = nullptr;
  planner::Cluster cluster;
  planner::PlanOptions options;
};

StatusOr<std::unique_ptr<ForegroundInputs>> ForegroundInputsFor(const JobSpec& spec,
                                                                const ClusterShape& shape,
                                                                const std::string& profile_json) {
  ASSIGN_OR_RETURN(planner::Graph graph, BuildGraph(spec));
  auto in = std::make_unique<ForegroundInputs>(std::move(graph));
  const std::optional<planner::Precision> precision = spec.precision;
  Status no_analytical = Status::Ok();  // why there is none at the precision, when there is none
  if (StatusOr<planner::DeviceModel> preset =
          precision ? planner::DevicePreset(shape.device_type, *precision)
                    : planner::DevicePreset(shape.device_type);
      preset.ok()) {
    in->analytical = planner::MakeAnalyticalProfile(*preset);
  } else {
    no_analytical = preset.status();
  }
  in->profile = in->analytical.get();
  in->cluster = ClusterFor(shape);
  ASSIGN_OR_RETURN(const bool use_measured,
                   UsesMeasuredProfile(profile_json, precision, in->analytical != nullptr));
  if (use_measured) {
    planner::ProfileOptions options;
    options.allow_extrapolation = true;
    options.fallback = in->analytical.get();
    ASSIGN_OR_RETURN(in->measured, planner::ParseProfileTable(profile_json, in->graph, options));
    in->profile = in->measured.get();
    // Collectives as the profiling host timed them, not a preset's guess (CPU profiles).
    if (in->measured->data().links)
      in->cluster = planner::WithMeasuredLink(in->cluster, *in->measured->data().links);
  }
  if (in->profile == nullptr) {
    if (precision && !no_analytical.ok() && no_analytical.code() != StatusCode::kNotFound) {
      return FailedPreconditionError(
          "no profile at " + std::string(planner::PrecisionName(*precision)) + " for device type " +
          shape.device_type + ": " + no_analytical.message());
    }
    return FailedPreconditionError("no profile for device type " + shape.device_type +
                                   " and no analytical preset for it");
  }
  in->options.global_batch = PassBatch(spec);  // the plan is for one pass
  in->options.amplification_limit = spec.amplification_limit;
  in->options.sync_batch_norm = SynchronizesBatchNorm(spec);
  in->options.concurrent_branches = spec.concurrent_branches;
  in->options.gradient_sync.bucket_bytes = planner::GradientBucketBytes(spec.gradient_bucket_mb);
  in->options.gradient_sync.precision = spec.gradient_precision;
  in->options.precision = precision;
  return in;
}

// The search options planner::CheckMemoryCanFit reads for a plan of `spec` on `shape`: the
// options PlanForeground searches with that bear on memory.
StatusOr<planner::PlanOptions> MemoryCheckOptions(const JobSpec& spec, const ClusterShape& shape) {
  planner::PlanOptions options;
  options.global_batch = PassBatch(spec);
  options.devices = shape.devices;
  options.sync_batch_norm = SynchronizesBatchNorm(spec);
  options.gradient_sync.bucket_bytes = planner::GradientBucketBytes(spec.gradient_bucket_mb);
  options.gradient_sync.precision = spec.gradient_precision;
  options.precision = spec.precision;
  RETURN_IF_ERROR(HoldToDeviceMemory(spec, shape, &options));
  return options;
}

}  // namespace

InProcessPlanningBackend::InProcessPlanningBackend(size_t curve_cache_capacity)
    : curves_(std::make_unique<planner::SpeedupCurveCache>(curve_cache_capacity)) {}

InProcessPlanningBackend::~InProcessPlanningBackend() = default;

Status InProcessPlanningBackend::CheckMemoryCanFit(const JobSpec& spec,
                                                   const ClusterShape& shape) const {
  ASSIGN_OR_RETURN(planner::Graph graph, BuildGraph(spec));
  ASSIGN_OR_RETURN(const planner::PlanOptions options, MemoryCheckOptions(spec, shape));
  return planner::CheckMemoryCanFit(graph, options);
}

Status InProcessPlanningBackend::CheckModel(const JobSpec& spec) const {
  ASSIGN_OR_RETURN(planner::Graph graph, BuildGraph(spec));
  RETURN_IF_ERROR(CheckModelFits(graph, spec));
  RETURN_IF_ERROR(CheckInitialWeightsAtSubmission(spec.init_path, graph));
  if (Status bn = planner::CheckBatchNormTraining(graph, PassBatch(spec)); !bn.ok()) {
    return InvalidArgumentError(
        (spec.accumulation_steps > 1 ? "global_batch / accumulation_steps: " : "global_batch: ") +
        bn.message());
  }
  return Status::Ok();
}

std::string InProcessPlanningBackend::ModelKey(const JobSpec& spec) const {
  std::string key;
  if (!spec.graph_json.empty()) {
    char hash[32];
    std::snprintf(hash, sizeof(hash), "%016zx", std::hash<std::string>{}(spec.graph_json));
    key = std::string("graph:") + hash;
  } else {
    key = planner::zoo::ModelKey(spec.model, ModelOptionsOf(spec));
  }
  return key + OptimizerStepKey(spec.optimizer);
}

StatusOr<std::string> InProcessPlanningBackend::ProfileGraphJson(const JobSpec& spec) const {
  ASSIGN_OR_RETURN(planner::Graph graph, BuildGraph(spec));
  return planner::GraphToJson(graph, -1);
}

bool InProcessPlanningBackend::HasAnalyticalPreset(const std::string& device_type) const {
  return planner::DevicePreset(device_type).ok();
}

std::vector<int64_t> InProcessPlanningBackend::ProfileBatchSizes(const JobSpec& spec) const {
  std::vector<int64_t> sizes;
  const int64_t pass_batch = PassBatch(spec);  // what the plan is for
  for (int64_t b = 1; b < pass_batch; b *= 2) sizes.push_back(b);
  sizes.push_back(pass_batch);
  return sizes;
}

StatusOr<PlannedJob> InProcessPlanningBackend::PlanForeground(
    const JobSpec& spec, const ClusterShape& shape, const std::string& profile_json) const {
  ASSIGN_OR_RETURN(std::unique_ptr<ForegroundInputs> in,
                   ForegroundInputsFor(spec, shape, profile_json));
  in->options.devices = shape.devices;
  RETURN_IF_ERROR(HoldToDeviceMemory(spec, shape, &in->options));
  ASSIGN_OR_RETURN(planner::Plan plan,
                   planner::PlanBurstParallel(in->graph, *in->profile, in->cluster, in->options));
  return ToPlannedJob(in->graph, plan, spec.accumulation_steps);
}

StatusOr<policy::SpeedCurve> InProcessPlanningBackend::SpeedupCurve(
    const JobSpec& spec, const ClusterShape& pool, const std::string& profile_json) const {
  ASSIGN_OR_RETURN(std::unique_ptr<ForegroundInputs> in,
                   ForegroundInputsFor(spec, pool, profile_json));
  RETURN_IF_ERROR(HoldToDeviceMemory(spec, pool, &in->options));
  // Past one sample per device no plan fits.
  const int top = static_cast<int>(std::min<int64_t>(pool.devices, PassBatch(spec)));
  if (top < 1) return InvalidArgumentError("a speed-up curve needs at least one device");
  // Too few devices may not hold the job: the curve starts at the fewest that do, and is 0 (no
  // plan) below them.
  StatusOr<std::shared_ptr<const planner::SpeedupCurve>> planned = InternalError("not planned");
  for (int fewest = 1; fewest <= top; ++fewest) {
    std::vector<int> counts;
    for (int g = fewest; g <= top; ++g) counts.push_back(g);
    planned = curves_->GetOrPlan(in->graph, *in->profile, in->cluster, in->options, counts);
    if (planned.ok() || planned.status().code() != StatusCode::kResourceExhausted) break;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const planner::SpeedupCurve> curve, std::move(planned));
  policy::SpeedCurve speed;
  speed.iteration_s.assign(static_cast<size_t>(top), 0.0);
  for (const planner::SpeedupPoint& point : curve->points) {
    if (point.devices >= 1 && point.devices <= top) {
      speed.iteration_s[static_cast<size_t>(point.devices - 1)] =
          point.plan.totals.iteration_ms * static_cast<double>(spec.accumulation_steps) / 1000;
    }
  }
  return speed;
}

StatusOr<PlannedJob> InProcessPlanningBackend::PlanBackground(const JobSpec& spec,
                                                              const ClusterShape& device) const {
  ASSIGN_OR_RETURN(planner::Graph graph, BuildGraph(spec));
  ClusterShape one = device;
  one.nodes = one.devices_per_node = one.devices = 1;
  ASSIGN_OR_RETURN(const planner::PlanOptions options, MemoryCheckOptions(spec, one));
  // The one-device plan is the widest there is: it fits exactly when the check passes.
  RETURN_IF_ERROR(planner::CheckMemoryCanFit(graph, options));
  planner::Plan plan = planner::DataParallelLayout(graph, PassBatch(spec), 1);
  return ToPlannedJob(graph, plan, spec.accumulation_steps);
}

}  // namespace deepool::coordinator
