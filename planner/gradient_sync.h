// Gradient synchronisation as deepool's runtime does it (worker/runtime/executor.h, like PyTorch
// DistributedDataParallel): all-reduce cost formulas, bucket formation, and the timeline of the
// bucket all-reduces against backward. Formulas and their reasons are in docs/planner.md,
// "Gradient all-reduce".
//
// - All-reduce of `bytes` over ranks 0..g-1 on the slowest link (inter-node once g exceeds one
//   node), the better of two algorithms, as NCCL picks per call:
//     ring:  2(g-1)/g x bytes / bandwidth + 2(g-1) x latency
//     tree:  2 x bytes / bandwidth + 2 x ceil(log2 g) x latency
//   The tree is NCCL's double binary tree: a reduce up and a broadcast down, each
//   ceil(log2 g) hops deep, so its latency grows like log g, not g. Its bandwidth term is 2 x
//   bytes: each rank is an inner node of one of the two trees (each carrying half the data),
//   where it receives both children's halves and sends its parent one, then the reverse, and a
//   leaf of the other; that adds up to 2 x bytes each way through every rank, against the
//   ring's 2(g-1)/g x bytes. So the ring wins for large buckets on few devices, the tree for
//   small ones on many.
// - Buckets: per device set (ranks first..first+g-1; the search's sets start at rank 0, one set
//   per count), gradients join their set's open bucket in backward order (reverse topological
//   order, i.e. descending layer id); a bucket closes as soon as it holds at least the cap (the
//   first bucket of a set in an iteration: min(cap, 1 MiB)) or when backward ends. Cap 0: one
//   bucket per layer. Layers on one device or without parameters have nothing to synchronise.
// - Timeline: a bucket's all-reduce starts when it closes (the backward of its last layer has
//   ended) and the previous all-reduce has ended: the search's device sets share rank 0 (and
//   ranks 0..g-1 share their links), so the model serialises all gradient all-reduces, as one
//   communicator would (conservative for the disjoint sets of concurrent branches). The buckets
//   still open when backward ends start then, by first layer, last layers first
//   (FlushGradientBuckets' order). Only what runs past the end of backward is exposed; the rest is
//   hidden behind backward. With overlap off every bucket waits for the end of backward, so all of
//   it is exposed (the old, serial charge).
// Approximate: hidden all-reduces share the links with the backward re-splits of the same time
// and are assumed not to slow them (nor the compute, whose SMs NCCL's kernels share).
// Threading: pure functions over plain values; GradientBucketer and ExposedSyncTally are scratch
// storage, one per thread.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/cluster.h"
#include "planner/precision.h"

namespace deepool::planner {

// The gradient bucket cap of a job whose spec sets no gradient_bucket_mb: DDP's bucket_cap_mb.
// The one default: the job spec, the run spec, the executor's options and this cost model (and
// `deepool plan --gradient-bucket-mb`) all start from it, so the plan charges the buckets the
// runtime makes.
inline constexpr double kDefaultGradientBucketMb = 25;
// Larger caps are refused (job spec, run spec): far past any model's gradients, so a typo.
inline constexpr double kMaxGradientBucketMb = 4096;
// The first bucket of a device set in an iteration closes at this size, as DDP's first bucket
// does, so communication starts early; in the runtime and the cost model alike.
inline constexpr int64_t kFirstGradientBucketBytes = int64_t{1} << 20;
// A cap in MiB (fractions allowed) as bytes, the unit the executor and the cost model count in.
constexpr int64_t GradientBucketBytes(double mb) { return static_cast<int64_t>(mb * (1 << 20)); }

struct GradientSyncOptions {
  // Bucket cap in bytes (>= 0; 0: one all-reduce per layer), as ExecutorOptions'
  // gradient_bucket_bytes.
  int64_t bucket_bytes = GradientBucketBytes(kDefaultGradientBucketMb);
  // Start each bucket's all-reduce as soon as it is full, hidden behind the rest of backward.
  // false: every all-reduce runs after backward (nothing hidden), for comparisons.
  bool overlap = true;
  // Allow the tree algorithm; false: ring only (the old model's all-reduce).
  bool tree = true;
  // The width the gradients are all-reduced at. fp32 (the default, tf32 the same): DDP
  // all-reduces the fp32 gradients whatever the compute precision. bf16 or fp16: as a
  // compression hook (DDP's bf16_compress_hook) sends them. Buckets are still formed by the
  // fp32 bytes (ReadyGradient::bytes, bucket_bytes); each all-reduce moves BytesPerElement / 4 of
  // them.
  Precision precision = Precision::kFp32;
};

// The bytes an all-reduce of `fp32_bytes` of gradients moves at options.precision.
int64_t AllReducedBytes(int64_t fp32_bytes, const GradientSyncOptions& options);

// The two algorithms' times and the better of them; 0 for devices <= 1 or bytes <= 0.
double RingAllReduceMs(const Cluster& cluster, int64_t bytes, int devices);
double TreeAllReduceMs(const Cluster& cluster, int64_t bytes, int devices);
double AllReduceMs(const Cluster& cluster, int64_t bytes, int devices, bool allow_tree = true);

// A layer's parameter gradients, complete at ready_ms (the end of its backward computation).
struct ReadyGradient {
  int layer_id = 0;
  int devices = 1;
  int64_t bytes = 0;
  double ready_ms = 0;
  int first_device = 0;  // the layer's ranks: first_device..first_device+devices-1
};

struct GradientBucketSync {
  int first_device = 0;
  int devices = 0;
  std::vector<int> layers;           // in the order they joined (backward order)
  std::vector<int64_t> layer_bytes;  // each layer's gradient bytes, same order
  int64_t bytes = 0;                 // their sum
  double ready_ms = 0;               // when it closed
  double start_ms = 0;
  double end_ms = 0;
  double exposed_ms = 0;  // the part of [start, end) after the end of backward
};

struct GradientSyncTimeline {
  std::vector<GradientBucketSync> buckets;  // in the order their all-reduces run
  double backward_end_ms = 0;
  double exposed_ms = 0;     // sum of the buckets' exposed parts: the sync tail after backward
  double all_reduce_ms = 0;  // sum of the buckets' all-reduce times, hidden or not
};

// The buckets the runtime forms from `gradients` (given in backward order), in the order their
// all-reduces start; start, end and exposed are left 0. Gradients of layers on one device or of
// no bytes are skipped.
std::vector<GradientBucketSync> FormGradientBuckets(const std::vector<ReadyGradient>& gradients,
                                                    int64_t bucket_bytes, double backward_end_ms);

// FormGradientBuckets' rule (the file comment), fed one gradient at a time, over storage kept
// from one iteration to the next: which bucket each gradient joins and the order the buckets'
// all-reduces start, without per-bucket layer lists. FormGradientBuckets is built on it, and so
// is ExposedSyncTally, which the search's totals call for every plan they cost (so that they
// allocate nothing once the storage has grown).
class GradientBucketer {
 public:
  struct Bucket {
    int first_device = 0;
    int devices = 0;
    int first_layer = 0;  // the layer whose gradient opened it
    int64_t bytes = 0;    // its gradients' fp32 bytes
    double ready_ms = 0;  // when it closed
  };

  // Forgets the last iteration's buckets; `bucket_bytes` is FormGradientBuckets' cap.
  void Start(int64_t bucket_bytes);
  // The next gradient in backward order: the index (into buckets()) of the bucket it joins, or
  // -1 when it is skipped (one device or no bytes). Inline: most of a plan's layers are skipped.
  int Add(const ReadyGradient& gradient) {
    return gradient.devices < 2 || gradient.bytes <= 0 ? -1 : Join(gradient);
  }
  // Backward ended: closes the buckets still open, as FormGradientBuckets does.
  void Flush(double backward_end_ms);
  // By index, in the order they opened.
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // After Flush: every bucket's index, in the order their all-reduces start.
  const std::vector<int>& order() const { return order_; }

 private:
  // Add for a gradient that is synchronised.
  int Join(const ReadyGradient& gradient);

  struct DeviceSet {
    int first_device = 0;
    int devices = 0;
    int open_bucket = -1;      // its bucket being filled, -1 when none
    bool started_one = false;  // a bucket of this set already closed this iteration
  };
  int64_t bucket_bytes_ = 0;
  // Ordered by (first device, count). A flat vector: a plan has few distinct sets.
  std::vector<DeviceSet> sets_;
  size_t last_set_ = 0;  // the set of the last gradient that joined a bucket
  std::vector<Bucket> buckets_;
  std::vector<int> order_;
  std::vector<int> flushed_;  // Flush's, kept for its capacity
};

// Each layer's part of the exposed gradient sync and the exposed total, to the bit what
// ScheduleGradientSync, then AppendTiedParameterSync, then ExposedSyncByLayer give for the same
// gradients, without the timeline's per-bucket lists: the search's totals need no more. Its
// storage is kept from one plan to the next. Each layer's gradient may come at most once.
// Threading: one per thread (it is scratch).
class ExposedSyncTally {
 public:
  // Starts an iteration of `num_layers` layers.
  void Start(int num_layers, const GradientSyncOptions& options);
  // The next gradient in backward order, as ScheduleGradientSync's list.
  void Add(const ReadyGradient& gradient) {
    const int bucket = bucketer_.Add(gradient);
    if (bucket >= 0) joined_.push_back(Joined{gradient.layer_id, bucket, gradient.bytes});
  }
  // Backward ended at backward_end_ms: closes and times the buckets, then the tied parameters'
  // all-reduce of `tied_layers` by `tied_bytes` over ranks 0..world-1, and shares the exposed
  // time out by bytes.
  void Finish(double backward_end_ms, const Cluster& cluster, const std::vector<int>& tied_layers,
              const std::vector<int64_t>& tied_bytes, int world);
  // GradientSyncTimeline::exposed_ms.
  double exposed_ms() const { return exposed_ms_; }
  // ExposedSyncByLayer: one entry per layer.
  const std::vector<double>& exposed_by_layer() const { return exposed_by_layer_; }

 private:
  struct Joined {
    int layer_id = 0;
    int bucket = 0;
    int64_t bytes = 0;
  };
  GradientSyncOptions options_;
  GradientBucketer bucketer_;
  std::vector<Joined> joined_;             // every gradient that joined a bucket, in order
  std::vector<double> bucket_exposed_ms_;  // by bucket index
  std::vector<double> exposed_by_layer_;
  double exposed_ms_ = 0;
};

// Forms the buckets and times their all-reduces against a backward pass that ends at
// backward_end_ms (see the file comment).
GradientSyncTimeline ScheduleGradientSync(const std::vector<ReadyGradient>& gradients,
                                          double backward_end_ms, const Cluster& cluster,
                                          const GradientSyncOptions& options);

// Tied parameters (planner/tied_parameters.h): after every bucket's all-reduce has ended, the
// runtime sums both uses' gradients of every tie in one fp32 all-reduce over the whole world
// (worker/runtime/executor_tied.cc), which the step waits for. Appends it to `timeline` as one
// more bucket over ranks 0..world-1 of `tied_bytes` (fp32 bytes, whatever options.precision),
// charged to `layers` (the tied layers) by `layer_bytes`, all of it exposed. Nothing for
// tied_bytes <= 0 or world <= 1.
void AppendTiedParameterSync(GradientSyncTimeline& timeline, const std::vector<int>& layers,
                             const std::vector<int64_t>& layer_bytes, int world,
                             const Cluster& cluster, const GradientSyncOptions& options);

// Per layer id (num_layers entries), the part of its bucket's exposed time charged to it: the
// bucket's exposed time shared by gradient bytes. Sums to timeline.exposed_ms.
std::vector<double> ExposedSyncByLayer(const GradientSyncTimeline& timeline, int num_layers);

// The search's additive stand-in for one layer's share of the bucketed all-reduces, overlap
// ignored: its bytes at the per-byte cost of a full bucket, AllReduceMs(cap) x bytes / cap, or
// its own all-reduce when it fills a bucket alone (bytes >= cap, which includes cap 0); `bytes`
// and the cap in fp32 bytes, each all-reduce at options.precision's (AllReducedBytes).
double AmortisedAllReduceMs(const Cluster& cluster, int64_t bytes, int devices,
                            const GradientSyncOptions& options);

}  // namespace deepool::planner
