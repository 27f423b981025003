#include "worker/runtime/background/multiplex_communicator.h"

namespace deepool::worker {
namespace {

class IdleWaitWork final : public CommWork {
 public:
  IdleWaitWork(std::unique_ptr<CommWork> inner, DeviceGate* gate)
      : inner_(std::move(inner)), gate_(gate) {}
  Status Wait(std::chrono::milliseconds timeout) override {
    gate_->FgIdleBegin();
    Status status = inner_->Wait(timeout);
    gate_->FgIdleEnd();
    return status;
  }
  Status WaitHost(std::chrono::milliseconds timeout) override {
    gate_->FgIdleBegin();
    Status status = inner_->WaitHost(timeout);
    gate_->FgIdleEnd();
    return status;
  }

 private:
  std::unique_ptr<CommWork> inner_;
  DeviceGate* gate_;
};

}  // namespace

StatusOr<std::unique_ptr<CommWork>> SharingCommunicator::Wrap(
    StatusOr<std::unique_ptr<CommWork>> work) {
  if (!work.ok()) return work.status();
  return std::unique_ptr<CommWork>(new IdleWaitWork(std::move(work).value(), gate_));
}

Status SharingCommunicator::CreateGroups(const std::vector<RankGroup>& groups) {
  gate_->FgIdleBegin();
  Status status = inner_->CreateGroups(groups);
  gate_->FgIdleEnd();
  return status;
}

StatusOr<std::unique_ptr<CommWork>> SharingCommunicator::Exchange(std::vector<P2POp> ops) {
  return Wrap(inner_->Exchange(std::move(ops)));
}

StatusOr<std::unique_ptr<CommWork>> SharingCommunicator::AllReduceSum(torch::Tensor tensor,
                                                                      const RankGroup& group) {
  return Wrap(inner_->AllReduceSum(std::move(tensor), group));
}

}  // namespace deepool::worker
