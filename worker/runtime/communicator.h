// The runtime's view of collective and point-to-point communication between executor ranks.
//
// Every operation is asynchronous: it returns a CommWork handle whose Wait() reports success, a
// failed peer or a timeout as a Status (never a hang, never an exception). Implementations:
// GlooCommunicator (CPU tensors, c10d ProcessGroupGloo; communicator_gloo.h), an NCCL variant for
// CUDA tensors (communicator_nccl.cc, built only with DEEPOOL_HAVE_CUDA) and FakeCommunicator in
// the tests.
// Threading: a communicator is driven by one executor thread; CommWork handles may be waited on
// from that thread only.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <vector>

#include "common/status.h"

namespace deepool::worker {

class CommWork {
 public:
  virtual ~CommWork() = default;
  // Blocks until the operation finished (OK), failed (UNAVAILABLE, naming the cause) or did not
  // finish within `timeout` (DEADLINE_EXCEEDED).
  virtual Status Wait(std::chrono::milliseconds timeout) = 0;
};

using RankGroup = std::vector<int>;  // world ranks, ascending, distinct

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // The default bound for Wait() and for transfers inside the backend.
  virtual std::chrono::milliseconds timeout() const = 0;

  // Creates one communication group per distinct rank set. Every rank calls it with the same
  // list in the same order; a rank takes part only in the groups it belongs to. Groups already
  // created are kept; singletons need no group. Blocks until each group's members met (bounded
  // by the timeout).
  virtual Status CreateGroups(const std::vector<RankGroup>& groups) = 0;

  // Sends a contiguous tensor to world rank `dst`. The tensor must stay unchanged until the
  // handle completes. `tag` pairs a send with the matching Recv on the other side.
  virtual StatusOr<std::unique_ptr<CommWork>> Send(const torch::Tensor& tensor, int dst,
                                                   int tag) = 0;
  // Receives into a preallocated contiguous tensor of the sender's shape and dtype.
  virtual StatusOr<std::unique_ptr<CommWork>> Recv(torch::Tensor tensor, int src, int tag) = 0;
  // In-place elementwise sum over `group` (created by CreateGroups, or the whole world when it
  // lists every rank). This rank must be a member.
  virtual StatusOr<std::unique_ptr<CommWork>> AllReduceSum(torch::Tensor tensor,
                                                           const RankGroup& group) = 0;
};

// A handle that is already complete, with a fixed result.
class DoneWork final : public CommWork {
 public:
  explicit DoneWork(Status status = Status::Ok()) : status_(std::move(status)) {}
  Status Wait(std::chrono::milliseconds) override { return status_; }

 private:
  Status status_;
};

// Waits for the handles in order and returns at the first error (the rest are abandoned: after
// a failure the executor gives up on the iteration).
Status WaitAll(std::vector<std::unique_ptr<CommWork>>& works, std::chrono::milliseconds timeout);

}  // namespace deepool::worker
