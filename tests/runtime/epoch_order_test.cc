#include "worker/runtime/data/epoch_order.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <set>
#include <vector>

#include "planner/plan.h"

namespace deepool::worker {
namespace {

// Every sample the rows [first, last) of iterations [0, iterations) take.
std::vector<int64_t> SamplesOf(EpochOrder& order, int64_t iterations, int64_t first, int64_t last) {
  std::vector<int64_t> samples;
  for (int64_t i = 0; i < iterations; ++i) {
    for (int64_t row = first; row < last; ++row) samples.push_back(order.Sample(i, row));
  }
  return samples;
}

TEST_CASE("every sample is seen exactly once per epoch", "[data][epochs]") {
  // 10 samples, batch 4: epoch 0 is positions 0..9 = iterations 0, 1 and half of 2.
  for (int64_t batch : {1, 3, 4, 10, 25}) {
    EpochOrder order(10, batch, 7);
    const int64_t positions = 10 * 6;  // six epochs
    std::vector<int64_t> counts(10, 0);
    for (int64_t p = 0; p < positions; ++p) {
      const int64_t sample = order.Sample(p / batch, p % batch);
      ++counts[static_cast<size_t>(sample)];
      if (p % 10 == 9) {
        INFO("batch " << batch << ", epoch " << p / 10);
        REQUIRE(counts == std::vector<int64_t>(10, 1));
        counts.assign(10, 0);
      }
    }
  }
}

TEST_CASE("epochs are shuffled differently, and by the seed", "[data][epochs]") {
  const auto first = EpochOrder::Permutation(1000, 1, 0);
  REQUIRE(first == EpochOrder::Permutation(1000, 1, 0));
  REQUIRE(first != EpochOrder::Permutation(1000, 1, 1));
  REQUIRE(first != EpochOrder::Permutation(1000, 2, 0));
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  REQUIRE(first != identity);
  REQUIRE(std::set<int64_t>(first.begin(), first.end()).size() == 1000);
}

TEST_CASE("the samples of a row do not depend on how the batch is split", "[data][epochs]") {
  // One rank reading all rows, or three ranks reading an uneven split, see the same samples in
  // the same rows: each row's sample is a function of (iteration, row) alone.
  EpochOrder whole(37, 12, 3);
  const std::vector<int64_t> expected = SamplesOf(whole, 20, 0, 12);
  const std::vector<int64_t> shares = planner::NearEqualShares(12, 3);
  std::vector<EpochOrder> ranks(3, EpochOrder(37, 12, 3));
  std::vector<int64_t> got;
  for (int64_t i = 0; i < 20; ++i) {
    int64_t first = 0;
    for (size_t rank = 0; rank < 3; ++rank) {
      const int64_t last = first + shares[rank];
      for (int64_t row = first; row < last; ++row) got.push_back(ranks[rank].Sample(i, row));
      first = last;
    }
  }
  REQUIRE(got == expected);
}

TEST_CASE("positions are exact at epoch boundaries and for huge iterations", "[data][epochs]") {
  EpochOrder order(10, 4, 0);
  REQUIRE(order.Position(0, 0) == EpochPosition{0, 0});
  REQUIRE(order.Position(2, 1) == EpochPosition{0, 9});
  REQUIRE(order.Position(2, 2) == EpochPosition{1, 0});
  REQUIRE(order.Position(5, 0) == EpochPosition{2, 0});
  // Iteration 10^15 with batch 4: position 4 * 10^15 lies in epoch 4 * 10^14, offset 0.
  REQUIRE(order.Position(1000000000000000, 3) == EpochPosition{400000000000000, 3});
  EpochOrder odd(1281167, 1024, 0);
  const int64_t iteration = 123456789;
  const __int128 position = static_cast<__int128>(iteration) * 1024 + 1000;
  REQUIRE(odd.Position(iteration, 1000) == EpochPosition{static_cast<int64_t>(position / 1281167),
                                                         static_cast<int64_t>(position % 1281167)});
}

}  // namespace
}  // namespace deepool::worker
