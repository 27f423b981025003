// Weights files a job starts from (weights/weights_index.h): a torch archive's zip directory and
// pickle, or a safetensors header, indexed; when accepted, every entry has a known dtype and
// non-negative sizes.
#include <cstdlib>

#include "fuzz/fuzz_target.h"
#include "weights/weights_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto index = deepool::weights::IndexWeightsBytes(deepool::fuzz::AsText(data, size));
  if (!index.ok()) return 0;
  for (const auto& tensor : *index) {
    if (deepool::weights::DtypeBytes(tensor.dtype) == 0) std::abort();
    for (int64_t n : tensor.shape) {
      if (n < 0) std::abort();
    }
  }
  return 0;
}
