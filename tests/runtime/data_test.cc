#include "worker/runtime/data.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;

fs::path TempDir() {
  std::string pattern = (fs::temp_directory_path() / "deepool-data-XXXXXX").string();
  REQUIRE(mkdtemp(pattern.data()) != nullptr);
  return pattern;
}

// Record i: label i % 10, every pixel byte (i * 7 + channel) % 256.
void WriteCifar(const fs::path& path, int records, int offset = 0) {
  std::ofstream out(path, std::ios::binary);
  for (int i = offset; i < offset + records; ++i) {
    out.put(static_cast<char>(i % 10));
    for (int c = 0; c < 3; ++c) {
      for (int p = 0; p < 1024; ++p) out.put(static_cast<char>((i * 7 + c) % 256));
    }
  }
}

TEST_CASE("synthetic data is deterministic by seed and iteration", "[data]") {
  auto a = MakeSyntheticData({3, 8, 8}, 10, 6, 5);
  auto b = MakeSyntheticData({3, 8, 8}, 10, 6, 5);
  auto other = MakeSyntheticData({3, 8, 8}, 10, 6, 6);
  auto a0 = a->GlobalBatch(0), b0 = b->GlobalBatch(0), a1 = a->GlobalBatch(1);
  auto other0 = other->GlobalBatch(0);
  REQUIRE(a0->inputs.sizes() == std::vector<int64_t>{6, 3, 8, 8});
  REQUIRE(a0->labels.sizes() == std::vector<int64_t>{6});
  REQUIRE(torch::equal(a0->inputs, b0->inputs));
  REQUIRE(torch::equal(a0->labels, b0->labels));
  REQUIRE_FALSE(torch::equal(a0->inputs, a1->inputs));
  REQUIRE_FALSE(torch::equal(a0->inputs, other0->inputs));
  REQUIRE(a0->labels.min().item<int64_t>() >= 0);
  REQUIRE(a0->labels.max().item<int64_t>() < 10);
}

TEST_CASE("synthetic labels use several classes", "[data]") {
  auto data = MakeSyntheticData({32}, 5, 256, 1);
  auto batch = data->GlobalBatch(0);
  auto counts = torch::bincount(batch->labels, {}, 5);
  REQUIRE((counts > 0).sum().item<int64_t>() >= 3);
}

TEST_CASE("cifar10 binary batches are read, normalised and cycled", "[data]") {
  auto dir = TempDir();
  WriteCifar(dir / "data_batch_1.bin", 3, 0);
  WriteCifar(dir / "data_batch_2.bin", 2, 3);
  auto data = OpenCifar10(dir.string(), {3, 32, 32}, 10, 4);
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  auto batch0 = (*data)->GlobalBatch(0);
  auto batch1 = (*data)->GlobalBatch(1);
  REQUIRE(batch0->inputs.sizes() == std::vector<int64_t>{4, 3, 32, 32});
  REQUIRE(batch0->labels.equal(torch::tensor({0, 1, 2, 3}, torch::kInt64)));
  // Iteration 1 takes records 4, 0, 1, 2 (5 records, wrapping).
  REQUIRE(batch1->labels.equal(torch::tensor({4, 0, 1, 2}, torch::kInt64)));
  // Record 1, channel 2: byte 9 -> (9/255 - 0.4465) / 0.2616.
  float expected = (9.0f / 255.0f - 0.4465f) / 0.2616f;
  REQUIRE(batch0->inputs[1][2][5][5].item<float>() == Approx(expected).epsilon(1e-5));
  fs::remove_all(dir);
}

TEST_CASE("cifar10 resizes to the graph's image size", "[data]") {
  auto dir = TempDir();
  WriteCifar(dir / "data_batch_1.bin", 2);
  auto data = OpenCifar10((dir / "data_batch_1.bin").string(), {3, 16, 16}, 10, 2);
  REQUIRE(data.ok());
  REQUIRE((*data)->GlobalBatch(0)->inputs.sizes() == std::vector<int64_t>{2, 3, 16, 16});
  fs::remove_all(dir);
}

TEST_CASE("cifar10 refuses truncated files and wrong shapes", "[data]") {
  auto dir = TempDir();
  {
    std::ofstream out(dir / "data_batch_1.bin", std::ios::binary);
    out << std::string(3000, 'x');
  }
  auto truncated = OpenCifar10(dir.string(), {3, 32, 32}, 10, 2);
  REQUIRE(truncated.status().code() == StatusCode::kDataLoss);
  REQUIRE(OpenCifar10(dir.string(), {32}, 10, 2).status().code() == StatusCode::kInvalidArgument);
  REQUIRE(OpenCifar10((dir / "missing").string(), {3, 32, 32}, 10, 2).status().code() ==
          StatusCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deepool::worker
