// A Communicator decorator that tells the device gate when the FG rank is idle: every Wait() (and
// WaitHost()) on a transfer group or a collective is an idle period (FgIdleBegin before,
// FgIdleEnd after). The executor needs no change: it gets this communicator instead of the real
// one, and the layers its rank is not part of show up as waits for the next input. On CUDA
// (NCCL) a Wait only orders the stream and returns at once, so these periods are short there:
// the idle time that matters is the device's, which priority streams hand to BG work.
//
// Threading: as Communicator (one FG thread); the gate is shared with the BG thread.
#pragma once

#include <memory>

#include "worker/runtime/communication/communicator.h"
#include "worker/runtime/background/multiplex_gate.h"

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
  StatusOr<std::unique_ptr<CommWork>> Exchange(std::vector<P2POp> ops) override;
  StatusOr<std::unique_ptr<CommWork>> AllReduceSum(torch::Tensor tensor,
                                                   const RankGroup& group) override;

  Communicator& inner() { return *inner_; }

 private:
  StatusOr<std::unique_ptr<CommWork>> Wrap(StatusOr<std::unique_ptr<CommWork>> work);

  std::unique_ptr<Communicator> inner_;
  DeviceGate* gate_;
};

}  // namespace deepool::worker
