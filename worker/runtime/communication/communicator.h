// The runtime's view of collective and point-to-point communication between executor ranks.
//
// Every operation is asynchronous: it returns a CommWork handle whose Wait() reports success, a
// failed peer or a timeout as a Status (never a hang, never an exception). Implementations:
// GlooCommunicator (CPU tensors, c10d ProcessGroupGloo; communicator_gloo.h), an NCCL variant for
// CUDA tensors (communicator_nccl.cc, built only with DEEPOOL_HAVE_CUDA) and the fakes in the
// tests (tests/runtime/fake_communicator.h, one of which has NCCL's matching rules).
//
// Point-to-point matching: callers must follow the strictest backend's rules, NCCL's, so that
// one executor runs on every backend:
//   - tags are ignored: the sends from rank a to rank b match the receives posted on b from a
//     first-in first-out, in posting order (Gloo pairs by tag, so tags must still be given, and
//     pair the same ops);
//   - a rank's groups (Exchange calls) run one after another in posting order, like kernels on
//     one stream; the ops inside one group run concurrently;
//   - a send may not complete before its matching receive was posted (and reached), so a rank
//     that waits on a send whose peer waits on a send of its own deadlocks.
// The executor therefore posts every transfer of an iteration in one order that all ranks
// derive from the plan (executor.h).
//
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
  // Makes what this rank does next see the operation's result, and reports its outcome: OK,
  // UNAVAILABLE (a failed peer, naming the cause), DEADLINE_EXCEEDED (no completion within
  // `timeout`) or another error the backend found. Host backends (Gloo, the fakes) block until
  // the operation finished. A device backend (NCCL on CUDA tensors) only orders the current
  // device stream after the operation and returns at once, without blocking the host; its
  // watchdog bounds the operation by the communicator's timeout, and a failure found later is
  // reported by a later Wait or by WaitHost.
  virtual Status Wait(std::chrono::milliseconds timeout) = 0;
  // Blocks the host until the operation finished on every backend (bounded by `timeout`). For
  // the one wait per iteration that must see the result on the host (the loss).
  virtual Status WaitHost(std::chrono::milliseconds timeout) { return Wait(timeout); }
};

using RankGroup = std::vector<int>;  // world ranks, ascending, distinct

// One operation of a point-to-point group (Communicator::Exchange).
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  // Send: a contiguous tensor that must stay unchanged until the group completed. Receive: a
  // preallocated contiguous tensor of the sender's shape and dtype, written by the group.
  torch::Tensor tensor;
  int peer = 0;  // world rank, not this one
  int tag = 0;   // pairs the op on tag-matching backends (Gloo); NCCL ignores it

  static P2POp Send(torch::Tensor tensor, int dst, int tag) {
    return P2POp{Kind::kSend, std::move(tensor), dst, tag};
  }
  static P2POp Recv(torch::Tensor tensor, int src, int tag) {
    return P2POp{Kind::kRecv, std::move(tensor), src, tag};
  }
};

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

  // Posts a group of sends and receives at once (matching rules in the file comment); the
  // handle completes when every op of the group completed. An empty group is complete at once.
  virtual StatusOr<std::unique_ptr<CommWork>> Exchange(std::vector<P2POp> ops) = 0;
  // A group of one send or one receive.
  StatusOr<std::unique_ptr<CommWork>> Send(const torch::Tensor& tensor, int dst, int tag) {
    return Exchange({P2POp::Send(tensor, dst, tag)});
  }
  StatusOr<std::unique_ptr<CommWork>> Recv(torch::Tensor tensor, int src, int tag) {
    return Exchange({P2POp::Recv(std::move(tensor), src, tag)});
  }

  // In-place elementwise sum over `group` (created by CreateGroups, or the whole world when it
  // lists every rank). This rank must be a member. Every member must post its collectives in the
  // same order relative to every other collective it shares with another member (NCCL issues
  // them on per-group streams and hangs otherwise).
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

// One handle over several: Wait and WaitHost wait for each in order, all within one `timeout`,
// and return the first error.
std::unique_ptr<CommWork> AllOf(std::vector<std::unique_ptr<CommWork>> works);

// INVALID_ARGUMENT unless every op has a defined contiguous tensor and a peer in the world other
// than `rank`. For Exchange implementations.
Status CheckP2POps(const std::vector<P2POp>& ops, int rank, int world_size);

}  // namespace deepool::worker
