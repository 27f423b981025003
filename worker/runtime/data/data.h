// Training data for the executors. Every rank sees exactly the samples single-device training
// would: row r of iteration i's global batch is a pure function of (source, i, r), so a rank asks
// for just the rows [first, last) it computes on (Samples) and only those are generated or
// decoded, on the host, before anything is copied to a device. Concatenating the rows of any
// split of [0, global batch) gives the global batch exactly.
//   synthetic: a dataset of SyntheticDatasetSize(input shape) samples drawn once from the seed
//              when the source is made, each ~ N(0, 1) from its own generator seeded by (seed,
//              sample), its label from a fixed random linear teacher (seeded) over the sample's
//              pooled input features, so the task is learnable. Row r of iteration i is sample
//              (i*B + r) modulo the dataset's size, as CIFAR-10's records are; a batch costs a
//              copy of its rows.
//   cifar10:   CIFAR-10 binary batches (data_batch_N.bin / test_batch.bin: records of 1 label
//              byte + 3072 pixel bytes, channel-major 3x32x32), read once and kept as bytes; row
//              r of iteration i is record (i*B + r) modulo the record count, normalised with the
//              usual per-channel mean/std, and resized if the graph wants another image size,
//              when it is fetched.
//   image_folder: JPEG and PNG files, shuffled per epoch, decoded and augmented as torchvision's
//              ImageNet recipe does (image_folder.h).
//              A graph of token input gets token windows instead (synthetic_tokens.h).
//   tokens:    a flat file of token ids, windows of the graph's sequence length plus one at
//              offsets drawn from (seed, i, r) (token_file.h).
// Held-out sets for evaluation are read in order (DataUse::kEvaluation).
// Threading: a DataSource is used by one thread at a time (an executor's; or, wrapped by
// WithPrefetch, its prefetch thread, which then owns it).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "common/status.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "protocol/training_spec.h"

namespace deepool::worker {

struct Batch {
  // [last - first, input_shape...], CPU: float32, or uint8 images (image_folder), which
  // ModelInputs turns into the graph's input once they are on the device.
  torch::Tensor inputs;
  torch::Tensor labels;  // [last - first], int64, CPU
  int64_t first = 0;     // the global batch row that row 0 holds
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  // The rows every iteration's global batch has.
  virtual int64_t global_batch() const = 0;
  // The samples the data set holds (one epoch); rows past them wrap around.
  virtual int64_t num_samples() const = 0;
  // Rows [first, last) of iteration's global batch (first == last: an empty batch): CPU tensors
  // holding only those samples, not views into a global batch. INVALID_ARGUMENT unless
  // iteration >= 0 and 0 <= first <= last <= global_batch().
  StatusOr<Batch> Samples(int64_t iteration, int64_t first, int64_t last);
  // The whole global batch: Samples(iteration, 0, global_batch()).
  StatusOr<Batch> GlobalBatch(int64_t iteration) { return Samples(iteration, 0, global_batch()); }

 protected:
  // Samples() after its range checks.
  virtual StatusOr<Batch> ReadSamples(int64_t iteration, int64_t first, int64_t last) = 0;
};

// The run spec's data object, from the executor protocol (protocol/training_spec.h).
using protocol::DataSpec;
using protocol::ValidateDataSpec;

// What a data source is read for. kEvaluation reads the held-out set in its own order, without
// shuffling or augmentation: row r of iteration i is sample (i*B + r) modulo the sample count,
// so the first passes of the global batch cover every sample once (an executor's Evaluate);
// image_folder then applies images::EvalImage (resize and centre crop), and a cifar10 folder
// gives its test_batch.bin.
enum class DataUse { kTraining, kEvaluation };

// The synthetic dataset's sample count for inputs of `input_shape`: 1024, fewer where the samples
// as drawn (large images at 32x32) would pass 64 MiB, at least 1.
int64_t SyntheticDatasetSize(const planner::Shape& input_shape);

// Draws the dataset: about 40 ms on one thread for 1024 samples of 3x32x32 (deepool-bench-data).
std::unique_ptr<DataSource> MakeSyntheticData(const planner::Shape& input_shape,
                                              int64_t num_classes, int64_t global_batch,
                                              uint64_t seed);
// The synthetic data a graph reads: token windows (synthetic_tokens.h) when its input is int64
// token ids, MakeSyntheticData's samples otherwise. INVALID_ARGUMENT as NumClasses.
StatusOr<std::unique_ptr<DataSource>> MakeSyntheticDataFor(const planner::Graph& graph,
                                                           int64_t global_batch, uint64_t seed);
StatusOr<std::unique_ptr<DataSource>> OpenCifar10(const std::string& path,
                                                  const planner::Shape& input_shape,
                                                  int64_t num_classes, int64_t global_batch,
                                                  DataUse use = DataUse::kTraining);

// The graph's input from a batch's inputs, on their device: float32 inputs as they are; uint8
// images scaled to [0, 1] and normalised with ImageNet's per-channel mean and standard deviation,
// the float operations of torchvision's ToTensor and Normalize. Applied after the copy to the
// device, so the copy moves a quarter of the bytes.
torch::Tensor ModelInputs(const torch::Tensor& inputs);

// The number of classes the graph predicts: the width of its outputs, [classes] or, for a
// sequence, [tokens, vocabulary] (all must agree).
StatusOr<int64_t> NumClasses(const planner::Graph& graph);

// The data source a run spec names, shaped for `graph`.
StatusOr<std::unique_ptr<DataSource>> MakeDataSource(const DataSpec& spec,
                                                     const planner::Graph& graph,
                                                     int64_t global_batch,
                                                     DataUse use = DataUse::kTraining);

// `source` with the next batch prefetched: once Samples(i, first, last) has returned, a
// background thread named "dp-prefetch" produces Samples(i + 1, first, last), so the next call
// with those arguments waits only for what is left of that work. Any other call is produced on
// demand (after the prefetch in flight, if any). Results equal `source`'s exactly; a libtorch
// exception in `source` comes back as INTERNAL.
// Threading: the returned source is used by one thread at a time; `source` is used only by the
// prefetch thread from now on. Destruction joins that thread. The prefetch thread takes the
// process's intra-op thread count (at::init_num_threads), so on CPU ranks that divide a machine's
// cores (deepool-executor --threads) it adds no OpenMP team of its own.
// HostMemory::kPinned (for a CUDA device; it needs a CUDA driver) has the prefetch thread also
// copy each batch into page-locked memory, so the executor's copy to the device can be
// asynchronous, as a PyTorch DataLoader with pin_memory gives it.
enum class HostMemory { kPageable, kPinned };
std::unique_ptr<DataSource> WithPrefetch(std::unique_ptr<DataSource> source,
                                         HostMemory memory = HostMemory::kPageable);

// The rows of the global batch `rank` needs from its DataSource under `plan`: the smallest range
// holding the samples of every layer it runs that reads the graph input (inputs) and of every
// graph output it runs (labels for the loss); {0, 0} when it needs none. Requires
// CheckPlanMatchesGraph(plan, graph).
std::pair<int64_t, int64_t> RankDataRange(const planner::Graph& graph, const planner::Plan& plan,
                                          int rank);

}  // namespace deepool::worker
