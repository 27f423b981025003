#include "worker/runtime/data.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace deepool::worker {
namespace {

constexpr int64_t kCifarPixels = 3 * 32 * 32;
constexpr int64_t kCifarRecord = 1 + kCifarPixels;
constexpr int64_t kTeacherMaxFeatures = 512;

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

class SyntheticData final : public DataSource {
 public:
  SyntheticData(planner::Shape input_shape, int64_t num_classes, int64_t global_batch,
                uint64_t seed)
      : input_shape_(std::move(input_shape)), global_batch_(global_batch), seed_(seed) {
    auto probe = torch::zeros(BatchShape(1, input_shape_));
    int64_t features = TeacherFeatures(probe).size(1);
    auto generator = at::detail::createCPUGenerator(seed ^ 0x7465616368657221ULL);
    teacher_ = torch::randn({features, num_classes}, generator, torch::kFloat32);
  }

  StatusOr<Batch> GlobalBatch(int64_t iteration) override {
    auto generator =
        at::detail::createCPUGenerator(seed_ * 1000003ULL + static_cast<uint64_t>(iteration));
    Batch batch;
    batch.inputs =
        torch::randn(BatchShape(global_batch_, input_shape_), generator, torch::kFloat32);
    batch.labels = TeacherFeatures(batch.inputs).matmul(teacher_).argmax(1).to(torch::kInt64);
    return batch;
  }

 private:
  planner::Shape input_shape_;
  int64_t global_batch_;
  uint64_t seed_;
  torch::Tensor teacher_;
};

class Cifar10Data final : public DataSource {
 public:
  Cifar10Data(torch::Tensor images, torch::Tensor labels, int64_t global_batch)
      : images_(std::move(images)), labels_(std::move(labels)), global_batch_(global_batch) {}

  StatusOr<Batch> GlobalBatch(int64_t iteration) override {
    int64_t records = labels_.size(0);
    auto index = (torch::arange(global_batch_, torch::kInt64) + iteration * global_batch_)
                     .remainder(records);
    return Batch{images_.index_select(0, index), labels_.index_select(0, index)};
  }

 private:
  torch::Tensor images_;  // [N, C, H, W] normalised float32
  torch::Tensor labels_;  // [N] int64
  int64_t global_batch_;
};

StatusOr<std::vector<std::string>> CifarFiles(const std::string& path) {
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
  if (!train.empty()) return train;
  if (!test.empty()) return test;
  return NotFoundError("no data_batch_N.bin or test_batch.bin in " + path);
}

}  // namespace

Status ValidateDataSpec(const DataSpec& spec) {
  if (spec.kind == "synthetic") return Status::Ok();
  if (spec.kind == "cifar10") {
    if (spec.path.empty()) return InvalidArgumentError("data.path is required for cifar10");
    return Status::Ok();
  }
  return InvalidArgumentError("data.kind \"" + spec.kind + "\" is not synthetic or cifar10");
}

std::unique_ptr<DataSource> MakeSyntheticData(const planner::Shape& input_shape,
                                              int64_t num_classes, int64_t global_batch,
                                              uint64_t seed) {
  return std::make_unique<SyntheticData>(input_shape, num_classes, global_batch, seed);
}

StatusOr<std::unique_ptr<DataSource>> OpenCifar10(const std::string& path,
                                                  const planner::Shape& input_shape,
                                                  int64_t num_classes, int64_t global_batch) {
  if (input_shape.size() != 3 || input_shape[0] != 3) {
    return InvalidArgumentError("cifar10 needs a graph input of shape [3,H,W], not " +
                                planner::ShapeToString(input_shape));
  }
  if (num_classes < 10) {
    return InvalidArgumentError("cifar10 has 10 classes but the graph predicts " +
                                std::to_string(num_classes));
  }
  ASSIGN_OR_RETURN(auto files, CifarFiles(path));
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
  auto images =
      raw.narrow(1, 1, kCifarPixels).to(torch::kFloat32).div_(255.0).view({records, 3, 32, 32});
  auto mean = torch::tensor({0.4914f, 0.4822f, 0.4465f}).view({1, 3, 1, 1});
  auto std = torch::tensor({0.2470f, 0.2435f, 0.2616f}).view({1, 3, 1, 1});
  images = (images - mean) / std;
  if (input_shape[1] != 32 || input_shape[2] != 32) {
    namespace F = torch::nn::functional;
    images = F::interpolate(images, F::InterpolateFuncOptions()
                                        .size(std::vector<int64_t>{input_shape[1], input_shape[2]})
                                        .mode(torch::kBilinear)
                                        .align_corners(false));
  }
  return std::unique_ptr<DataSource>(
      new Cifar10Data(images.contiguous(), labels.clone(), global_batch));
}

StatusOr<int64_t> NumClasses(const planner::Graph& graph) {
  int64_t classes = 0;
  for (int id : graph.output_ids()) {
    const planner::Shape& shape = graph.layer(id).output_shape;
    if (shape.size() != 1) {
      return InvalidArgumentError("output layer " + graph.layer(id).name + " has shape " +
                                  planner::ShapeToString(shape) +
                                  "; cross-entropy needs [classes]");
    }
    if (classes != 0 && shape[0] != classes) {
      return InvalidArgumentError("graph outputs disagree on the number of classes");
    }
    classes = shape[0];
  }
  if (classes == 0) return InvalidArgumentError("graph has no output layer");
  return classes;
}

StatusOr<std::unique_ptr<DataSource>> MakeDataSource(const DataSpec& spec,
                                                     const planner::Graph& graph,
                                                     int64_t global_batch) {
  RETURN_IF_ERROR(ValidateDataSpec(spec));
  ASSIGN_OR_RETURN(int64_t classes, NumClasses(graph));
  if (spec.kind == "synthetic") {
    return MakeSyntheticData(graph.input_shape(), classes, global_batch, spec.seed);
  }
  return OpenCifar10(spec.path, graph.input_shape(), classes, global_batch);
}

}  // namespace deepool::worker
