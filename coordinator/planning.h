// PlanningBackend: what the scheduler needs from the planner library, behind an interface so the
// scheduler's tests run with a FakePlanningBackend. The product wires InProcessPlanningBackend
// (coordinator/in_process_planning.h), which calls planner/search.h and the zoo in-process.
// Threading: implementations must be safe to call from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/shared_text.h"
#include "common/status.h"
#include "coordinator/job.h"
#include "coordinator/policy/policy.h"

namespace deepool::coordinator {

// The devices a plan is made for: `nodes` nodes of `devices_per_node` devices each (ranks fill
// node 0 first, then node 1, ...), `devices` of them used (a BG plan: one).
struct ClusterShape {
  std::string device_type;
  int nodes = 1;
  int devices_per_node = 1;
  int devices = 1;
  // The least memory among those devices (DeviceMemoryBytes, device_memory.h: what each device
  // reports, else its type preset's memory_gb); plans must fit it. 0: unknown, unchecked.
  int64_t device_memory_bytes = 0;
};

struct PlannedJob {
  SharedText graph_json;             // {"format":"deepool.graph",...}
  SharedText plan_json;              // {"format":"deepool.plan",...}
  int world_size = 1;                // the plan's num_devices
  // Predicted per iteration, all of its accumulation passes (about accumulation_steps times the
  // plan's pass, whose batch is jobspec::PassBatch); 0 when unknown.
  double iteration_ms = 0;
  std::vector<double> rank_busy_ms;  // predicted busy time per rank per iteration
};

class PlanningBackend {
 public:
  virtual ~PlanningBackend() = default;
  // Checks that the spec's model exists / its graph parses and that its global batch can train
  // it (no batch-norm layer left with one value per channel): INVALID_ARGUMENT naming "model",
  // "graph" or "global_batch" otherwise.
  virtual Status CheckModel(const JobSpec& spec) const = 0;
  // Whether some plan of this job on `shape` (its devices and their memory) may fit, by the
  // planner's memory model (planner::CheckMemoryCanFit, at the spec's precision: fp32 when
  // unset): OK when it may (or the memory is unknown), else the planner's RESOURCE_EXHAUSTED
  // naming the layer, its bytes by part and its device count. INVALID_ARGUMENT as CheckModel.
  virtual Status CheckMemoryCanFit(const JobSpec& spec, const ClusterShape& shape) const = 0;
  // The key profiles of this job's model are cached under (with the device type). It names every
  // option the graph depends on, and the kind of optimizer step (a CPU profile's iteration
  // overhead includes it), so jobs whose profiles differ never share one.
  virtual std::string ModelKey(const JobSpec& spec) const = 0;
  // The graph document ({"format":"deepool.graph",...}) a PROFILE task measures: the very graph
  // PlanForeground plans for this spec, every model option applied. INVALID_ARGUMENT as
  // CheckModel.
  virtual StatusOr<std::string> ProfileGraphJson(const JobSpec& spec) const = 0;
  // Whether planning can use an analytical device model for this device type.
  virtual bool HasAnalyticalPreset(const std::string& device_type) const = 0;
  // Per-device batch sizes a PROFILE task should measure for this job.
  virtual std::vector<int64_t> ProfileBatchSizes(const JobSpec& spec) const = 0;
  // A burst-parallel plan that fits the shape's device memory (RESOURCE_EXHAUSTED, the
  // planner's message, when none does). `profile_json` is a measured profile document, or empty
  // to use the device type's analytical preset.
  virtual StatusOr<PlannedJob> PlanForeground(const JobSpec& spec, const ClusterShape& cluster,
                                              const std::string& profile_json) const = 0;
  // The job's speed-up curve on `pool`'s device type, for scheduling policies
  // (policy::PolicyJob::curves): seconds per iteration of the plan PlanForeground would make on
  // g = 1 .. min(pool.devices, global batch) devices in nodes of pool.devices_per_node, from the
  // same inputs (`profile_json` measured, or empty for the analytical preset; the spec's
  // precision; plans held to pool.device_memory_bytes, and 0 on counts too few to hold the job).
  // It may take tens of ms when not cached: callers keep it, off any scheduling lock. Errors as
  // PlanForeground's.
  virtual StatusOr<policy::SpeedCurve> SpeedupCurve(const JobSpec& spec, const ClusterShape& pool,
                                                    const std::string& profile_json) const = 0;
  // A one-device plan for a BG job on `device` (a one-device shape); RESOURCE_EXHAUSTED as
  // PlanForeground when the job does not fit the device's memory.
  virtual StatusOr<PlannedJob> PlanBackground(const JobSpec& spec,
                                              const ClusterShape& device) const = 0;
};

}  // namespace deepool::coordinator
