#include "coordinator/initial_weights_check.h"

#include "common/logging.h"
#include "weights/state_dict_check.h"

namespace deepool::coordinator {

Status CheckInitialWeightsAtSubmission(const std::string& path, const planner::Graph& graph) {
  if (path.empty()) return Status::Ok();
  StatusOr<weights::WeightsFileCheck> check = weights::CheckWeightsFile(path, graph);
  if (!check.ok()) {
    const std::string& message = check.status().message();
    // A mismatch does not name the file; a damaged file's read error does.
    return InvalidArgumentError(
        "init.path: " + (check.status().code() == StatusCode::kInvalidArgument ? path + ": " : "") +
        message);
  }
  if (!check->checked) {
    DP_LOG_INFO("init file {} not checked at submission ({}); the ranks check it as they load it",
                path, check->why_unchecked);
  }
  return Status::Ok();
}

}  // namespace deepool::coordinator
