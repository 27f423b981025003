// A one-rank executor's iteration minus the layer profile's sum; see iteration_overhead.h.
#include "worker/runtime/profiling/iteration_overhead.h"

#include <algorithm>
#include <memory>
#include <string>

#include "common/clock.h"
#include "planner/plan.h"
#include "worker/runtime/communication/communicator_gloo.h"
#include "worker/runtime/communication/communicator_nccl.h"
#include "worker/runtime/data/data.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/layers/layer_module.h"
#include "worker/runtime/profiling/profiler.h"

namespace deepool::worker {
namespace {

// Sum of forward + backward over the layers at `batch`; NOT_FOUND when a layer lacks it.
StatusOr<double> LayerSumMs(const planner::ProfileData& layers, int64_t batch) {
  double sum = 0;
  for (const planner::LayerProfileData& layer : layers.layers) {
    bool found = false;
    for (const planner::BatchTime& point : layer.batches) {
      if (point.batch != batch) continue;
      sum += point.forward_ms + point.backward_ms;
      found = true;
    }
    if (!found) {
      return NotFoundError("layer " + layer.name + " has no time at batch " +
                           std::to_string(batch));
    }
  }
  return sum;
}

// The median iteration time of a one-rank executor at global batch `batch`.
StatusOr<double> MedianIterationMs(const planner::Graph& graph, Communicator* comm, int64_t batch,
                                   const OverheadOptions& options) {
  const bool cuda = options.device != nullptr && options.device->device().is_cuda();
  ASSIGN_OR_RETURN(std::unique_ptr<DataSource> synthetic,
                   MakeSyntheticDataFor(graph, batch, options.seed));
  std::unique_ptr<DataSource> data =
      WithPrefetch(std::move(synthetic), cuda ? HostMemory::kPinned : HostMemory::kPageable);
  planner::Plan plan = planner::DataParallelLayout(graph, batch, 1);
  plan.num_devices = 1;
  ExecutorOptions executor_options;
  executor_options.seed = options.seed;
  executor_options.optimizer = options.optimizer;
  executor_options.precision = options.precision;
  if (cuda) {
    DeviceContext* device = options.device;
    executor_options.device = device->device();
    executor_options.synchronize = [device] { device->Synchronize(); };
  }
  ASSIGN_OR_RETURN(auto executor, Executor::Create(graph, plan, comm, data.get(), BuildLayerModule,
                                                   executor_options, SystemClock::Get()));
  std::vector<double> times;
  for (int i = 0; i < options.warmup + options.repeats; ++i) {
    ASSIGN_OR_RETURN(const IterationStats stats, executor->Step(i));
    if (i >= options.warmup) times.push_back(stats.iteration_ms);
  }
  return Median(times);
}

}  // namespace

StatusOr<std::vector<planner::OverheadPoint>> MeasureIterationOverhead(
    const planner::Graph& graph, const planner::ProfileData& layers,
    const std::vector<int64_t>& batches, const OverheadOptions& options) {
  if (options.warmup < 0 || options.repeats < 1) {
    return InvalidArgumentError("iteration overhead: warmup must be >= 0 and repeats >= 1");
  }
  CommOptions comm_options;
  comm_options.world_size = 1;
  const bool cuda = options.device != nullptr && options.device->device().is_cuda();
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                   cuda ? ConnectNccl(comm_options) : ConnectGloo(comm_options));
  std::vector<planner::OverheadPoint> points;
  for (int64_t batch : batches) {
    const std::string where = "iteration overhead at batch " + std::to_string(batch);
    StatusOr<double> layer_sum = LayerSumMs(layers, batch);
    if (!layer_sum.ok()) return layer_sum.status().WithContext(where);
    StatusOr<double> iteration = MedianIterationMs(graph, comm.get(), batch, options);
    if (!iteration.ok()) return iteration.status().WithContext(where);
    points.push_back({batch, std::max(0.0, *iteration - *layer_sum)});
  }
  return points;
}

}  // namespace deepool::worker
