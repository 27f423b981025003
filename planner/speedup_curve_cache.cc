// Speed-up curve cache (speedup_curve_cache.h).
#include "planner/speedup_curve_cache.h"

#include <algorithm>
#include <cstdio>

#include "common/content_digest.h"
#include "planner/precision.h"

namespace deepool::planner {
namespace {

// A double written so that any two different values read differently.
std::string Exact(double value) {
  char text[40];
  std::snprintf(text, sizeof text, "%a", value);
  return text;
}

std::string LinkKey(const Link& link) {
  return Exact(link.bandwidth_gbps) + "/" + Exact(link.latency_us) + "/" +
         (link.collective_bandwidth_gbps ? Exact(*link.collective_bandwidth_gbps) : "-") + "/" +
         (link.collective_latency_us ? Exact(*link.collective_latency_us) : "-");
}

}  // namespace

std::string SpeedupCurveGraphKey(const Graph& graph) {
  const std::string graph_json = GraphToJson(graph, -1);
  ContentDigest digest;
  digest.Update(graph_json.data(), graph_json.size());
  return std::to_string(digest.Finish()) + ";" + std::to_string(graph_json.size());
}

std::string SpeedupCurveKey(const Graph& graph, const Profile& profile, const Cluster& cluster,
                            const PlanOptions& options, const std::vector<int>& device_counts) {
  return SpeedupCurveKey(SpeedupCurveGraphKey(graph), profile, cluster, options, device_counts);
}

std::string SpeedupCurveKey(const std::string& graph_key, const Profile& profile,
                            const Cluster& cluster, const PlanOptions& options,
                            const std::vector<int>& device_counts) {
  const std::optional<Precision> profile_precision = profile.precision();
  std::string key = "graph=" + graph_key + ";profile=" + profile.source() + ";" +
                    (profile_precision ? PrecisionName(*profile_precision) : "-") +
                    ";device=" + cluster.device_type + ";intra=" + LinkKey(cluster.intra_node) +
                    ";inter=" + LinkKey(cluster.inter_node) +
                    ";per_node=" + std::to_string(cluster.devices_per_node);
  const GradientSyncOptions& sync = options.gradient_sync;
  key += ";batch=" + std::to_string(options.global_batch) +
         ";limit=" + Exact(options.amplification_limit) +
         ";exhaustive=" + std::to_string(options.exhaustive_counts) +
         ";fuse=" + std::to_string(options.fuse_elementwise) +
         ";granularity=" + std::string(SearchGranularityName(options.granularity)) +
         ";tolerance=" + Exact(options.pareto_tolerance) +
         ";bucket=" + std::to_string(sync.bucket_bytes) +
         ";overlap=" + std::to_string(sync.overlap) + ";tree=" + std::to_string(sync.tree) +
         ";sync_precision=" + PrecisionName(sync.precision) +
         ";concurrent=" + std::to_string(options.concurrent_branches) +
         ";sync_bn=" + std::to_string(options.sync_batch_norm) +
         ";precision=" + (options.precision ? PrecisionName(*options.precision) : "-") +
         ";memory=" + std::to_string(options.device_memory_bytes) +
         ";optimizer=" + std::to_string(static_cast<int>(options.optimizer_memory)) + ";counts=";
  for (int count : device_counts) key += std::to_string(count) + ",";
  return key;
}

SpeedupCurveCache::SpeedupCurveCache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

StatusOr<std::shared_ptr<const SpeedupCurve>> SpeedupCurveCache::GetOrPlan(
    const Graph& graph, const Profile& profile, const Cluster& cluster, const PlanOptions& options,
    const std::vector<int>& device_counts) {
  return GetOrPlan(graph, SpeedupCurveGraphKey(graph), profile, cluster, options, device_counts);
}

StatusOr<std::shared_ptr<const SpeedupCurve>> SpeedupCurveCache::GetOrPlan(
    const Graph& graph, const std::string& graph_key, const Profile& profile,
    const Cluster& cluster, const PlanOptions& options, const std::vector<int>& device_counts) {
  const std::string key = SpeedupCurveKey(graph_key, profile, cluster, options, device_counts);
  if (std::shared_ptr<const SpeedupCurve> known = Find(key)) return known;
  ASSIGN_OR_RETURN(SpeedupCurve curve,
                   PlanSpeedupCurve(graph, profile, cluster, options, device_counts));
  auto planned = std::make_shared<const SpeedupCurve>(std::move(curve));
  Insert(key, planned);
  return planned;
}

std::shared_ptr<const SpeedupCurve> SpeedupCurveCache::Find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = index_.find(key);
  if (found == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  entries_.splice(entries_.begin(), entries_, found->second);
  return found->second->second;
}

void SpeedupCurveCache::Insert(const std::string& key, std::shared_ptr<const SpeedupCurve> curve) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto found = index_.find(key); found != index_.end()) {
    found->second->second = std::move(curve);
    entries_.splice(entries_.begin(), entries_, found->second);
    return;
  }
  entries_.emplace_front(key, std::move(curve));
  index_[key] = entries_.begin();
  while (entries_.size() > capacity_) {
    index_.erase(entries_.back().first);
    entries_.pop_back();
    ++stats_.evictions;
  }
}

SpeedupCurveCache::Stats SpeedupCurveCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats stats = stats_;
  stats.size = entries_.size();
  return stats;
}

}  // namespace deepool::planner
