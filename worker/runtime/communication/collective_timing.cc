#include "worker/runtime/communication/collective_timing.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace deepool::worker {
namespace {

using planner::CollectiveSample;
constexpr int kWarmups = 2;

double ElapsedMs(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

torch::Tensor Buffer(int64_t bytes) {
  return torch::ones({std::max<int64_t>(1, bytes / 4)}, torch::kFloat32);
}

// Matrix products on this thread: the work a rank does between its collectives.
void Compute(int64_t products) {
  torch::Tensor a = torch::full({96, 96}, 1.0f / 96);
  for (int64_t i = 0; i < products; ++i) a = torch::mm(a, a);
}

// How many products take `busy_ms` here, averaged over `world`, so every rank then does the same
// work and finishes when its share of the machine lets it, as training ranks do: the late rank's
// delay is part of what a blocking collective costs the others. 0 when busy_ms is 0.
StatusOr<int64_t> AgreeOnWork(Communicator& comm, const RankGroup& world, double busy_ms) {
  if (busy_ms <= 0) return 0;
  constexpr int64_t kProbe = 50;
  Compute(kProbe);  // warm-up
  // The fastest of three probes: a probe the scheduler interrupted only overstates the time, and
  // sized from it the work would come out far short of busy_ms on a loaded machine.
  double fastest_ms = std::numeric_limits<double>::infinity();
  for (int probe = 0; probe < 3; ++probe) {
    const auto start = std::chrono::steady_clock::now();
    Compute(kProbe);
    fastest_ms = std::min(fastest_ms, ElapsedMs(start));
  }
  const double products = busy_ms * static_cast<double>(kProbe) / std::max(fastest_ms, 1e-3);
  torch::Tensor sum = torch::full({1}, products, torch::kFloat64);
  ASSIGN_OR_RETURN(auto work, comm.AllReduceSum(sum, world));
  RETURN_IF_ERROR(work->Wait(comm.timeout()));
  return std::max<int64_t>(1, std::llround(sum.item<double>() / static_cast<double>(world.size())));
}

// What a rank does before a timed run: `products` matrix products, or the options' own work.
void Work(int rank, int64_t products, const CollectiveTimingOptions& options) {
  if (products <= 0) return;
  if (options.work) {
    options.work(rank, products);
  } else {
    Compute(products);
  }
}

// `runs` all-reduces of `bytes` over `group`, each waited for after every member's work; their
// times in ms.
StatusOr<std::vector<double>> AllReduces(Communicator& comm, const RankGroup& group, int64_t bytes,
                                         int runs, int64_t products,
                                         const CollectiveTimingOptions& options) {
  torch::Tensor tensor = Buffer(bytes);
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    Work(comm.rank(), products, options);
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(auto work, comm.AllReduceSum(tensor, group));
    RETURN_IF_ERROR(work->Wait(comm.timeout()));
    times.push_back(ElapsedMs(start));
  }
  return times;
}

// `runs` round trips of `bytes` between ranks 0 and 1; rank 0 gets half of each round trip. Only
// the sender (rank 0) works before each: the receiver waits in its receive, as a re-split's
// receiver waits while the producer computes (a backward's gradients most of all). With both
// ranks working, the round trip also held the late rank's lag, which the trimmed mean kept: three
// calibrations on the 2-vCPU VM fitted message latencies of 517-1,293 us, against 105-171 us over
// eight this way, and a plan with a re-split was then predicted up to 3.9x its measured time.
StatusOr<std::vector<double>> PingPongs(Communicator& comm, int64_t bytes, int runs,
                                        int64_t products, const CollectiveTimingOptions& options) {
  torch::Tensor buffer = Buffer(bytes);
  std::vector<double> times;
  const int peer = 1 - comm.rank();
  for (int i = 0; i < runs; ++i) {
    if (comm.rank() == 0) Work(comm.rank(), products, options);
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

double SummariseMs(std::vector<double> times_ms, CollectiveStatistic statistic) {
  std::sort(times_ms.begin(), times_ms.end());
  if (statistic == CollectiveStatistic::kMedian) return times_ms[times_ms.size() / 2];
  const size_t trim = times_ms.size() / 10;
  double sum = 0;
  for (size_t i = trim; i < times_ms.size() - trim; ++i) sum += times_ms[i];
  return sum / static_cast<double>(times_ms.size() - 2 * trim);
}

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
  ASSIGN_OR_RETURN(const int64_t work, AgreeOnWork(comm, groups.back(), options.busy_ms));
  std::vector<CollectiveSample> samples;
  const int runs = kWarmups + options.repeats;
  for (const RankGroup& group : groups) {
    if (comm.rank() >= static_cast<int>(group.size())) continue;
    for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
      ASSIGN_OR_RETURN(std::vector<double> times,
                       AllReduces(comm, group, bytes, runs, work, options));
      times.erase(times.begin(), times.begin() + kWarmups);
      samples.push_back({CollectiveSample::Kind::kAllReduce, static_cast<int>(group.size()), bytes,
                         SummariseMs(times, options.statistic)});
    }
  }
  if (comm.rank() <= 1) {
    for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
      ASSIGN_OR_RETURN(std::vector<double> times, PingPongs(comm, bytes, runs, work, options));
      times.erase(times.begin(), times.begin() + kWarmups);
      samples.push_back(
          {CollectiveSample::Kind::kMessage, 2, bytes, SummariseMs(times, options.statistic)});
    }
  }
  // Every rank stays until the messages are done: a rank leaving early closes its connections.
  RETURN_IF_ERROR(AllReduces(comm, groups.back(), 4, 1, 0, options).status());
  if (comm.rank() != 0) samples.clear();
  return samples;
}

}  // namespace deepool::worker
