#include "worker/runtime/collective_timing.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

namespace deepool::worker {
namespace {

using planner::CollectiveSample;
constexpr int kWarmups = 2;

double MedianMs(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double ElapsedMs(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

torch::Tensor Buffer(int64_t bytes) {
  return torch::ones({std::max<int64_t>(1, bytes / 4)}, torch::kFloat32);
}

// Keeps this thread computing for `ms`, as a training rank does between collectives.
void ComputeFor(double ms) {
  if (ms <= 0) return;
  torch::Tensor a = torch::full({96, 96}, 1.0f / 96);
  const auto start = std::chrono::steady_clock::now();
  while (ElapsedMs(start) < ms) a = torch::mm(a, a);
}

// `runs` all-reduces of `bytes` over `group`, each waited for; their times in ms.
StatusOr<std::vector<double>> AllReduces(Communicator& comm, const RankGroup& group, int64_t bytes,
                                         int runs, double busy_ms) {
  torch::Tensor tensor = Buffer(bytes);
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    ComputeFor(busy_ms);
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(auto work, comm.AllReduceSum(tensor, group));
    RETURN_IF_ERROR(work->Wait(comm.timeout()));
    times.push_back(ElapsedMs(start));
  }
  return times;
}

// `runs` round trips of `bytes` between ranks 0 and 1; rank 0 gets half of each round trip.
StatusOr<std::vector<double>> PingPongs(Communicator& comm, int64_t bytes, int runs,
                                        double busy_ms) {
  torch::Tensor buffer = Buffer(bytes);
  std::vector<double> times;
  const int peer = 1 - comm.rank();
  for (int i = 0; i < runs; ++i) {
    ComputeFor(busy_ms);
    const auto start = std::chrono::steady_clock::now();
    for (int leg = 0; leg < 2; ++leg) {
      const bool sends = (leg == 0) == (comm.rank() == 0);
      ASSIGN_OR_RETURN(auto work, sends ? comm.Send(buffer, peer, i) : comm.Recv(buffer, peer, i));
      RETURN_IF_ERROR(work->Wait(comm.timeout()));
    }
    times.push_back(ElapsedMs(start) / 2);
  }
  return times;
}

}  // namespace

StatusOr<std::vector<CollectiveSample>> TimeCollectives(Communicator& comm,
                                                        const CollectiveTimingOptions& options) {
  const int world = comm.world_size();
  if (world < 2) return InvalidArgumentError("calibration needs at least 2 ranks");
  if (options.repeats < 1 || options.min_bytes < 4 || options.max_bytes < options.min_bytes ||
      !(options.busy_ms >= 0)) {
    return InvalidArgumentError(
        "calibration needs repeats >= 1, 4 <= min_bytes <= max_bytes and busy_ms >= 0");
  }
  std::vector<RankGroup> groups;
  for (int g = 2; g <= world; ++g) {
    RankGroup group;
    for (int r = 0; r < g; ++r) group.push_back(r);
    groups.push_back(group);
  }
  RETURN_IF_ERROR(comm.CreateGroups(groups));
  std::vector<CollectiveSample> samples;
  const int runs = kWarmups + options.repeats;
  for (const RankGroup& group : groups) {
    if (comm.rank() >= static_cast<int>(group.size())) continue;
    for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
      ASSIGN_OR_RETURN(std::vector<double> times,
                       AllReduces(comm, group, bytes, runs, options.busy_ms));
      times.erase(times.begin(), times.begin() + kWarmups);
      samples.push_back({CollectiveSample::Kind::kAllReduce, static_cast<int>(group.size()), bytes,
                         MedianMs(times)});
    }
  }
  if (comm.rank() <= 1) {
    for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
      ASSIGN_OR_RETURN(std::vector<double> times, PingPongs(comm, bytes, runs, options.busy_ms));
      times.erase(times.begin(), times.begin() + kWarmups);
      samples.push_back({CollectiveSample::Kind::kMessage, 2, bytes, MedianMs(times)});
    }
  }
  // Every rank stays until the messages are done: a rank leaving early closes its connections.
  RankGroup world_group = groups.back();
  RETURN_IF_ERROR(AllReduces(comm, world_group, 4, 1, 0).status());
  if (comm.rank() != 0) samples.clear();
  return samples;
}

}  // namespace deepool::worker
