// What a rank must save so that training can go on exactly where it stopped, on the same plan
// or on another one: the parameters and buffers of its layers under their state_dict keys
// (checkpoint.h) and the optimizer's per-parameter state under
// "optimizer.<layer>.<parameter>.<field>" (SGD: momentum_buffer; Adam and AdamW: step, exp_avg,
// exp_avg_sq, max_exp_avg_sq). The iteration, the data position and every random draw follow
// from the iteration count and the seed (data.h, layer_module.h), so the count in the
// checkpoint's manifest (checkpoint_dir.h) completes the state.
// Threading: free functions; callers must not train the modules meanwhile.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>

#include "common/status.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/layers/layer_module.h"

namespace deepool::worker {

// The keys of optimizer state begin with this; the rest are the model's.
inline constexpr char kOptimizerKeyPrefix[] = "optimizer.";

// The layers whose state `rank` writes, so that the ranks' files together hold each layer once:
// layer i is written by member i mod |set| of its device set, which spreads the writes of a
// data-parallel plan over all its ranks.
std::vector<int> LayersWrittenBy(const planner::Graph& graph, const planner::Plan& plan, int rank);

// The state of `layers` (each held in `modules`) and their parameters' optimizer state.
// `optimizer` may be null (no parameters on this rank).
StatusOr<StateDict> CollectTrainingState(const planner::Graph& graph,
                                         const std::map<int, std::shared_ptr<LayerModule>>& modules,
                                         const std::vector<int>& layers,
                                         const torch::optim::Optimizer* optimizer);

// Loads the state of every layer in `modules` from `state` (the ranks' files merged), and its
// parameters' optimizer state into `optimizer`. Every held parameter and buffer must be present;
// optimizer state is required for a parameter when `state` has any (a checkpoint written
// before the first step has none).
Status LoadTrainingState(const StateDict& state, const planner::Graph& graph,
                         const std::map<int, std::shared_ptr<LayerModule>>& modules,
                         torch::optim::Optimizer* optimizer);

}  // namespace deepool::worker
