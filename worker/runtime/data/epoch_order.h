// Which sample of a data set fills each row of each iteration's global batch, epoch by epoch.
//
// Rows are numbered across iterations: row r of iteration i is position p = i * B + r (B the
// global batch). Position p lies in epoch p / N (N samples) at offset p % N, and takes sample
// Permutation(seed, epoch)[offset]: a uniform shuffle drawn from (seed, epoch) alone. So every
// sample is seen exactly once per epoch, whatever split of the global batch the ranks compute on
// and however many ranks there are; a resumed job continues at the exact sample, since the
// position is a function of the iteration; and a rank reads only the samples of its own rows.
// Threading: one thread at a time (it caches the permutations it has drawn).
#pragma once

#include <cstdint>
#include <vector>

namespace deepool::worker {

struct EpochPosition {
  int64_t epoch = 0;
  int64_t offset = 0;  // within the epoch: [0, N)
  bool operator==(const EpochPosition& o) const { return epoch == o.epoch && offset == o.offset; }
};

class EpochOrder {
 public:
  // samples >= 1, global_batch >= 1.
  EpochOrder(int64_t samples, int64_t global_batch, uint64_t seed);

  int64_t samples() const { return samples_; }
  // Where row `row` of iteration `iteration` lies (without overflow for any iteration whose
  // position fits in 63 bits).
  EpochPosition Position(int64_t iteration, int64_t row) const;
  // The sample at `position`: an index into the data set.
  int64_t Sample(const EpochPosition& position);
  int64_t Sample(int64_t iteration, int64_t row) { return Sample(Position(iteration, row)); }

  // Fisher-Yates over [0, samples) driven by a generator seeded from (seed, epoch).
  static std::vector<int64_t> Permutation(int64_t samples, uint64_t seed, int64_t epoch);

 private:
  const int64_t samples_;
  const int64_t global_batch_;
  const uint64_t seed_;
  // The two most recently used epochs' permutations: a global batch spans at most two epochs
  // when B <= N, and when B > N each lookup still reuses the permutation of its own epoch.
  struct Cached {
    int64_t epoch = -1;
    std::vector<int64_t> order;
  };
  Cached cached_[2];
  int next_slot_ = 0;
};

}  // namespace deepool::worker
