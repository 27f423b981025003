// Loading a torch archive's state_dict into CPU tensors without libtorch's unpickler: what
// torch.save(model.state_dict()) writes (a collections.OrderedDict, torchvision's weights
// included), torch.save(dict(...)) and SaveCheckpoint (checkpoint.h) all load. The archive is
// read and checked by weights/torch_archive.h (no code runs, every read bounds-checked); each
// storage record is read once into one tensor of its dtype, and each entry is that storage
// viewed with the pickled size, stride and offset, so two keys on one storage (tied weights)
// share memory as Python's torch.load gives them.
// Errors name the file: NOT_FOUND when it cannot be opened, UNIMPLEMENTED or DATA_LOSS as
// weights/torch_archive.h says.
// Threading: free functions without shared state.
#pragma once

#include <string>

#include "common/status.h"
#include "worker/runtime/checkpoints/checkpoint.h"

namespace deepool::worker {

// The archive's tensors on the CPU, by key, in the pickled dict's order.
StatusOr<StateDict> LoadTorchArchive(const std::string& path);

}  // namespace deepool::worker
