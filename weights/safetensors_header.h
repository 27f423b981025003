// The header of a safetensors file (Hugging Face's format: an 8-byte little-endian header
// length N, N bytes of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin,
// end]}, ..., "__metadata__": {..}}, then the tensors' bytes, offsets relative to the end of the
// header). Every entry is checked: a known dtype, a shape of non-negative sizes, offsets inside
// the data whose length is exactly the shape's bytes, no two entries overlapping; a bad header
// is DATA_LOSS naming the entry. The ranks' loader (worker/runtime/checkpoints/safetensors.h)
// and the weights index (weights_index.h) both read headers here.
// Threading: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deepool::weights {

// A header longer than any model's names and shapes is a corrupt length, not a header.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // torch's name (weights_index.h): F32 is "float32", BF16 "bfloat16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the end of the header
};

// The header's length from the file's first 8 bytes (`first_bytes` may hold more), checked
// against the file's size.
StatusOr<uint64_t> SafetensorsHeaderBytes(std::string_view first_bytes, uint64_t file_bytes);

// The entries of header JSON `header`, in data order; `data_bytes` follow the header.
// dtypes F64, F32, F16, BF16, I64, I32, I16, I8, U8 and BOOL.
StatusOr<std::vector<SafetensorsEntry>> ParseSafetensorsHeader(std::string_view header,
                                                               uint64_t data_bytes);

}  // namespace deepool::weights
