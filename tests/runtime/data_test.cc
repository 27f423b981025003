#include "worker/runtime/data/data.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <tuple>

#include "planner/plan.h"
#include "planner/zoo/zoo.h"
#include "tests/temp_dir.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;

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

TEST_CASE("large synthetic images are drawn at 32x32 and resized, small ones value by value",
          "[data]") {
  // Every value replaced by its block's first (blocks of rows x cols).
  auto blocks = [](const torch::Tensor& images, int64_t rows, int64_t cols) {
    auto corners = images.index({torch::indexing::Slice(), torch::indexing::Slice(),
                                 torch::indexing::Slice(0, torch::indexing::None, rows),
                                 torch::indexing::Slice(0, torch::indexing::None, cols)});
    return torch::upsample_nearest2d(corners, {images.size(2), images.size(3)});
  };
  auto large = MakeSyntheticData({3, 64, 96}, 10, 4, 5)->GlobalBatch(0);
  REQUIRE(large->inputs.sizes() == std::vector<int64_t>{4, 3, 64, 96});
  CHECK(torch::equal(large->inputs, blocks(large->inputs, 2, 3)));
  // One row holds 3 x 32 x 32 drawn values (continuous, so distinct), each in a block.
  CHECK(std::get<0>(torch::_unique(large->inputs[0].flatten())).size(0) == 3 * 32 * 32);
  CHECK(std::abs(large->inputs.std().item<double>() - 1.0) < 0.1);
  auto small = MakeSyntheticData({3, 32, 32}, 10, 4, 5)->GlobalBatch(0);
  CHECK_FALSE(torch::equal(small->inputs, blocks(small->inputs, 2, 2)));
  // Labels of large images still follow the teacher over the image: several classes in use.
  auto labelled = MakeSyntheticData({3, 64, 64}, 5, 128, 1)->GlobalBatch(0);
  CHECK((torch::bincount(labelled->labels, {}, 5) > 0).sum().item<int64_t>() >= 3);
}

TEST_CASE("synthetic labels use several classes", "[data]") {
  auto data = MakeSyntheticData({32}, 5, 256, 1);
  auto batch = data->GlobalBatch(0);
  auto counts = torch::bincount(batch->labels, {}, 5);
  REQUIRE((counts > 0).sum().item<int64_t>() >= 3);
}

TEST_CASE("cifar10 binary batches are read, normalised and cycled", "[data]") {
  TempDir dir;
  WriteCifar(dir.File("data_batch_1.bin"), 3, 0);
  WriteCifar(dir.File("data_batch_2.bin"), 2, 3);
  auto data = OpenCifar10(dir.path(), {3, 32, 32}, 10, 4);
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
}

TEST_CASE("cifar10 resizes to the graph's image size", "[data]") {
  TempDir dir;
  WriteCifar(dir.File("data_batch_1.bin"), 2);
  auto data = OpenCifar10(dir.File("data_batch_1.bin"), {3, 16, 16}, 10, 2);
  REQUIRE(data.ok());
  REQUIRE((*data)->GlobalBatch(0)->inputs.sizes() == std::vector<int64_t>{2, 3, 16, 16});
}

TEST_CASE("cifar10 refuses truncated files and wrong shapes", "[data]") {
  TempDir dir;
  {
    std::ofstream out(dir.File("data_batch_1.bin"), std::ios::binary);
    out << std::string(3000, 'x');
  }
  auto truncated = OpenCifar10(dir.path(), {3, 32, 32}, 10, 2);
  REQUIRE(truncated.status().code() == StatusCode::kDataLoss);
  REQUIRE(OpenCifar10(dir.path(), {32}, 10, 2).status().code() == StatusCode::kInvalidArgument);
  REQUIRE(OpenCifar10(dir.File("missing"), {3, 32, 32}, 10, 2).status().code() ==
          StatusCode::kNotFound);
}

// Rows [first, last) of `data`'s iteration, checked to hold only those samples, on the host.
Batch Fetch(DataSource& data, int64_t iteration, int64_t first, int64_t last) {
  StatusOr<Batch> batch = data.Samples(iteration, first, last);
  INFO(batch.status().ToString());
  REQUIRE(batch.ok());
  CHECK(batch->first == first);
  CHECK(batch->inputs.size(0) == last - first);
  CHECK(batch->labels.size(0) == last - first);
  CHECK(batch->inputs.device().is_cpu());
  // Sliced before anything else happens to it: no view into a larger (global) batch.
  CHECK(batch->inputs.storage().nbytes() == batch->inputs.nbytes());
  return *batch;
}

// The uneven split of a global batch of 7 that a plan with shares {3, 2, 1, 1} makes, plus an
// empty range; concatenated, the pieces must equal the global batch exactly.
void CheckSplitsConcatenate(DataSource& data, int64_t iteration) {
  const Batch whole = Fetch(data, iteration, 0, 7);
  std::vector<torch::Tensor> inputs, labels;
  for (auto [first, last] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 5}, {5, 5}, {5, 6}, {6, 7}}) {
    Batch piece = Fetch(data, iteration, first, last);
    inputs.push_back(piece.inputs);
    labels.push_back(piece.labels);
  }
  CHECK(torch::equal(torch::cat(inputs), whole.inputs));
  CHECK(torch::equal(torch::cat(labels), whole.labels));
  // And any single row, fetched alone, is that row of the global batch.
  CHECK(torch::equal(Fetch(data, iteration, 4, 5).inputs[0], whole.inputs[4]));
}

TEST_CASE("a rank's rows of an uneven split are exactly its part of the global batch", "[data]") {
  SECTION("synthetic") {
    auto data = MakeSyntheticData({3, 8, 8}, 10, 7, 5);
    for (int64_t iteration : {0, 3}) CheckSplitsConcatenate(*data, iteration);
    auto flat = MakeSyntheticData({32}, 10, 7, 5);
    CheckSplitsConcatenate(*flat, 1);
  }
  SECTION("cifar10, resized, across the wrap of the records") {
    TempDir dir;
    WriteCifar(dir.File("data_batch_1.bin"), 9);
    for (int64_t side : {32, 16}) {
      auto data = OpenCifar10(dir.path(), {3, side, side}, 10, 7);
      REQUIRE(data.ok());
      for (int64_t iteration : {0, 1}) CheckSplitsConcatenate(**data, iteration);
      // Iteration 1 holds records 7, 8, 0, 1, ...: rows [1, 3) are records 8 and 0.
      CHECK(Fetch(**data, 1, 1, 3).labels.equal(torch::tensor({8, 0}, torch::kInt64)));
    }
  }
}

TEST_CASE("synthetic data is a fixed set of samples served in order, wrapping", "[data]") {
  REQUIRE(SyntheticDatasetSize({3, 8, 8}) == 1024);
  // Iteration 170 of a batch of 6 holds samples 1020-1023, then 0 and 1 again.
  auto data = MakeSyntheticData({3, 8, 8}, 10, 6, 5);
  const Batch first = Fetch(*data, 0, 0, 6);
  const Batch wrapped = Fetch(*data, 170, 0, 6);
  CHECK(torch::equal(wrapped.inputs.narrow(0, 4, 2), first.inputs.narrow(0, 0, 2)));
  CHECK(torch::equal(wrapped.labels.narrow(0, 4, 2), first.labels.narrow(0, 0, 2)));
  CHECK_FALSE(torch::equal(wrapped.inputs[3], first.inputs[0]));
  // A sample is the same whichever iteration and row serve it: sample 9 is row 3 of iteration
  // 1 and, for a batch of 4, row 1 of iteration 2.
  auto other_batch = MakeSyntheticData({3, 8, 8}, 10, 4, 5);
  CHECK(torch::equal(Fetch(*data, 1, 3, 4).inputs, Fetch(*other_batch, 2, 1, 2).inputs));
}

TEST_CASE("the synthetic dataset stays within 64 MiB", "[data]") {
  CHECK(SyntheticDatasetSize({784}) == 1024);
  CHECK(SyntheticDatasetSize({3, 299, 299}) == 1024);  // drawn at 32x32
  CHECK(SyntheticDatasetSize({1 << 20}) == 16);        // 4 MiB a sample
  CHECK(SyntheticDatasetSize({1 << 30, 1 << 30, 1 << 30}) == 1);
}

TEST_CASE("rows outside the global batch are refused", "[data]") {
  auto data = MakeSyntheticData({4}, 3, 6, 0);
  CHECK(data->Samples(0, 2, 7).status().code() == StatusCode::kInvalidArgument);
  CHECK(data->Samples(0, 3, 2).status().code() == StatusCode::kInvalidArgument);
  CHECK(data->Samples(0, -1, 2).status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(data->Samples(-1, 0, 2).status().message(), Catch::Contains("iteration"));
}

// Names of this process's threads.
std::vector<std::string> ThreadNames() {
  std::vector<std::string> names;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    names.push_back(name);
  }
  return names;
}

// Records on which thread and for which rows it is asked.
class RecordingSource final : public DataSource {
 public:
  struct Call {
    int64_t iteration;
    int64_t first;
    std::thread::id thread;
  };
  explicit RecordingSource(std::unique_ptr<DataSource> inner) : inner_(std::move(inner)) {}
  int64_t global_batch() const override { return inner_->global_batch(); }
  int64_t num_samples() const override { return inner_->num_samples(); }
  std::vector<Call> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 protected:
  StatusOr<Batch> ReadSamples(int64_t iteration, int64_t first, int64_t last) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back({iteration, first, std::this_thread::get_id()});
    }
    return inner_->Samples(iteration, first, last);
  }

 private:
  std::unique_ptr<DataSource> inner_;
  std::mutex mu_;
  std::vector<Call> calls_;
};

TEST_CASE("prefetching produces the next batch on its own thread and the same rows", "[data]") {
  auto plain = MakeSyntheticData({3, 4, 4}, 5, 6, 2);
  auto recording = std::make_unique<RecordingSource>(MakeSyntheticData({3, 4, 4}, 5, 6, 2));
  RecordingSource* calls = recording.get();
  auto prefetching = WithPrefetch(std::move(recording));
  CHECK(prefetching->global_batch() == 6);

  auto check_equal = [&](int64_t iteration, int64_t first, int64_t last) {
    Batch got = Fetch(*prefetching, iteration, first, last);
    Batch want = Fetch(*plain, iteration, first, last);
    CHECK(torch::equal(got.inputs, want.inputs));
    CHECK(torch::equal(got.labels, want.labels));
  };
  auto wait_for_call = [&](int64_t iteration) {
    for (int tries = 0; tries < 500 && calls->calls().back().iteration != iteration; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  // In order: each batch is produced once, the next one ahead of its request.
  for (int64_t iteration = 0; iteration < 3; ++iteration) check_equal(iteration, 2, 5);
  wait_for_call(3);
  // The prefetch thread is named (threads it starts, e.g. an OpenMP team, inherit the name).
  std::vector<std::string> names = ThreadNames();
  const auto named = std::count(names.begin(), names.end(), "dp-prefetch");
  CHECK(named >= 1);
  std::vector<RecordingSource::Call> seen = calls->calls();
  REQUIRE(seen.size() == 4);
  for (int64_t i = 0; i < 4; ++i) {
    CHECK(seen[static_cast<size_t>(i)].iteration == i);
    CHECK(seen[static_cast<size_t>(i)].first == 2);
    CHECK(seen[static_cast<size_t>(i)].thread != std::this_thread::get_id());
  }
  // A jump back and another range are produced on demand, equal all the same.
  check_equal(0, 2, 5);
  check_equal(1, 0, 6);
  check_equal(2, 0, 6);
  wait_for_call(3);
  CHECK(calls->calls().back().first == 0);
  prefetching.reset();  // joins the thread
  names = ThreadNames();
  CHECK(std::count(names.begin(), names.end(), "dp-prefetch") < named);  // it was joined
}

TEST_CASE("a rank reads the rows its input layers and its losses need", "[data]") {
  planner::zoo::ModelOptions options;
  options.num_classes = 4;
  auto graph = planner::zoo::BuildModel("mlp", options);
  REQUIRE(graph.ok());
  planner::Plan plan = planner::DataParallelLayout(*graph, 5, 3);  // shares {2, 2, 1}
  CHECK(RankDataRange(*graph, plan, 1) == std::pair<int64_t, int64_t>{2, 4});
  // The first layer on ranks 0 and 1 with {3, 2}; everything after it, the loss included, on
  // rank 1 alone; rank 2 holds nothing.
  for (planner::LayerPlacement& placement : plan.layers) {
    placement.devices = {1};
    placement.samples = {5};
  }
  plan.layers[0].devices = {0, 1};
  plan.layers[0].samples = {3, 2};
  REQUIRE(planner::CheckPlanMatchesGraph(plan, *graph).ok());
  CHECK(RankDataRange(*graph, plan, 0) == std::pair<int64_t, int64_t>{0, 3});
  CHECK(RankDataRange(*graph, plan, 1) == std::pair<int64_t, int64_t>{0, 5});
  CHECK(RankDataRange(*graph, plan, 2) == std::pair<int64_t, int64_t>{0, 0});
}

}  // namespace
}  // namespace deepool::worker
