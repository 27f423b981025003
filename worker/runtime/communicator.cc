#include "worker/runtime/communicator.h"

namespace deepool::worker {

Status WaitAll(std::vector<std::unique_ptr<CommWork>>& works, std::chrono::milliseconds timeout) {
  for (auto& work : works) {
    RETURN_IF_ERROR(work->Wait(timeout));
  }
  works.clear();
  return Status::Ok();
}

}  // namespace deepool::worker
