#include "worker/runtime/data/epoch_order.h"

#include <numeric>
#include <random>
#include <utility>

#include "worker/runtime/data/seed_mix.h"

namespace deepool::worker {

EpochOrder::EpochOrder(int64_t samples, int64_t global_batch, uint64_t seed)
    : samples_(samples), global_batch_(global_batch), seed_(seed) {}

EpochPosition EpochOrder::Position(int64_t iteration, int64_t row) const {
  // p = iteration * B + row, split as (B * iteration) / N and % N without forming the product:
  // iteration = q * N + s gives p = q * B * N + (s * B + row), whose epoch is q * B plus
  // (s * B + row) / N.
  const int64_t q = iteration / samples_;
  const int64_t s = iteration % samples_;
  // s < N and B, row bounded by the global batch: s * B fits for any realistic N and B (both
  // below 2^31).
  const int64_t rest = s * global_batch_ + row;
  return {q * global_batch_ + rest / samples_, rest % samples_};
}

int64_t EpochOrder::Sample(const EpochPosition& position) {
  for (const Cached& cached : cached_) {
    if (cached.epoch == position.epoch) return cached.order[static_cast<size_t>(position.offset)];
  }
  Cached& slot = cached_[next_slot_];
  next_slot_ = 1 - next_slot_;
  slot.epoch = position.epoch;
  slot.order = Permutation(samples_, seed_, position.epoch);
  return slot.order[static_cast<size_t>(position.offset)];
}

std::vector<int64_t> EpochOrder::Permutation(int64_t samples, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(samples));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::mt19937_64 random(SeedMix(seed, static_cast<uint64_t>(epoch)));
  // Fisher-Yates with our own bounded draws: std::shuffle's use of the generator is not fixed by
  // the standard, and the order must be the same wherever the job runs.
  for (int64_t i = samples - 1; i > 0; --i) {
    const uint64_t draw = UniformBelow(random, static_cast<uint64_t>(i) + 1);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(draw)]);
  }
  return order;
}

}  // namespace deepool::worker
