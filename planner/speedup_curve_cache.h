// A bounded cache of speed-up curves (speedup_curve.h), for policies that need every job's
// curve at every decision while jobs of one model, batch and device type come and go.
//
// Key: everything a curve depends on, as text (SpeedupCurveKey): the graph's digest (a 64-bit
// digest of its JSON, so two graphs that differ anywhere differ in key but for a digest
// collision), the profile's source and precision and the device type (the caller keeps one
// profile per device type, as the coordinator does), the cluster's links and node size, every
// PlanOptions field but devices, and the device counts. A new PlanOptions field must be added to
// the key (the test changes every field and checks the key changes).
//
// Eviction: least recently used beyond `capacity` curves. Threading: thread-safe; one mutex
// guards the table. GetOrPlan plans outside the lock, so two threads asking for a missing curve
// at once may both plan it (the second insertion wins; both are equal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "planner/cluster.h"
#include "planner/graph.h"
#include "planner/profile.h"
#include "planner/search.h"
#include "planner/speedup_curve.h"

namespace deepool::planner {

// The graph's part of a key: a digest of its JSON and the JSON's length. It costs a GraphToJson
// (0.05-0.4 ms on the zoo models), so a caller that asks for one job's curves again and again
// keeps it with the job and passes it to the overloads below.
std::string SpeedupCurveGraphKey(const Graph& graph);

// The cache key of a curve of `graph` under these inputs (file comment).
std::string SpeedupCurveKey(const Graph& graph, const Profile& profile, const Cluster& cluster,
                            const PlanOptions& options, const std::vector<int>& device_counts);
// The same with the graph's part computed beforehand (SpeedupCurveGraphKey).
std::string SpeedupCurveKey(const std::string& graph_key, const Profile& profile,
                            const Cluster& cluster, const PlanOptions& options,
                            const std::vector<int>& device_counts);

class SpeedupCurveCache {
 public:
  explicit SpeedupCurveCache(size_t capacity);  // capacity >= 1 (0 is taken as 1)

  // The cached curve, or PlanSpeedupCurve's (cached when it succeeds; errors are not cached).
  StatusOr<std::shared_ptr<const SpeedupCurve>> GetOrPlan(const Graph& graph,
                                                          const Profile& profile,
                                                          const Cluster& cluster,
                                                          const PlanOptions& options,
                                                          const std::vector<int>& device_counts);

  // The same with the graph's key computed beforehand (SpeedupCurveGraphKey(graph)): a hit then
  // costs microseconds.
  StatusOr<std::shared_ptr<const SpeedupCurve>> GetOrPlan(
      const Graph& graph, const std::string& graph_key, const Profile& profile,
      const Cluster& cluster, const PlanOptions& options, const std::vector<int>& device_counts);

  // The curve under `key` (marked most recently used), or nullptr.
  std::shared_ptr<const SpeedupCurve> Find(const std::string& key);
  // Stores `curve` under `key` as the most recently used, evicting the least recently used
  // beyond the capacity.
  void Insert(const std::string& key, std::shared_ptr<const SpeedupCurve> curve);

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t evictions = 0;
    size_t size = 0;
  };
  Stats stats() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const SpeedupCurve>>;

  const size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first; guarded by mutex_
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;  // guarded by mutex_
  Stats stats_;                                                        // guarded by mutex_
};

}  // namespace deepool::planner
