// A test data source of random token sequences, for the token models' executor tests.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdint>

#include "worker/runtime/data/data.h"

namespace deepool::worker::testing {

// Random token sequences: row r of iteration i is T+1 ids in [0, vocab) drawn from a generator
// seeded by (seed, i, r); the input is the first T and the labels the last T (next tokens), so
// any split of the batch reads the same rows.
class TokenData final : public DataSource {
 public:
  TokenData(int64_t global_batch, int64_t tokens, int64_t vocab, uint64_t seed)
      : global_batch_(global_batch), tokens_(tokens), vocab_(vocab), seed_(seed) {}
  int64_t global_batch() const override { return global_batch_; }
  int64_t num_samples() const override { return int64_t{1} << 20; }

 protected:
  StatusOr<Batch> ReadSamples(int64_t iteration, int64_t first, int64_t last) override {
    torch::Tensor rows = torch::empty({last - first, tokens_ + 1}, torch::kLong);
    for (int64_t r = first; r < last; ++r) {
      const uint64_t row_seed =
          seed_ * 1000003u + static_cast<uint64_t>(iteration) * 7919u + static_cast<uint64_t>(r);
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(row_seed);
      rows[r - first] = torch::randint(0, vocab_, {tokens_ + 1}, gen, torch::kLong);
    }
    Batch batch;
    batch.inputs = rows.narrow(1, 0, tokens_).contiguous();
    batch.labels = rows.narrow(1, 1, tokens_).contiguous();
    batch.first = first;
    return batch;
  }

 private:
  int64_t global_batch_, tokens_, vocab_;
  uint64_t seed_;
};

}  // namespace deepool::worker::testing
