// The strict check of a weights file against a graph, as torch's
// load_state_dict(strict=True): the one comparison that the coordinator runs at submission
// (on the file's index, weights_index.h) and every rank runs before it copies the tensors
// (worker/runtime/checkpoints/checkpoint.h, LoadStateDictInto), so both accept the same files.
//
// The graph's state_dict is planner::GraphStateShapes: parameters (a tied one under both keys,
// as torch.save stores it) and buffers. In order, the first failure wins:
// 1. a file key the graph's state_dict does not have: "checkpoint has N key(s) that graph 'G'
//    does not have: K1, K2, ..." (the first 5);
// 2. layer by layer, a tensor of another shape: "checkpoint tensor 'K' has shape [3,3], the
//    model expects [10,16]";
// 3. tensors the file lacks: "checkpoint lacks N tensor(s) of graph 'G': K1, ..." (the first 5).
// Shapes only: a dtype is converted when the tensors are copied, as torch does.
// Errors are INVALID_ARGUMENT; callers add the file's name.
// Threading: free functions without shared state.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"
#include "weights/weights_index.h"

namespace deepool::weights {

// `held`, when given, has one flag per graph layer: a rank checks that the file has the tensors
// of the layers it holds (the others' keys must still be the graph's); without it, every layer.
Status CheckStateDict(const WeightsIndex& file, const planner::Graph& graph,
                      const std::vector<bool>* held = nullptr);

// The check before a run starts: the coordinator's at submission, deepool-train's before it
// starts ranks. A file that cannot be judged here is not an error: one that cannot be opened
// (NOT_FOUND, PERMISSION_DENIED: it may be on the workers only) or that uses something the index
// does not read (UNIMPLEMENTED; libtorch in the ranks may read it) comes back unchecked, with
// the reason, and the ranks' own check is the safety net. A damaged file is its read error
// (DATA_LOSS naming the file); a mismatch CheckStateDict's error, which callers prefix with the
// file's name.
struct WeightsFileCheck {
  bool checked = false;
  std::string why_unchecked;
};
StatusOr<WeightsFileCheck> CheckWeightsFile(const std::string& path, const planner::Graph& graph);

// "[10,16]", "[]" for a scalar: how the errors above write a shape.
std::string ShapeText(const std::vector<int64_t>& shape);

}  // namespace deepool::weights
