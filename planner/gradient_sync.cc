// Gradient synchronisation: formulas and timeline documented in gradient_sync.h and
// docs/planner.md.
#include "planner/gradient_sync.h"

#include <algorithm>
#include <cmath>
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

// One bucket's all-reduce on the one communicator (the file comment): it starts when the bucket
// has closed (with overlap off, when backward has ended) and the previous all-reduce has ended.
struct AllReduceWindow {
  double ms = 0;
  double start_ms = 0;
  double end_ms = 0;
  double exposed_ms = 0;  // the part after the end of backward
};

AllReduceWindow TimeBucket(int64_t fp32_bytes, int devices, double ready_ms,
                           double communicator_free_ms, double backward_end_ms,
                           const Cluster& cluster, const GradientSyncOptions& options) {
  AllReduceWindow window;
  window.ms = AllReduceMs(cluster, AllReducedBytes(fp32_bytes, options), devices, options.tree);
  window.start_ms = std::max(options.overlap ? ready_ms : backward_end_ms, communicator_free_ms);
  window.end_ms = window.start_ms + window.ms;
  window.exposed_ms = std::max(0.0, window.end_ms - std::max(window.start_ms, backward_end_ms));
  return window;
}

// Whether the runtime all-reduces tied parameters at all (AppendTiedParameterSync).
bool TiedSyncRuns(int64_t tied_bytes, int world) { return tied_bytes > 0 && world > 1; }

// The tied parameters' all-reduce over the whole world: fp32, whatever options.precision.
double TiedSyncMs(int64_t tied_bytes, int world, const Cluster& cluster,
                  const GradientSyncOptions& options) {
  return AllReduceMs(cluster, tied_bytes, world, options.tree);
}

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

void GradientBucketer::Start(int64_t bucket_bytes) {
  bucket_bytes_ = bucket_bytes;
  sets_.clear();
  buckets_.clear();
  order_.clear();
}

int GradientBucketer::Join(const ReadyGradient& gradient) {
  // Backward's neighbours mostly share a set: try the last one before searching.
  if (last_set_ >= sets_.size() || sets_[last_set_].first_device != gradient.first_device ||
      sets_[last_set_].devices != gradient.devices) {
    const auto before = [](const DeviceSet& set, const std::pair<int, int>& key) {
      return std::make_pair(set.first_device, set.devices) < key;
    };
    const std::pair<int, int> key{gradient.first_device, gradient.devices};
    auto found = std::lower_bound(sets_.begin(), sets_.end(), key, before);
    if (found == sets_.end() || found->first_device != key.first || found->devices != key.second) {
      DeviceSet added;
      added.first_device = key.first;
      added.devices = key.second;
      found = sets_.insert(found, added);
    }
    last_set_ = static_cast<size_t>(found - sets_.begin());
  }
  DeviceSet* const set = &sets_[last_set_];
  if (set->open_bucket < 0) {
    set->open_bucket = static_cast<int>(buckets_.size());
    Bucket opened;
    opened.first_device = gradient.first_device;
    opened.devices = gradient.devices;
    opened.first_layer = gradient.layer_id;
    buckets_.push_back(opened);
  }
  const int index = set->open_bucket;
  Bucket& bucket = buckets_[static_cast<size_t>(index)];
  bucket.bytes += gradient.bytes;
  const int64_t cap =
      set->started_one ? bucket_bytes_ : std::min(bucket_bytes_, kFirstGradientBucketBytes);
  if (bucket.bytes >= cap) {
    bucket.ready_ms = gradient.ready_ms;
    order_.push_back(index);
    set->open_bucket = -1;
    set->started_one = true;
  }
  return index;
}

void GradientBucketer::Flush(double backward_end_ms) {
  // Backward has ended: the open buckets start by first layer, last layers first, as the
  // runtime's FlushGradientBuckets orders them. Taken by set, in (first device, count) order,
  // then sorted: the order an ordered map of the sets gave, so ties sort as they always did.
  flushed_.clear();
  for (DeviceSet& set : sets_) {
    if (set.open_bucket < 0) continue;
    buckets_[static_cast<size_t>(set.open_bucket)].ready_ms = backward_end_ms;
    flushed_.push_back(set.open_bucket);
    set.open_bucket = -1;
  }
  std::sort(flushed_.begin(), flushed_.end(), [&](int a, int b) {
    return buckets_[static_cast<size_t>(a)].first_layer >
           buckets_[static_cast<size_t>(b)].first_layer;
  });
  order_.insert(order_.end(), flushed_.begin(), flushed_.end());
}

std::vector<GradientBucketSync> FormGradientBuckets(const std::vector<ReadyGradient>& gradients,
                                                    int64_t bucket_bytes, double backward_end_ms) {
  GradientBucketer bucketer;
  bucketer.Start(bucket_bytes);
  std::vector<int> bucket_of;  // by gradient: the bucket it joined, -1 when skipped
  bucket_of.reserve(gradients.size());
  for (const ReadyGradient& gradient : gradients) bucket_of.push_back(bucketer.Add(gradient));
  bucketer.Flush(backward_end_ms);
  std::vector<GradientBucketSync> buckets(bucketer.order().size());
  std::vector<size_t> position(bucketer.buckets().size());  // by bucket index: where it runs
  for (size_t k = 0; k < buckets.size(); ++k) {
    const int index = bucketer.order()[k];
    const GradientBucketer::Bucket& formed = bucketer.buckets()[static_cast<size_t>(index)];
    position[static_cast<size_t>(index)] = k;
    buckets[k].first_device = formed.first_device;
    buckets[k].devices = formed.devices;
    buckets[k].bytes = formed.bytes;
    buckets[k].ready_ms = formed.ready_ms;
  }
  // Each gradient in the order it came, so every bucket lists its layers in the order they joined.
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (bucket_of[i] < 0) continue;
    GradientBucketSync& bucket = buckets[position[static_cast<size_t>(bucket_of[i])]];
    bucket.layers.push_back(gradients[i].layer_id);
    bucket.layer_bytes.push_back(gradients[i].bytes);
  }
  return buckets;
}

GradientSyncTimeline ScheduleGradientSync(const std::vector<ReadyGradient>& gradients,
                                          double backward_end_ms, const Cluster& cluster,
                                          const GradientSyncOptions& options) {
  GradientSyncTimeline timeline;
  timeline.backward_end_ms = backward_end_ms;
  timeline.buckets = FormGradientBuckets(gradients, options.bucket_bytes, backward_end_ms);
  double communicator_free_ms = 0;
  for (GradientBucketSync& bucket : timeline.buckets) {
    const AllReduceWindow window =
        TimeBucket(bucket.bytes, bucket.devices, bucket.ready_ms, communicator_free_ms,
                   backward_end_ms, cluster, options);
    bucket.start_ms = window.start_ms;
    bucket.end_ms = window.end_ms;
    bucket.exposed_ms = window.exposed_ms;
    communicator_free_ms = bucket.end_ms;
    timeline.exposed_ms += bucket.exposed_ms;
    timeline.all_reduce_ms += window.ms;
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
  if (!TiedSyncRuns(sync.bytes, world)) return;
  double after_ms = timeline.backward_end_ms;
  for (const GradientBucketSync& bucket : timeline.buckets)
    after_ms = std::max(after_ms, bucket.end_ms);
  const double ms = TiedSyncMs(sync.bytes, world, cluster, options);
  sync.ready_ms = sync.start_ms = after_ms;
  sync.end_ms = after_ms + ms;
  sync.exposed_ms = ms;
  timeline.exposed_ms += ms;
  timeline.all_reduce_ms += ms;
  timeline.buckets.push_back(std::move(sync));
}

void ExposedSyncTally::Start(int num_layers, const GradientSyncOptions& options) {
  options_ = options;
  bucketer_.Start(options.bucket_bytes);
  joined_.clear();
  exposed_by_layer_.assign(static_cast<size_t>(std::max(0, num_layers)), 0.0);
  exposed_ms_ = 0;
}

void ExposedSyncTally::Finish(double backward_end_ms, const Cluster& cluster,
                              const std::vector<int>& tied_layers,
                              const std::vector<int64_t>& tied_bytes, int world) {
  bucketer_.Flush(backward_end_ms);
  const std::vector<GradientBucketer::Bucket>& buckets = bucketer_.buckets();
  // ScheduleGradientSync's timeline, keeping only each bucket's exposed part.
  bucket_exposed_ms_.assign(buckets.size(), 0.0);
  double communicator_free_ms = 0;
  for (int index : bucketer_.order()) {
    const GradientBucketer::Bucket& bucket = buckets[static_cast<size_t>(index)];
    const AllReduceWindow window =
        TimeBucket(bucket.bytes, bucket.devices, bucket.ready_ms, communicator_free_ms,
                   backward_end_ms, cluster, options_);
    communicator_free_ms = window.end_ms;
    bucket_exposed_ms_[static_cast<size_t>(index)] = window.exposed_ms;
    exposed_ms_ += window.exposed_ms;
  }
  // ExposedSyncByLayer's shares. A layer joins one bucket, so the order of the buckets does not
  // change its sum; the tied parameters' share comes after, as their bucket comes last.
  for (const Joined& joined : joined_) {
    const double exposed_ms = bucket_exposed_ms_[static_cast<size_t>(joined.bucket)];
    if (exposed_ms <= 0) continue;
    const double per_byte =
        exposed_ms / static_cast<double>(buckets[static_cast<size_t>(joined.bucket)].bytes);
    exposed_by_layer_[static_cast<size_t>(joined.layer_id)] +=
        per_byte * static_cast<double>(joined.bytes);
  }
  int64_t tied_total = 0;
  for (int64_t bytes : tied_bytes) tied_total += bytes;
  if (!TiedSyncRuns(tied_total, world)) return;
  const double tied_ms = TiedSyncMs(tied_total, world, cluster, options_);
  exposed_ms_ += tied_ms;
  if (tied_ms <= 0) return;
  const double per_byte = tied_ms / static_cast<double>(tied_total);
  for (size_t i = 0; i < tied_layers.size(); ++i) {
    exposed_by_layer_[static_cast<size_t>(tied_layers[i])] +=
        per_byte * static_cast<double>(tied_bytes[i]);
  }
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
