// The check of a job's weights to start from ("init": {"path": ...}) at submission: when the
// coordinator can read the file, its index (weights/weights_index.h) is compared with the job's
// graph as every rank will compare it (weights/state_dict_check.h), so a file of another model,
// with a missing key or a wrong shape, is refused before the job is stored. A file the
// coordinator cannot open (it may exist on the workers only) or whose pickle the index does not
// read passes unchecked: the ranks' check as they load it stays the safety net. Callers check
// the path against the coordinator's path roots first.
// Threading: a free function without shared state; reads the file's directory and pickle (or
// safetensors header) only, never the tensors.
#pragma once

#include <string>

#include "common/status.h"
#include "planner/graph.h"

namespace deepool::coordinator {

// OK for an empty path. INVALID_ARGUMENT starting "init.path: " and naming the file and the
// first differing key otherwise ("init.path: /w/m.pt: checkpoint lacks 1 tensor(s) of graph
// 'mlp': fc1.weight"), or the damage of a file that is not a readable weights file.
Status CheckInitialWeightsAtSubmission(const std::string& path, const planner::Graph& graph);

}  // namespace deepool::coordinator
