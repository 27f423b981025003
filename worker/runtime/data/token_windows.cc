#include "worker/runtime/data/token_windows.h"

#include <cstring>
#include <vector>

namespace deepool::worker {

StatusOr<Batch> TokenWindowBatch(int64_t first, int64_t last, int64_t length,
                                 const ReadTokenWindow& read_window) {
  const int64_t rows = last - first;
  Batch batch;
  batch.first = first;
  batch.inputs = torch::empty({rows, length}, torch::kInt64);
  batch.labels = torch::empty({rows, length}, torch::kInt64);
  int64_t* inputs = batch.inputs.data_ptr<int64_t>();
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  const size_t row_bytes = static_cast<size_t>(length) * sizeof(int64_t);
  std::vector<int64_t> window(static_cast<size_t>(length) + 1);
  for (int64_t i = 0; i < rows; ++i) {
    RETURN_IF_ERROR(read_window(first + i, window.data()));
    std::memcpy(inputs + i * length, window.data(), row_bytes);
    std::memcpy(labels + i * length, window.data() + 1, row_bytes);
  }
  return batch;
}

}  // namespace deepool::worker
