#include "worker/runtime/data/data.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "common/thread_name.h"
#include "worker/runtime/data/image_folder.h"
#include "worker/runtime/data/seed_mix.h"
#include "worker/runtime/data/synthetic_tokens.h"
#include "worker/runtime/data/token_file.h"

namespace deepool::worker {
namespace {

constexpr int64_t kCifarPixels = 3 * 32 * 32;
constexpr int64_t kCifarRecord = 1 + kCifarPixels;
constexpr int64_t kTeacherMaxFeatures = 512;
// The synthetic dataset: this many samples, fewer where they would take more bytes than this.
constexpr int64_t kSyntheticSamples = 1024;
constexpr int64_t kSyntheticBytes = int64_t{64} << 20;
// Synthetic images larger than this on a side are drawn at this size and resized.
constexpr int64_t kDrawnImageSide = 32;

std::vector<int64_t> BatchShape(int64_t batch, const planner::Shape& shape) {
  std::vector<int64_t> sizes{batch};
  sizes.insert(sizes.end(), shape.begin(), shape.end());
  return sizes;
}

// Features the teacher looks at: a 4x4 average-pooled image for [C,H,W] inputs (so convolutional
// models can learn it), otherwise the first kTeacherMaxFeatures input values.
torch::Tensor TeacherFeatures(const torch::Tensor& inputs) {
  if (inputs.dim() == 4) {
    int64_t h = std::min<int64_t>(inputs.size(2), 4);
    int64_t w = std::min<int64_t>(inputs.size(3), 4);
    return torch::adaptive_avg_pool2d(inputs, {h, w}).flatten(1);
  }
  auto flat = inputs.flatten(1);
  return flat.narrow(1, 0, std::min<int64_t>(flat.size(1), kTeacherMaxFeatures));
}

// Whether synthetic rows of this shape are images too large to draw value by value: drawing
// every value of a 224x224 image takes about 1 ms of one CPU thread, and a batch of 32 made that
// way bounded a GPU's training iteration at about 39 ms (docs/results/gpu-node.md, 2026-11-28).
bool DrawnSmaller(const planner::Shape& shape) {
  return shape.size() == 3 && (shape[1] > kDrawnImageSide || shape[2] > kDrawnImageSide);
}

// Stacks one-row results [1, ...] into a batch; an empty range gives [0, shape...].
torch::Tensor StackRows(std::vector<torch::Tensor> rows, const std::vector<int64_t>& empty_shape,
                        torch::ScalarType type) {
  if (rows.empty()) return torch::empty(empty_shape, torch::TensorOptions().dtype(type));
  return torch::cat(rows, 0);
}

// The record a dataset of `records` records serves as row `row` of iteration `iteration`'s
// global batch of `global_batch`: record (iteration * global_batch + row) modulo `records`,
// computed without overflow.
int64_t RecordIndex(int64_t iteration, int64_t global_batch, int64_t row, int64_t records) {
  return (iteration % records * (global_batch % records) + row) % records;
}

// The shape a synthetic sample is drawn at: the input's, or at most kDrawnImageSide on a side for
// large images (DrawnSmaller).
planner::Shape DrawnShape(const planner::Shape& input_shape) {
  if (!DrawnSmaller(input_shape)) return input_shape;
  return {input_shape[0], std::min(input_shape[1], kDrawnImageSide),
          std::min(input_shape[2], kDrawnImageSide)};
}

// A fixed set of samples drawn once, when the source is made, and served like CIFAR-10's records
// (RecordIndex), so that a batch costs a copy of its rows (and a resize for large images) instead
// of drawing every value: a source that drew each row per iteration (10-30 us a row on one
// thread) bounded small models' iterations on CPU ranks and large ones' on a GPU. Each sample is
// computed on its own, from its own generator, so its values never depend on the others (batched
// kernels may sum in another order for another batch size).
class SyntheticData final : public DataSource {
 public:
  SyntheticData(planner::Shape input_shape, int64_t num_classes, int64_t global_batch,
                uint64_t seed)
      : input_shape_(std::move(input_shape)), global_batch_(global_batch) {
    const planner::Shape drawn_shape = DrawnShape(input_shape_);
    const int64_t count = SyntheticDatasetSize(input_shape_);
    samples_ = torch::empty(BatchShape(count, drawn_shape), torch::kFloat32);
    labels_ = torch::empty({count}, torch::kInt64);
    auto probe = torch::zeros(BatchShape(1, drawn_shape));
    const int64_t features = TeacherFeatures(probe).size(1);
    auto teacher_generator = at::detail::createCPUGenerator(seed ^ 0x7465616368657221ULL);
    const torch::Tensor teacher =
        torch::randn({features, num_classes}, teacher_generator, torch::kFloat32);
    const uint64_t samples_seed = Mix(seed ^ 0x73796e7468657469ULL);
    for (int64_t sample = 0; sample < count; ++sample) {
      auto generator =
          at::detail::createCPUGenerator(Mix(samples_seed ^ static_cast<uint64_t>(sample)));
      const torch::Tensor drawn =
          torch::randn(BatchShape(1, drawn_shape), generator, torch::kFloat32);
      samples_.narrow(0, sample, 1).copy_(drawn);
      labels_.narrow(0, sample, 1).copy_(TeacherFeatures(drawn).matmul(teacher).argmax(1));
    }
  }

  int64_t global_batch() const override { return global_batch_; }
  int64_t num_samples() const override { return samples_.size(0); }

 protected:
  // The rows' samples copied out; large images resized (nearest) to the input's size, so their
  // values come in blocks.
  StatusOr<Batch> ReadSamples(int64_t iteration, int64_t first, int64_t last) override {
    Batch batch;
    batch.first = first;
    if (first == last) {
      batch.inputs = torch::empty(BatchShape(0, input_shape_), torch::kFloat32);
      batch.labels = torch::empty({0}, torch::kInt64);
      return batch;
    }
    std::vector<int64_t> index;
    index.reserve(static_cast<size_t>(last - first));
    for (int64_t row = first; row < last; ++row) {
      index.push_back(RecordIndex(iteration, global_batch_, row, samples_.size(0)));
    }
    const torch::Tensor rows = torch::tensor(index, torch::kInt64);
    batch.inputs = samples_.index_select(0, rows);
    if (DrawnSmaller(input_shape_)) {
      batch.inputs = torch::upsample_nearest2d(batch.inputs, {input_shape_[1], input_shape_[2]});
    }
    batch.labels = labels_.index_select(0, rows);
    return batch;
  }

 private:
  planner::Shape input_shape_;
  int64_t global_batch_;
  torch::Tensor samples_;  // [count, drawn shape...]
  torch::Tensor labels_;   // [count]
};

class Cifar10Data final : public DataSource {
 public:
  // `images`: [N, 3, 32, 32] bytes; `labels`: [N] int64; `input_shape`: the graph's [3, H, W].
  Cifar10Data(torch::Tensor images, torch::Tensor labels, planner::Shape input_shape,
              int64_t global_batch)
      : images_(std::move(images)),
        labels_(std::move(labels)),
        input_shape_(std::move(input_shape)),
        global_batch_(global_batch),
        mean_(torch::tensor({0.4914f, 0.4822f, 0.4465f}).view({1, 3, 1, 1})),
        std_(torch::tensor({0.2470f, 0.2435f, 0.2616f}).view({1, 3, 1, 1})) {}

  int64_t global_batch() const override { return global_batch_; }
  int64_t num_samples() const override { return labels_.size(0); }

 protected:
  StatusOr<Batch> ReadSamples(int64_t iteration, int64_t first, int64_t last) override {
    const int64_t records = labels_.size(0);
    std::vector<int64_t> index;
    std::vector<torch::Tensor> inputs;
    for (int64_t row = first; row < last; ++row) {
      index.push_back(RecordIndex(iteration, global_batch_, row, records));
      inputs.push_back(Decode(images_.narrow(0, index.back(), 1)));
    }
    Batch batch;
    batch.inputs = StackRows(std::move(inputs), BatchShape(0, input_shape_), torch::kFloat32);
    batch.labels = labels_.index_select(0, torch::tensor(index, torch::kInt64));
    batch.first = first;
    return batch;
  }

 private:
  // One record's bytes [1, 3, 32, 32] -> the normalised, resized float image.
  torch::Tensor Decode(const torch::Tensor& bytes) const {
    torch::Tensor image = (bytes.to(torch::kFloat32).div_(255.0) - mean_) / std_;
    if (input_shape_[1] == 32 && input_shape_[2] == 32) return image;
    namespace F = torch::nn::functional;
    return F::interpolate(image, F::InterpolateFuncOptions()
                                     .size(std::vector<int64_t>{input_shape_[1], input_shape_[2]})
                                     .mode(torch::kBilinear)
                                     .align_corners(false));
  }

  torch::Tensor images_;  // [N, 3, 32, 32] uint8
  torch::Tensor labels_;  // [N] int64
  planner::Shape input_shape_;
  int64_t global_batch_;
  torch::Tensor mean_;
  torch::Tensor std_;
};

// WithPrefetch's source. State under mu_: what the owner wants next (wanted_) and the last
// result the prefetch thread produced (result_, for result_key_).
class PrefetchingData final : public DataSource {
 public:
  PrefetchingData(std::unique_ptr<DataSource> source, HostMemory memory)
      : source_(std::move(source)),
        memory_(memory),
        global_batch_(source_->global_batch()),
        num_samples_(source_->num_samples()),
        thread_([this] { Loop(); }) {}

  ~PrefetchingData() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  int64_t global_batch() const override { return global_batch_; }
  int64_t num_samples() const override { return num_samples_; }

 protected:
  StatusOr<Batch> ReadSamples(int64_t iteration, int64_t first, int64_t last) override {
    const Key key{iteration, first, last};
    std::unique_lock<std::mutex> lock(mu_);
    wanted_ = key;
    cv_.notify_all();
    cv_.wait(lock, [&] { return result_.has_value() && result_key_ == key; });
    StatusOr<Batch> batch = std::move(*result_);
    result_.reset();
    wanted_ = Key{iteration + 1, first, last};  // the next iteration, same rows
    cv_.notify_all();
    return batch;
  }

 private:
  struct Key {
    int64_t iteration = 0;
    int64_t first = 0;
    int64_t last = 0;
    bool operator==(const Key& o) const {
      return iteration == o.iteration && first == o.first && last == o.last;
    }
  };

  bool HasWork() const {
    return wanted_.has_value() && !(result_.has_value() && result_key_ == *wanted_);
  }

  void Loop() {
    SetCurrentThreadName("dp-prefetch");
    // Applies the process's intra-op thread count (deepool-executor --threads) to this thread's
    // OpenMP team too, which would otherwise take one thread per core.
    at::init_num_threads();
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || HasWork(); });
      if (stop_) return;
      const Key key = *wanted_;
      lock.unlock();
      StatusOr<Batch> batch = Produce(key);
      lock.lock();
      result_ = std::move(batch);
      result_key_ = key;
      cv_.notify_all();
    }
  }

  // Samples() checks the range; a prefetch past the last iteration the owner wants is harmless.
  StatusOr<Batch> Produce(const Key& key) {
    try {
      StatusOr<Batch> batch = source_->Samples(key.iteration, key.first, key.last);
      if (batch.ok() && memory_ == HostMemory::kPinned) {
        batch->inputs = batch->inputs.pin_memory();
        batch->labels = batch->labels.pin_memory();
      }
      return batch;
    } catch (const std::exception& e) {
      return InternalError("data for iteration " + std::to_string(key.iteration) + ": " + e.what());
    }
  }

  std::unique_ptr<DataSource> source_;  // used only by thread_
  const HostMemory memory_;
  const int64_t global_batch_;
  const int64_t num_samples_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Key> wanted_;
  std::optional<StatusOr<Batch>> result_;
  Key result_key_;
  bool stop_ = false;
  std::thread thread_;  // last: started once everything above exists
};

// A folder's training batches, or its test batch for evaluation (either, when the folder has only
// the other).
StatusOr<std::vector<std::string>> CifarFiles(const std::string& path, DataUse use) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_regular_file(path, error)) return std::vector<std::string>{path};
  if (!fs::is_directory(path, error)) {
    return NotFoundError("cifar10 data path " + path + " is neither a file nor a folder");
  }
  std::vector<std::string> train, test;
  for (const auto& entry : fs::directory_iterator(path, error)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("data_batch_", 0) == 0 && entry.path().extension() == ".bin") {
      train.push_back(entry.path().string());
    } else if (name == "test_batch.bin") {
      test.push_back(entry.path().string());
    }
  }
  std::sort(train.begin(), train.end());
  if (use == DataUse::kEvaluation && !test.empty()) return test;
  if (!train.empty()) return train;
  if (!test.empty()) return test;
  return NotFoundError("no data_batch_N.bin or test_batch.bin in " + path);
}

}  // namespace

StatusOr<Batch> DataSource::Samples(int64_t iteration, int64_t first, int64_t last) {
  if (iteration < 0) return InvalidArgumentError("data: iteration must be >= 0");
  if (first < 0 || first > last || last > global_batch()) {
    return InvalidArgumentError("data: rows [" + std::to_string(first) + ", " +
                                std::to_string(last) + ") are not within the global batch of " +
                                std::to_string(global_batch()));
  }
  return ReadSamples(iteration, first, last);
}

std::unique_ptr<DataSource> WithPrefetch(std::unique_ptr<DataSource> source, HostMemory memory) {
  return std::make_unique<PrefetchingData>(std::move(source), memory);
}

std::pair<int64_t, int64_t> RankDataRange(const planner::Graph& graph, const planner::Plan& plan,
                                          int rank) {
  int64_t first = plan.global_batch;
  int64_t last = 0;
  auto include = [&](const planner::Layer& layer) {
    const planner::LayerPlacement* placement = plan.Find(layer.name);
    if (placement == nullptr || !placement->Runs(rank)) return;
    const auto [from, to] = placement->SampleRange(rank);
    if (from >= to) return;
    first = std::min(first, from);
    last = std::max(last, to);
  };
  for (const planner::Layer& layer : graph.layers()) {
    const auto& inputs = layer.input_ids;
    if (std::find(inputs.begin(), inputs.end(), planner::kGraphInputId) != inputs.end()) {
      include(layer);
    }
  }
  for (int id : graph.output_ids()) include(graph.layer(id));
  if (first >= last) return {0, 0};
  return {first, last};
}

int64_t SyntheticDatasetSize(const planner::Shape& input_shape) {
  int64_t bytes = static_cast<int64_t>(sizeof(float));
  for (int64_t side : DrawnShape(input_shape)) {
    bytes *= std::max<int64_t>(side, 1);
    if (bytes > kSyntheticBytes) return 1;  // one sample, and no overflow on huge shapes
  }
  return std::min(kSyntheticBytes / bytes, kSyntheticSamples);
}

std::unique_ptr<DataSource> MakeSyntheticData(const planner::Shape& input_shape,
                                              int64_t num_classes, int64_t global_batch,
                                              uint64_t seed) {
  return std::make_unique<SyntheticData>(input_shape, num_classes, global_batch, seed);
}

StatusOr<std::unique_ptr<DataSource>> MakeSyntheticDataFor(const planner::Graph& graph,
                                                           int64_t global_batch, uint64_t seed) {
  ASSIGN_OR_RETURN(const int64_t classes, NumClasses(graph));
  if (graph.input_dtype() == planner::DType::kInt64) {
    return MakeSyntheticTokens(graph.input_shape(), classes, global_batch, seed);
  }
  return MakeSyntheticData(graph.input_shape(), classes, global_batch, seed);
}

StatusOr<std::unique_ptr<DataSource>> OpenCifar10(const std::string& path,
                                                  const planner::Shape& input_shape,
                                                  int64_t num_classes, int64_t global_batch,
                                                  DataUse use) {
  if (input_shape.size() != 3 || input_shape[0] != 3) {
    return InvalidArgumentError("cifar10 needs a graph input of shape [3,H,W], not " +
                                planner::ShapeToString(input_shape));
  }
  if (num_classes < 10) {
    return InvalidArgumentError("cifar10 has 10 classes but the graph predicts " +
                                std::to_string(num_classes));
  }
  ASSIGN_OR_RETURN(auto files, CifarFiles(path, use));
  std::vector<uint8_t> bytes;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::vector<uint8_t> content((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) return DataLossError("cannot read " + file);
    if (content.empty() || content.size() % kCifarRecord != 0) {
      return DataLossError(file + " has " + std::to_string(content.size()) +
                           " bytes, not a whole number of 3073-byte CIFAR-10 records");
    }
    bytes.insert(bytes.end(), content.begin(), content.end());
  }
  int64_t records = static_cast<int64_t>(bytes.size()) / kCifarRecord;
  auto raw = torch::from_blob(bytes.data(), {records, kCifarRecord}, torch::kUInt8);
  auto labels = raw.select(1, 0).to(torch::kInt64);
  if (labels.max().item<int64_t>() > 9) {
    return DataLossError("a CIFAR-10 label byte in " + path + " is above 9");
  }
  // Kept as bytes; each fetched row is normalised and resized on its own (Cifar10Data::Decode).
  auto images = raw.narrow(1, 1, kCifarPixels).reshape({records, 3, 32, 32}).clone();
  return std::unique_ptr<DataSource>(
      new Cifar10Data(std::move(images), labels.clone(), input_shape, global_batch));
}

StatusOr<int64_t> NumClasses(const planner::Graph& graph) {
  int64_t classes = 0;
  for (int id : graph.output_ids()) {
    const planner::Shape& shape = graph.layer(id).output_shape;
    if (shape.size() != 1 && shape.size() != 2) {
      return InvalidArgumentError("output layer " + graph.layer(id).name + " has shape " +
                                  planner::ShapeToString(shape) +
                                  "; cross-entropy needs [classes] or [tokens, vocabulary]");
    }
    if (classes != 0 && shape.back() != classes) {
      return InvalidArgumentError("graph outputs disagree on the number of classes");
    }
    classes = shape.back();
  }
  if (classes == 0) return InvalidArgumentError("graph has no output layer");
  return classes;
}

StatusOr<std::unique_ptr<DataSource>> MakeDataSource(const DataSpec& spec,
                                                     const planner::Graph& graph,
                                                     int64_t global_batch, DataUse use) {
  RETURN_IF_ERROR(ValidateDataSpec(spec));
  ASSIGN_OR_RETURN(int64_t classes, NumClasses(graph));
  if (spec.kind == "synthetic") return MakeSyntheticDataFor(graph, global_batch, spec.seed);
  if (spec.kind == "image_folder") {
    return OpenImageFolder(spec.path, graph.input_shape(), classes, global_batch,
                           ImageDataOptions{spec.seed, spec.skip_bad, use});
  }
  if (spec.kind == "tokens") {
    return OpenTokenFile(spec.path, graph.input_shape(), classes, global_batch,
                         TokenDataOptions{spec.seed, protocol::TokenBytes(spec.dtype), use});
  }
  return OpenCifar10(spec.path, graph.input_shape(), classes, global_batch, use);
}

torch::Tensor ModelInputs(const torch::Tensor& inputs) {
  if (inputs.scalar_type() != torch::kUInt8) return inputs;
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(inputs.device());
  const torch::Tensor mean = torch::tensor({0.485f, 0.456f, 0.406f}, options).view({1, 3, 1, 1});
  const torch::Tensor std = torch::tensor({0.229f, 0.224f, 0.225f}, options).view({1, 3, 1, 1});
  return inputs.to(torch::kFloat32).div_(255).sub_(mean).div_(std);
}

}  // namespace deepool::worker
