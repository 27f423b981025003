// Synthetic token data, for graphs whose input is a sequence of int64 token ids (gpt2, gpt_tiny,
// imported language models) when a run names no token file: the "synthetic" data kind of such a
// graph. Images of random floats would reach an embedding layer, which reads only token ids.
//
// The task is learnable, as the synthetic images' teacher makes theirs: a fixed random successor
// table over the vocabulary (seeded) decides each next token, except that one token in
// kSyntheticTokenNoise is drawn uniformly instead, so the loss has a floor above zero. A window
// of T + 1 tokens gives the inputs (its first T) and the labels (its last T), as a token file's
// windows do. The data set holds SyntheticDatasetSize-like 1024 windows, each a pure function of
// (seed, window), computed when a batch asks for it (nothing is stored but the table); row r of
// iteration i is window (i*B + r) mod 1024.
// Threading: as DataSource.
#pragma once

#include <cstdint>
#include <memory>

#include "worker/runtime/data/data.h"

namespace deepool::worker {

inline constexpr int64_t kSyntheticTokenWindows = 1024;
inline constexpr int64_t kSyntheticTokenNoise = 8;

// `input_shape` must be [T] with T >= 1, and vocabulary >= 1.
StatusOr<std::unique_ptr<DataSource>> MakeSyntheticTokens(const planner::Shape& input_shape,
                                                          int64_t vocabulary, int64_t global_batch,
                                                          uint64_t seed);

}  // namespace deepool::worker
