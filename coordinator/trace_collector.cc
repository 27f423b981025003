#include "coordinator/trace_collector.h"

#include <algorithm>
#include <cmath>

namespace deepool::coordinator {

StatusOr<TraceWindow> ChooseTraceWindow(const JobRecord& job, int iterations) {
  constexpr int kMaxIterations = 100;  // protocol::TraceCommand::kMaxTraceIterations
  if (iterations < 1 || iterations > kMaxIterations) {
    return InvalidArgumentError("iterations: must be 1.." + std::to_string(kMaxIterations));
  }
  if (job.state != JobState::kRunning || job.spec.role == JobRole::kBg) {
    return FailedPreconditionError("job " + job.id + " is " + StateName(job.state) +
                                   (job.spec.role == JobRole::kBg ? " (a BG job)" : "") +
                                   ": only a running FG job can be traced");
  }
  if (job.progress.iteration <= 0) {
    return FailedPreconditionError("job " + job.id +
                                   " has not reported an iteration yet: try again in a moment");
  }
  // The request travels with the answers to the workers' next progress reports (every 200 ms
  // by default) and then through a pipe: about a second, in iterations.
  const double iteration_ms = std::max(job.progress.iteration_ms, 0.1);
  const int64_t lead =
      std::clamp<int64_t>(static_cast<int64_t>(std::ceil(1000 / iteration_ms)), 2, 100'000);
  TraceWindow window;
  window.iterations = iterations;
  window.world_size = static_cast<int>(job.devices.size());
  window.rank_nodes.resize(job.devices.size());
  for (const RankPlacement& placed : job.devices) {
    if (placed.rank >= 0 && placed.rank < window.world_size) {
      window.rank_nodes[placed.rank] = placed.node_id;
    }
  }
  window.first_iteration = job.progress.iteration + lead;
  const int64_t total = job.progress.iterations;
  if (total > 0 && window.first_iteration + iterations > total) {
    // Closer to the end is still worth trying while it is ahead of the job.
    window.first_iteration = total - iterations;
    if (window.first_iteration <= job.progress.iteration + 1) {
      return FailedPreconditionError("job " + job.id + " has " +
                                     std::to_string(total - job.progress.iteration) +
                                     " iterations left, too few to record " +
                                     std::to_string(iterations) + " (ask for fewer iterations)");
    }
  }
  return window;
}

v1::TraceJobResponse TraceResponse(const JobRecord& job, const CollectedTrace& trace) {
  v1::TraceJobResponse response;
  response.set_job_id(job.id);
  response.set_first_iteration(trace.window.first_iteration);
  response.set_iterations(trace.window.iterations);
  response.set_world_size(trace.window.world_size);
  for (const auto& [rank, part] : trace.ranks) {
    v1::RankTimeline* timeline = response.add_ranks();
    timeline->set_rank(rank);
    for (const RankPlacement& placement : job.devices) {
      if (placement.rank != rank) continue;
      timeline->set_node_name(placement.node_name);
      timeline->set_device(placement.device);
    }
    timeline->set_first_iteration(part.first_iteration());
    timeline->set_iterations(part.iterations());
    timeline->set_complete(trace.complete.count(rank) > 0);
    *timeline->mutable_spans() = part.spans();
  }
  return response;
}

StatusOr<int64_t> TraceCollector::Open(const std::string& job_id, const TraceWindow& window) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, request] : requests_) {
    if (request.job_id == job_id) {
      return AlreadyExistsError("a trace of job " + job_id + " is being recorded");
    }
  }
  const int64_t id = next_id_++;
  Request& request = requests_[id];
  request.job_id = job_id;
  request.trace.request_id = id;
  request.trace.window = window;
  return id;
}

std::optional<v1::TraceRequest> TraceCollector::OnReport(
    const std::string& job_id, const std::string& node_id, const std::string& task_id,
    const google::protobuf::RepeatedPtrField<v1::TraceChunk>& parts) {
  std::optional<v1::TraceRequest> send;
  bool any = false;
  std::lock_guard<std::mutex> lock(mu_);
  for (const v1::TraceChunk& part : parts) {
    auto it = requests_.find(part.request_id());
    if (it == requests_.end() || it->second.job_id != job_id) continue;
    Request& request = it->second;
    const std::vector<std::string>& rank_nodes = request.trace.window.rank_nodes;
    if (part.rank() < 0 || part.rank() >= static_cast<int>(rank_nodes.size()) ||
        rank_nodes[part.rank()] != node_id) {
      continue;  // a rank the job does not have, or another node's to report
    }
    const size_t bytes = part.ByteSizeLong();
    if (request.spans + static_cast<size_t>(part.spans_size()) > max_spans_ ||
        request.bytes + bytes > max_bytes_) {
      continue;
    }
    request.spans += static_cast<size_t>(part.spans_size());
    request.bytes += bytes;
    v1::TraceChunk& merged = request.trace.ranks[part.rank()];
    merged.set_rank(part.rank());
    merged.set_request_id(part.request_id());
    merged.set_first_iteration(part.first_iteration());
    merged.set_iterations(part.iterations());
    for (const v1::TraceSpan& span : part.spans()) *merged.add_spans() = span;
    if (part.last()) {
      merged.set_last(true);
      request.trace.complete.insert(part.rank());
    }
    any = true;
  }
  for (auto& [id, request] : requests_) {
    if (request.job_id != job_id || !request.tasks_told.insert(task_id).second) continue;
    v1::TraceRequest r;
    r.set_request_id(id);
    r.set_first_iteration(request.trace.window.first_iteration);
    r.set_iterations(request.trace.window.iterations);
    send = r;
  }
  if (any) arrived_.notify_all();
  return send;
}

void TraceCollector::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
  }
  arrived_.notify_all();
}

bool TraceCollector::CompleteLocked(const Request& request) const {
  return static_cast<int>(request.trace.complete.size()) >= request.trace.window.world_size;
}

CollectedTrace TraceCollector::Collect(int64_t request_id, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return CollectedTrace{};
  arrived_.wait_for(lock, timeout, [&] { return shutting_down_ || CompleteLocked(it->second); });
  CollectedTrace trace = std::move(it->second.trace);
  requests_.erase(it);
  return trace;
}

}  // namespace deepool::coordinator
