// The index of a weights file that a job starts from (a job spec's "init", deepool-train
// --init): each tensor's state_dict key, dtype and shape, read without libtorch and without
// reading the tensors' data, so the coordinator can check a file at submission
// (weights/state_dict_check.h) however large it is.
//
// It reads the two formats the ranks load (worker/runtime/checkpoints/safetensors.h,
// LoadStateDictFile), told apart as they are, by the first bytes:
// - a torch archive ("PK\3\4"): the zip torch.save and deepool's checkpoints write, whose
//   <archive>/data.pkl pickles a dict or collections.OrderedDict of str -> Tensor
//   (weights/torch_archive.h); each tensor's storage record <archive>/data/<key> must be there
//   and hold the tensor;
// - otherwise a safetensors file (weights/safetensors_header.h).
// torch.save's legacy format (_use_new_zipfile_serialization=False) is read by neither.
//
// Errors: NOT_FOUND or PERMISSION_DENIED when the file cannot be opened; UNIMPLEMENTED for a
// well-formed file that uses something a state_dict file does not (another pickled class, a
// compressed zip record); DATA_LOSS for a damaged one. Never a crash, whatever the bytes.
// Threading: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deepool::weights {

struct TensorIndexEntry {
  std::string key;
  std::string dtype;  // torch's name: "float32", "bfloat16", "int64", "bool", ...
  std::vector<int64_t> shape;
};

// The file's tensors in its order (a pickled dict's insertion order; safetensors' data order).
// A tensor stored once under two keys (a tied parameter) appears under both.
using WeightsIndex = std::vector<TensorIndexEntry>;

// Reads the index of the file at `path`; errors name the file.
StatusOr<WeightsIndex> ReadWeightsIndex(const std::string& path);

// The same for a whole file held in memory (tests and the fuzz target).
StatusOr<WeightsIndex> IndexWeightsBytes(std::string_view bytes);

// Bytes per element of a dtype name above; 0 for an unknown name.
int DtypeBytes(std::string_view dtype);

}  // namespace deepool::weights
