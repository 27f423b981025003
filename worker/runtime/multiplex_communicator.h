// A Communicator decorator that tells the device gate when the FG rank is idle: every Wait() on
// a transfer or a collective is an idle period (FgIdleBegin before, FgIdleEnd after). The
// executor needs no change: it gets this communicator instead of the real one, and the layers
// its rank is not part of show up as waits for the next input.
//
// Threading: as Communicator (one FG thread); the gate is shared with the BG thread.
#pragma once

#include <memory>

#include "worker/runtime/communicator.h"
#include "worker/runtime/multiplex_gate.h"

namespace deepool::worker {

class SharingCommunicator final : public Communicator {
 public:
  // `gate` must outlive this communicator and every handle it returned.
  SharingCommunicator(std::unique_ptr<Communicator> inner, DeviceGate* gate)
      : inner_(std::move(inner)), gate_(gate) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  Status CreateGroups(const std::vector<RankGroup>& groups) override;
  StatusOr<std::unique_ptr<CommWork>> Send(const torch::Tensor& tensor, int dst,
                                           int tag) override;
  StatusOr<std::unique_ptr<CommWork>> Recv(torch::Tensor tensor, int src, int tag) override;
  StatusOr<std::unique_ptr<CommWork>> AllReduceSum(torch::Tensor tensor,
                                                   const RankGroup& group) override;

  Communicator& inner() { return *inner_; }

 private:
  StatusOr<std::unique_ptr<CommWork>> Wrap(StatusOr<std::unique_ptr<CommWork>> work);

  std::unique_ptr<Communicator> inner_;
  DeviceGate* gate_;
};

}  // namespace deepool::worker
