// Next-token batches from windows of a token stream, the split every token source makes
// (token_file.h, synthetic_tokens.h): each row is one window of T + 1 tokens, its first T tokens
// the row's inputs and its last T its labels, so label t is the token after input t.
// Threading: a free function without shared state; `read_window` runs on the caller's thread,
// once per row, in row order.
#pragma once

#include <cstdint>
#include <functional>

#include "common/status.h"
#include "worker/runtime/data/data.h"

namespace deepool::worker {

// Writes the T + 1 tokens of sample `sample`'s window into `window`; an error fails the batch.
using ReadTokenWindow = std::function<Status(int64_t sample, int64_t* window)>;

// The batch of samples [first, last): inputs and labels int64 [last - first, length], row i from
// sample first + i's window. `length` (T) >= 1.
StatusOr<Batch> TokenWindowBatch(int64_t first, int64_t last, int64_t length,
                                 const ReadTokenWindow& read_window);

}  // namespace deepool::worker
