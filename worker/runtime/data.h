// Training data for the executors. Every rank produces the same global batch for an iteration
// (deterministically) and takes the sample ranges its layers need, so labels are available
// wherever the loss is computed without sending them.
//   synthetic: inputs ~ N(0, 1) from (seed, iteration); labels from a fixed random linear
//              teacher over pooled input features (seeded), so the task is learnable.
//   cifar10:   CIFAR-10 binary batches (data_batch_N.bin / test_batch.bin: records of 1 label
//              byte + 3072 pixel bytes, channel-major 3x32x32), read once, normalised with the
//              usual per-channel mean/std, resized if the graph wants another image size; the
//              global batch of iteration i is records [i*B, (i+1)*B) modulo the record count.
// Threading: a DataSource is used by one executor thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "planner/graph.h"

namespace deepool::worker {

struct Batch {
  torch::Tensor inputs;  // [global_batch, input_shape...], float32, CPU
  torch::Tensor labels;  // [global_batch], int64, CPU
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual StatusOr<Batch> GlobalBatch(int64_t iteration) = 0;
};

struct DataSpec {
  std::string kind = "synthetic";  // "synthetic" or "cifar10"
  uint64_t seed = 0;               // synthetic
  std::string path;                // cifar10: a .bin file or a folder of them
  bool operator==(const DataSpec& o) const {
    return kind == o.kind && seed == o.seed && path == o.path;
  }
};

Status ValidateDataSpec(const DataSpec& spec);

std::unique_ptr<DataSource> MakeSyntheticData(const planner::Shape& input_shape,
                                              int64_t num_classes, int64_t global_batch,
                                              uint64_t seed);
StatusOr<std::unique_ptr<DataSource>> OpenCifar10(const std::string& path,
                                                  const planner::Shape& input_shape,
                                                  int64_t num_classes, int64_t global_batch);

// The number of classes the graph predicts: the width of its outputs (all must agree).
StatusOr<int64_t> NumClasses(const planner::Graph& graph);

// The data source a run spec names, shaped for `graph`.
StatusOr<std::unique_ptr<DataSource>> MakeDataSource(const DataSpec& spec,
                                                     const planner::Graph& graph,
                                                     int64_t global_batch);

}  // namespace deepool::worker
