// The pickle of a torch archive's state_dict (<archive>/data.pkl), read as data: a small
// pickle machine that knows exactly the opcodes torch.save (protocol 2, and 3 to 5's framing
// and memo opcodes) and libtorch's pickler emit for a dict or collections.OrderedDict of
// str -> Tensor, and calls only the functions such a file names:
// torch._utils._rebuild_tensor_v2 (storage, storage offset, size, stride, requires_grad, hooks
// [, metadata]), torch._utils._rebuild_parameter (tensor, requires_grad, hooks),
// collections.OrderedDict() and the torch.<Type>Storage classes of persistent ids
// ("storage", storage type, key, location, elements). It runs no code and imports nothing: any
// other opcode or global is UNIMPLEMENTED, naming it, and damaged bytes are DATA_LOSS; every
// read is bounds-checked and the machine never recurses, so hostile input cannot crash it.
// Threading: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deepool::weights {

struct PickledTensor {
  std::string key;
  std::string dtype;  // from the storage type: "float32" for torch.FloatStorage, ...
  std::vector<int64_t> shape;
  std::string storage_key;       // the record <archive>/data/<storage_key>
  int64_t storage_elements = 0;  // as the persistent id says
  int64_t elements_reached = 0;  // storage offset + the furthest element the strides reach
  int64_t storage_offset = 0;    // in elements, as torch's as_strided takes it
  std::vector<int64_t> stride;   // in elements, one per dimension
};

// The pickled dict's entries in insertion order: a plain dict or a collections.OrderedDict
// (torch.save(model.state_dict()) and torchvision's weights, whose BUILD sets a _metadata
// attribute that is ignored here). A value that is not a tensor or a key that is not a str is
// INVALID_ARGUMENT saying so.
StatusOr<std::vector<PickledTensor>> ReadStateDictPickle(std::string_view pickle);

}  // namespace deepool::weights
