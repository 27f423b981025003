// Token streams in files: one flat binary file of token ids, uint16 or uint32 little-endian (the
// layout nanoGPT's prepare scripts and Megatron-style pipelines write), read through a memory
// map, so a corpus larger than memory costs only the pages a rank touches.
//   training:   row r of iteration i is the window of T + 1 tokens starting at an offset drawn
//               uniformly from [0, N - T - 1] by a generator seeded by (seed, i, r); its first T
//               tokens are the inputs, its last T the labels (next-token prediction).
//   evaluation: row r of pass k is window (k*B + r) mod W of the W = (N - 1) / T consecutive
//               windows starting at 0, T, 2T, ..., so the first passes cover the file once.
// num_samples() is W for both. Inputs and labels come back as int64 [n, T]; T is the graph's
// input length (its input shape is [T]).
// A token id at or above the vocabulary (the graph's output width) fails the batch with an
// error naming the file, the token's index and its value; the file is not scanned up front
// (a corpus may be gigabytes). A file whose size is not a whole number of ids, or that holds
// fewer than T + 1 tokens, is refused when it is opened.
// Threading: as DataSource.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "worker/runtime/data/data.h"

namespace deepool::worker {

struct TokenDataOptions {
  uint64_t seed = 0;
  int token_bytes = 2;  // 2: uint16 ids; 4: uint32 ids
  DataUse use = DataUse::kTraining;
};

// The graph's input must be [T] (int64 tokens); `vocabulary` bounds the ids.
StatusOr<std::unique_ptr<DataSource>> OpenTokenFile(const std::string& path,
                                                    const planner::Shape& input_shape,
                                                    int64_t vocabulary, int64_t global_batch,
                                                    const TokenDataOptions& options);

}  // namespace deepool::worker
