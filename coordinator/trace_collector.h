// Collects the timelines `deepool trace` asks for: TraceJob opens a request for a running FG
// job, the answer to each of the job's tasks' next progress report carries it to that task's
// worker (once per task), the executors record the window and their parts come back in later
// progress reports, and the waiting TraceJob call returns once every rank's last part is in or
// its time is up. Nothing is stored: a request lives only while its caller waits.
//
// Threading: thread-safe (one mutex); Collect blocks its caller (a gRPC handler thread) on a
// condition variable, at most until its deadline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/job.h"
#include "deepool/v1/coordinator.pb.h"
#include "deepool/v1/node.pb.h"

namespace deepool::coordinator {

struct TraceWindow {
  int64_t first_iteration = 0;
  int iterations = 0;
  int world_size = 0;  // the ranks expected to answer
  // By rank: the id of the node it runs on, the only node whose parts for it are taken.
  std::vector<std::string> rank_nodes;
};

struct CollectedTrace {
  int64_t request_id = 0;
  TraceWindow window;
  // By rank: the parts that arrived, merged (first_iteration and iterations from the last).
  std::map<int, v1::TraceChunk> ranks;
  std::set<int> complete;  // ranks whose last part arrived
};

// The window a trace of `job` records: `iterations` (1..100) starting far enough ahead of the
// job's last reported iteration that the request reaches every rank first (about a second of
// iterations, at least 2), and ending before the job's last iteration.
// FAILED_PRECONDITION when the job is not a RUNNING FG job or has too few iterations left.
StatusOr<TraceWindow> ChooseTraceWindow(const JobRecord& job, int iterations);

// TraceJob's answer: the collected parts by rank, named by the job's placement, spans as sent.
v1::TraceJobResponse TraceResponse(const JobRecord& job, const CollectedTrace& trace);

class TraceCollector {
 public:
  // Bounds on the spans one request may gather and on their bytes (span names are a worker's
  // strings), so that a misbehaving worker cannot fill the coordinator's memory: later parts are
  // dropped.
  explicit TraceCollector(size_t max_spans_per_request = 2'000'000,
                          size_t max_bytes_per_request = size_t{256} << 20)
      : max_spans_(max_spans_per_request), max_bytes_(max_bytes_per_request) {}

  // ALREADY_EXISTS while a request for the job is open.
  StatusOr<int64_t> Open(const std::string& job_id, const TraceWindow& window);
  // On a progress report of one of the job's tasks, from node `node_id`: keeps the report's
  // parts for open requests (parts of closed or unknown requests, and parts for ranks the window
  // places on another node, are dropped) and returns the request to send to the task, the first
  // time the task reports while the request is open.
  std::optional<v1::TraceRequest> OnReport(
      const std::string& job_id, const std::string& node_id, const std::string& task_id,
      const google::protobuf::RepeatedPtrField<v1::TraceChunk>& parts);
  // Waits until every rank of the window has sent its last part, or until `timeout`, then
  // closes the request and returns what arrived.
  CollectedTrace Collect(int64_t request_id, std::chrono::milliseconds timeout);
  // Collect returns at once from now on (with what arrived), so that a server can stop.
  void Shutdown();

 private:
  struct Request {
    std::string job_id;
    CollectedTrace trace;
    std::set<std::string> tasks_told;
    size_t spans = 0;
    size_t bytes = 0;  // of the parts kept, as serialised
  };
  bool CompleteLocked(const Request& request) const;

  const size_t max_spans_;
  const size_t max_bytes_;
  std::mutex mu_;
  std::condition_variable arrived_;
  int64_t next_id_ = 1;                  // guarded by mu_
  bool shutting_down_ = false;           // guarded by mu_
  std::map<int64_t, Request> requests_;  // guarded by mu_
};

}  // namespace deepool::coordinator
