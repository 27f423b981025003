#include "worker/runtime/data/synthetic_tokens.h"

#include <random>
#include <vector>

#include "worker/runtime/data/seed_mix.h"
#include "worker/runtime/data/token_windows.h"

namespace deepool::worker {
namespace {

class SyntheticTokens final : public DataSource {
 public:
  SyntheticTokens(int64_t length, int64_t vocabulary, int64_t global_batch, uint64_t seed)
      : length_(length),
        vocabulary_(vocabulary),
        global_batch_(global_batch),
        seed_(Mix(seed ^ 0x746f6b656e732121ULL)),
        successor_(static_cast<size_t>(vocabulary)) {
    std::mt19937_64 random(Mix(seed ^ 0x7375636365737321ULL));
    for (int64_t& next : successor_) {
      next = static_cast<int64_t>(UniformBelow(random, static_cast<uint64_t>(vocabulary_)));
    }
  }

  int64_t global_batch() const override { return global_batch_; }
  int64_t num_samples() const override { return kSyntheticTokenWindows; }

 protected:
  StatusOr<Batch> ReadSamples(int64_t iteration, int64_t first, int64_t last) override {
    return TokenWindowBatch(first, last, length_, [&](int64_t row, int64_t* tokens) {
      const int64_t window =
          (iteration % kSyntheticTokenWindows * (global_batch_ % kSyntheticTokenWindows) + row) %
          kSyntheticTokenWindows;
      WriteWindow(window, tokens);
      return Status::Ok();
    });
  }

 private:
  // Window `window`'s T + 1 tokens into `tokens`.
  void WriteWindow(int64_t window, int64_t* tokens) const {
    std::mt19937_64 random(SeedMix(seed_, static_cast<uint64_t>(window)));
    const auto vocabulary = static_cast<uint64_t>(vocabulary_);
    int64_t token = static_cast<int64_t>(UniformBelow(random, vocabulary));
    for (int64_t t = 0; t <= length_; ++t) {
      tokens[t] = token;
      const bool noise = UniformBelow(random, static_cast<uint64_t>(kSyntheticTokenNoise)) == 0;
      token = noise ? static_cast<int64_t>(UniformBelow(random, vocabulary))
                    : successor_[static_cast<size_t>(token)];
    }
  }

  const int64_t length_;  // T
  const int64_t vocabulary_;
  const int64_t global_batch_;
  const uint64_t seed_;
  std::vector<int64_t> successor_;  // the next token of each token, but for the noise
};

}  // namespace

StatusOr<std::unique_ptr<DataSource>> MakeSyntheticTokens(const planner::Shape& input_shape,
                                                          int64_t vocabulary, int64_t global_batch,
                                                          uint64_t seed) {
  if (input_shape.size() != 1 || input_shape[0] < 1) {
    return InvalidArgumentError("synthetic tokens need a graph input of shape [T], not " +
                                planner::ShapeToString(input_shape));
  }
  if (vocabulary < 1) {
    return InvalidArgumentError("synthetic tokens need a vocabulary of at least 1 token");
  }
  return std::unique_ptr<DataSource>(
      std::make_unique<SyntheticTokens>(input_shape[0], vocabulary, global_batch, seed));
}

}  // namespace deepool::worker
