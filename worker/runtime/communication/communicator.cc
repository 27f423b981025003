#include "worker/runtime/communication/communicator.h"

#include <algorithm>
#include <string>

namespace deepool::worker {
namespace {

class AllOfWork final : public CommWork {
 public:
  explicit AllOfWork(std::vector<std::unique_ptr<CommWork>> works) : works_(std::move(works)) {}
  Status Wait(std::chrono::milliseconds timeout) override { return WaitEach(timeout, false); }
  Status WaitHost(std::chrono::milliseconds timeout) override { return WaitEach(timeout, true); }

 private:
  Status WaitEach(std::chrono::milliseconds timeout, bool host) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto& work : works_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      left = std::max(left, std::chrono::milliseconds(1));
      RETURN_IF_ERROR(host ? work->WaitHost(left) : work->Wait(left));
    }
    return Status::Ok();
  }

  std::vector<std::unique_ptr<CommWork>> works_;
};

}  // namespace

Status WaitAll(std::vector<std::unique_ptr<CommWork>>& works, std::chrono::milliseconds timeout) {
  for (auto& work : works) {
    RETURN_IF_ERROR(work->Wait(timeout));
  }
  works.clear();
  return Status::Ok();
}

std::unique_ptr<CommWork> AllOf(std::vector<std::unique_ptr<CommWork>> works) {
  if (works.size() == 1) return std::move(works[0]);
  return std::make_unique<AllOfWork>(std::move(works));
}

Status CheckP2POps(const std::vector<P2POp>& ops, int rank, int world_size) {
  for (const P2POp& op : ops) {
    const char* kind = op.kind == P2POp::Kind::kSend ? "send" : "receive";
    if (op.peer < 0 || op.peer >= world_size || op.peer == rank) {
      return InvalidArgumentError(std::string(kind) + " on rank " + std::to_string(rank) +
                                  " names peer " + std::to_string(op.peer) + " in a world of " +
                                  std::to_string(world_size));
    }
    if (!op.tensor.defined() || !op.tensor.is_contiguous()) {
      return InvalidArgumentError(std::string(kind) + " " + std::to_string(rank) + "/" +
                                  std::to_string(op.peer) + " tag " + std::to_string(op.tag) +
                                  " needs a defined contiguous tensor");
    }
  }
  return Status::Ok();
}

}  // namespace deepool::worker
