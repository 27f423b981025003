// Checkpoints: a model's parameters and buffers as a state_dict file.
//
// The file is what libtorch's torch::pickle_save writes for a dict of str -> Tensor (a zip
// archive with a pickle and one record per tensor), which Python reads with
// `torch.load(path)` as a plain dict. Keys are "<layer name>.<param or buffer name>"; for zoo
// models these are torchvision's state_dict keys, so
// `torchvision.models.resnet50().load_state_dict(torch.load(path), strict=True)` accepts it.
// LoadCheckpoint reads such files back, and also files Python wrote with
// `torch.save(model.state_dict(), path)` (a collections.OrderedDict) or a plain dict, through
// the project's own archive reader (torch_archive_loader.h), not libtorch's unpickler, which
// cannot rebuild an OrderedDict.
//
// Threading: free functions without shared state; callers must not train the modules while
// collecting or loading their tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"
#include "worker/runtime/layers/layer_module.h"

namespace deepool::worker {

// Tensors by state_dict key, in the graph's layer order (parameters before buffers, each in
// registration order).
using StateDict = std::vector<std::pair<std::string, at::Tensor>>;

// The parameters and buffers of the modules, their submodules' included (multihead_attention's
// out_proj.weight and out_proj.bias). modules[i] is graph layer i's module, or nullptr
// for a layer this process does not hold (its keys are left out). The tensors alias the
// modules' storage; SaveCheckpoint copies them to the CPU as it writes.
StatusOr<StateDict> CollectStateDict(const planner::Graph& graph,
                                     const std::vector<std::shared_ptr<LayerModule>>& modules);

// Copies `state` into the modules (on whatever device they are) after the strict check the
// coordinator runs at submission (weights/state_dict_check.h, CheckStateDict): every parameter
// and buffer of every held module must be present with its shape, and every key must be one of
// the graph's state_dict (a checkpoint of another model is refused); keys of graph layers that
// are not held here (nullptr) are skipped, so each rank of a burst plan can load the
// whole-model file.
Status LoadStateDictInto(const StateDict& state, const planner::Graph& graph,
                         const std::vector<std::shared_ptr<LayerModule>>& modules);

// Writes `state` to `path` (through a temporary file renamed into place). When given, *bytes
// and *digest get the file's size and common/content_digest.h digest.
Status SaveCheckpoint(const std::string& path, const StateDict& state, int64_t* bytes = nullptr,
                      uint64_t* digest = nullptr);

// Reads a state_dict file as written by SaveCheckpoint or torch.save (LoadTorchArchive). Tensors
// come back on the CPU; tensors that shared a storage when saved share one again.
StatusOr<StateDict> LoadCheckpoint(const std::string& path);

}  // namespace deepool::worker
