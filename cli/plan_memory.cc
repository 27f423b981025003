// `deepool plan`'s device memory (plan_memory.h).
#include "cli/plan_memory.h"

#include <algorithm>
#include <vector>

#include "planner/device_model.h"
#include "planner/memory_model.h"

namespace deepool::cli {

namespace planner = deepool::planner;

double DeviceMemoryGb(double flag_gb, const planner::Cluster& cluster) {
  if (flag_gb >= 0) return flag_gb;
  return planner::DeviceMemoryGbOr(cluster.device_memory_gb, cluster.device_type);
}

StatusOr<planner::OptimizerMemory> OptimizerMemoryFlag(const std::string& name) {
  constexpr double kJobSpecMomentum = 0.9;  // jobspec/job_spec.h's default
  return planner::OptimizerMemoryFor(name, name == "sgd" ? kJobSpecMomentum : 0);
}

void PrintDeviceMemory(const planner::Plan& plan, const planner::Graph& graph,
                       const planner::Profile& profile, const planner::PlanOptions& options,
                       double memory_gb, std::ostream& out) {
  const planner::MemoryModel model(graph, plan.global_batch,
                                   planner::PlanMemoryModelOptions(options, profile));
  const std::vector<planner::DeviceMemory> devices = model.PerDevice(plan);
  if (devices.empty()) return;
  const auto total_less = [](const planner::DeviceMemory& a, const planner::DeviceMemory& b) {
    return a.total() < b.total();
  };
  const auto most = std::max_element(devices.begin(), devices.end(), total_less);
  const auto least = std::min_element(devices.begin(), devices.end(), total_less);
  out << "device memory (predicted peak, memory model): ";
  constexpr size_t kRanksOneByOne = 16;
  if (devices.size() <= kRanksOneByOne) {
    for (size_t rank = 0; rank < devices.size(); ++rank) {
      out << (rank == 0 ? "" : ", ") << "rank " << rank << ' '
          << planner::GiBString(devices[rank].total());
    }
  } else {
    out << "rank " << (most - devices.begin()) << ' ' << planner::GiBString(most->total())
        << " at most, rank " << (least - devices.begin()) << ' '
        << planner::GiBString(least->total()) << " at least";
  }
  out << "\n  rank " << (most - devices.begin()) << ": weights, gradients and optimizer state "
      << planner::GiBString(most->state_bytes) << ", activations "
      << planner::GiBString(most->activation_bytes) << ", workspace "
      << planner::GiBString(most->workspace_bytes) << ", gradient buckets "
      << planner::GiBString(most->communication_bytes) << "; ";
  if (options.device_memory_bytes > 0) {
    out << "a device has " << planner::GiBString(options.device_memory_bytes) << " for a plan ("
        << memory_gb << " GiB, less 8% for the CUDA context and fragmentation)\n";
  } else {
    out << "not checked (no device memory known; --device-memory-gb sets it)\n";
  }
}

}  // namespace deepool::cli
