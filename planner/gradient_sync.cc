// Gradient synchronisation: formulas and timeline documented in gradient_sync.h and
// docs/planner.md.
#include "planner/gradient_sync.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace deepool::planner {
namespace {

// Both algorithms span ranks 0..g-1, so they leave the node once g exceeds one node's devices;
// at the link's figures for collectives.
Link SlowestLink(const Cluster& cluster, int devices) {
  return (devices > cluster.devices_per_node ? cluster.inter_node : cluster.intra_node)
      .ForCollectives();
}

// ceil(log2 g) for g >= 1, in integers (no rounding at exact powers of two).
int TreeDepth(int devices) {
  int depth = 0;
  while ((int64_t{1} << depth) < devices) ++depth;
  return depth;
}

// A device set's bucket still being filled.
struct OpenBucket {
  GradientBucketSync bucket;
  bool open = false;
  bool started_one = false;  // a bucket of this set already closed this iteration
};

}  // namespace

double RingAllReduceMs(const Cluster& cluster, int64_t bytes, int devices) {
  if (devices <= 1 || bytes <= 0) return 0;
  const Link link = SlowestLink(cluster, devices);
  const double g = devices;
  return 2.0 * (g - 1.0) / g * static_cast<double>(bytes) * link.ms_per_byte() +
         2.0 * (g - 1.0) * link.latency_us / 1000.0;
}

double TreeAllReduceMs(const Cluster& cluster, int64_t bytes, int devices) {
  if (devices <= 1 || bytes <= 0) return 0;
  const Link link = SlowestLink(cluster, devices);
  return 2.0 * static_cast<double>(bytes) * link.ms_per_byte() +
         2.0 * TreeDepth(devices) * link.latency_us / 1000.0;
}

double AllReduceMs(const Cluster& cluster, int64_t bytes, int devices, bool allow_tree) {
  const double ring = RingAllReduceMs(cluster, bytes, devices);
  return allow_tree ? std::min(ring, TreeAllReduceMs(cluster, bytes, devices)) : ring;
}

std::vector<GradientBucketSync> FormGradientBuckets(const std::vector<ReadyGradient>& gradients,
                                                    int64_t bucket_bytes, double backward_end_ms) {
  std::vector<GradientBucketSync> closed;
  std::map<std::pair<int, int>, OpenBucket> by_set;  // by (first device, count)
  for (const ReadyGradient& gradient : gradients) {
    if (gradient.devices < 2 || gradient.bytes <= 0) continue;
    OpenBucket& set = by_set[{gradient.first_device, gradient.devices}];
    if (!set.open) {
      set.bucket = GradientBucketSync{};
      set.bucket.first_device = gradient.first_device;
      set.bucket.devices = gradient.devices;
    }
    set.open = true;
    set.bucket.layers.push_back(gradient.layer_id);
    set.bucket.layer_bytes.push_back(gradient.bytes);
    set.bucket.bytes += gradient.bytes;
    const int64_t cap =
        set.started_one ? bucket_bytes : std::min(bucket_bytes, kFirstGradientBucketBytes);
    if (set.bucket.bytes < cap) continue;
    set.bucket.ready_ms = gradient.ready_ms;
    closed.push_back(std::move(set.bucket));
    set.open = false;
    set.started_one = true;
  }
  // Backward has ended: the open buckets start by first layer, last layers first, as the
  // runtime's FlushGradientBuckets orders them.
  std::vector<GradientBucketSync> flushed;
  for (auto& [device_set, set] : by_set) {
    if (!set.open) continue;
    set.bucket.ready_ms = backward_end_ms;
    flushed.push_back(std::move(set.bucket));
  }
  std::sort(flushed.begin(), flushed.end(),
            [](const auto& a, const auto& b) { return a.layers.front() > b.layers.front(); });
  for (auto& bucket : flushed) closed.push_back(std::move(bucket));
  return closed;
}

GradientSyncTimeline ScheduleGradientSync(const std::vector<ReadyGradient>& gradients,
                                          double backward_end_ms, const Cluster& cluster,
                                          const GradientSyncOptions& options) {
  GradientSyncTimeline timeline;
  timeline.backward_end_ms = backward_end_ms;
  timeline.buckets = FormGradientBuckets(gradients, options.bucket_bytes, backward_end_ms);
  double communicator_free_ms = 0;
  for (GradientBucketSync& bucket : timeline.buckets) {
    const double ready_ms = options.overlap ? bucket.ready_ms : backward_end_ms;
    const double ms =
        AllReduceMs(cluster, AllReducedBytes(bucket.bytes, options), bucket.devices, options.tree);
    bucket.start_ms = std::max(ready_ms, communicator_free_ms);
    bucket.end_ms = bucket.start_ms + ms;
    bucket.exposed_ms = std::max(0.0, bucket.end_ms - std::max(bucket.start_ms, backward_end_ms));
    communicator_free_ms = bucket.end_ms;
    timeline.exposed_ms += bucket.exposed_ms;
    timeline.all_reduce_ms += ms;
  }
  return timeline;
}

void AppendTiedParameterSync(GradientSyncTimeline& timeline, const std::vector<int>& layers,
                             const std::vector<int64_t>& layer_bytes, int world,
                             const Cluster& cluster, const GradientSyncOptions& options) {
  GradientBucketSync sync;
  sync.first_device = 0;
  sync.devices = world;
  sync.layers = layers;
  sync.layer_bytes = layer_bytes;
  for (int64_t bytes : layer_bytes) sync.bytes += bytes;
  if (sync.bytes <= 0 || world <= 1) return;
  double after_ms = timeline.backward_end_ms;
  for (const GradientBucketSync& bucket : timeline.buckets)
    after_ms = std::max(after_ms, bucket.end_ms);
  const double ms = AllReduceMs(cluster, sync.bytes, world, options.tree);  // fp32: not narrowed
  sync.ready_ms = sync.start_ms = after_ms;
  sync.end_ms = after_ms + ms;
  sync.exposed_ms = ms;
  timeline.exposed_ms += ms;
  timeline.all_reduce_ms += ms;
  timeline.buckets.push_back(std::move(sync));
}

std::vector<double> ExposedSyncByLayer(const GradientSyncTimeline& timeline, int num_layers) {
  std::vector<double> exposed(static_cast<size_t>(std::max(0, num_layers)), 0.0);
  for (const GradientBucketSync& bucket : timeline.buckets) {
    if (bucket.exposed_ms <= 0 || bucket.bytes <= 0) continue;
    const double per_byte = bucket.exposed_ms / static_cast<double>(bucket.bytes);
    for (size_t i = 0; i < bucket.layers.size(); ++i) {
      exposed[static_cast<size_t>(bucket.layers[i])] +=
          per_byte * static_cast<double>(bucket.layer_bytes[i]);
    }
  }
  return exposed;
}

double AmortisedAllReduceMs(const Cluster& cluster, int64_t bytes, int devices,
                            const GradientSyncOptions& options) {
  if (bytes <= 0 || devices <= 1) return 0;
  if (bytes >= options.bucket_bytes) {
    return AllReduceMs(cluster, AllReducedBytes(bytes, options), devices, options.tree);
  }
  const int64_t cap = options.bucket_bytes;
  return AllReduceMs(cluster, AllReducedBytes(cap, options), devices, options.tree) *
         static_cast<double>(bytes) / static_cast<double>(cap);
}

int64_t AllReducedBytes(int64_t fp32_bytes, const GradientSyncOptions& options) {
  return fp32_bytes * BytesPerElement(options.precision) / 4;
}

}  // namespace deepool::planner
