// Synthetic data for token models (synthetic_tokens.h): int64 windows of the graph's length whose
// labels are the inputs shifted by one, any split of a global batch concatenating to it, the same
// for a seed, and learnable (the next token is mostly a function of the current one).
#include "worker/runtime/data/synthetic_tokens.h"

#include <catch2/catch.hpp>
#include <map>
#include <utility>

#include "planner/zoo/zoo.h"

namespace deepool::worker {
namespace {

constexpr int64_t kLength = 16;
constexpr int64_t kVocabulary = 50;

std::unique_ptr<DataSource> Tokens(int64_t global_batch, uint64_t seed) {
  auto data = MakeSyntheticTokens({kLength}, kVocabulary, global_batch, seed);
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  return std::move(data).value();
}

Batch Rows(DataSource& data, int64_t iteration, int64_t first, int64_t last) {
  auto batch = data.Samples(iteration, first, last);
  INFO(batch.status().ToString());
  REQUIRE(batch.ok());
  return std::move(batch).value();
}

TEST_CASE("synthetic tokens are int64 windows whose labels are the next tokens", "[data]") {
  auto data = Tokens(6, 3);
  const Batch batch = Rows(*data, 2, 0, 6);
  REQUIRE(batch.inputs.scalar_type() == torch::kInt64);
  REQUIRE(batch.labels.scalar_type() == torch::kInt64);
  REQUIRE(batch.inputs.sizes() == torch::IntArrayRef{6, kLength});
  REQUIRE(batch.labels.sizes() == torch::IntArrayRef{6, kLength});
  CHECK(batch.inputs.min().item<int64_t>() >= 0);
  CHECK(batch.inputs.max().item<int64_t>() < kVocabulary);
  CHECK(
      torch::equal(batch.labels.narrow(1, 0, kLength - 1), batch.inputs.narrow(1, 1, kLength - 1)));
  CHECK(data->num_samples() == kSyntheticTokenWindows);
}

TEST_CASE("any split of a synthetic token batch concatenates to the global batch", "[data]") {
  auto data = Tokens(7, 5);
  const Batch whole = Rows(*data, 3, 0, 7);
  const Batch head = Rows(*data, 3, 0, 3);
  const Batch tail = Rows(*data, 3, 3, 7);
  CHECK(torch::equal(torch::cat({head.inputs, tail.inputs}), whole.inputs));
  CHECK(torch::equal(torch::cat({head.labels, tail.labels}), whole.labels));
  CHECK(tail.first == 3);
  CHECK(Rows(*data, 3, 4, 4).inputs.size(0) == 0);
}

TEST_CASE("synthetic tokens are the same for a seed and differ for another", "[data]") {
  const Batch a = Rows(*Tokens(4, 9), 1, 0, 4);
  const Batch b = Rows(*Tokens(4, 9), 1, 0, 4);
  const Batch other = Rows(*Tokens(4, 10), 1, 0, 4);
  CHECK(torch::equal(a.inputs, b.inputs));
  CHECK_FALSE(torch::equal(a.inputs, other.inputs));
  // Iterations read other windows.
  CHECK_FALSE(torch::equal(a.inputs, Rows(*Tokens(4, 9), 2, 0, 4).inputs));
}

TEST_CASE("synthetic tokens are learnable: the next token mostly follows the current", "[data]") {
  auto data = Tokens(64, 1);
  std::map<int64_t, std::map<int64_t, int>> next_counts;
  int64_t pairs = 0;
  for (int64_t iteration = 0; iteration < 4; ++iteration) {
    const Batch batch = Rows(*data, iteration, 0, 64);
    const auto inputs = batch.inputs.accessor<int64_t, 2>();
    const auto labels = batch.labels.accessor<int64_t, 2>();
    for (int64_t row = 0; row < 64; ++row) {
      for (int64_t t = 0; t < kLength; ++t) ++next_counts[inputs[row][t]][labels[row][t]];
    }
    pairs += 64 * kLength;
  }
  int64_t predictable = 0;  // pairs a table of each token's likeliest successor predicts
  for (const auto& [token, counts] : next_counts) {
    int best = 0;
    for (const auto& [next, count] : counts) best = std::max(best, count);
    predictable += best;
  }
  // 7/8 follow the table, and a noise draw lands on the successor 1 time in 50.
  CHECK(static_cast<double>(predictable) / static_cast<double>(pairs) > 0.85);
}

TEST_CASE("a token graph's synthetic data is token windows and an image graph's is images",
          "[data]") {
  auto gpt = planner::zoo::BuildModel("gpt_tiny");
  REQUIRE(gpt.ok());
  auto tokens = MakeSyntheticDataFor(*gpt, 2, 1);
  REQUIRE(tokens.ok());
  const Batch token_batch = Rows(**tokens, 0, 0, 2);
  CHECK(token_batch.inputs.scalar_type() == torch::kInt64);
  CHECK(token_batch.labels.dim() == 2);

  auto vit = planner::zoo::BuildModel("vit_tiny");
  REQUIRE(vit.ok());
  auto images = MakeSyntheticDataFor(*vit, 2, 1);
  REQUIRE(images.ok());
  CHECK(Rows(**images, 0, 0, 2).inputs.scalar_type() == torch::kFloat32);
}

TEST_CASE("synthetic tokens refuse a non-sequence input and an empty vocabulary", "[data]") {
  CHECK(MakeSyntheticTokens({3, 8, 8}, 10, 4, 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(MakeSyntheticTokens({8}, 0, 4, 1).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepool::worker
