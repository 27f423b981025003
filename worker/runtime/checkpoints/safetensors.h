// Reading weights files that a job starts from (a run spec's "init"): the safetensors format
// (Hugging Face's: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {..}}, then the tensors' bytes, little-endian, offsets relative to the end of
// the header), and, through LoadStateDictFile, torch state_dict archives too (checkpoint.h).
//
// Every entry is checked before any tensor is made (weights/safetensors_header.h, which the
// coordinator's weights index reads headers with too): a known dtype, a shape of non-negative
// sizes, offsets inside the data whose length is exactly the shape's bytes, no two entries
// overlapping. A bad file is DATA_LOSS naming the file and the entry; nothing is half-read.
// Threading: free functions without shared state.
#pragma once

#include <string>

#include "common/status.h"
#include "worker/runtime/checkpoints/checkpoint.h"

namespace deepool::worker {

// The tensors of a safetensors file, on the CPU, by name, in the file's data order. dtypes
// F64, F32, F16, BF16, I64, I32, I16, I8, U8 and BOOL.
StatusOr<StateDict> LoadSafetensors(const std::string& path);

// A weights file of either kind: a torch archive (a zip: what torch.save and SaveCheckpoint
// write) or a safetensors file, told apart by their first bytes.
StatusOr<StateDict> LoadStateDictFile(const std::string& path);

}  // namespace deepool::worker
