#include "worker/runtime/multiplex_communicator.h"

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

StatusOr<std::unique_ptr<CommWork>> SharingCommunicator::Send(const torch::Tensor& tensor, int dst,
                                                              int tag) {
  return Wrap(inner_->Send(tensor, dst, tag));
}

StatusOr<std::unique_ptr<CommWork>> SharingCommunicator::Recv(torch::Tensor tensor, int src,
                                                              int tag) {
  return Wrap(inner_->Recv(std::move(tensor), src, tag));
}

StatusOr<std::unique_ptr<CommWork>> SharingCommunicator::AllReduceSum(torch::Tensor tensor,
                                                                      const RankGroup& group) {
  return Wrap(inner_->AllReduceSum(std::move(tensor), group));
}

}  // namespace deepool::worker
