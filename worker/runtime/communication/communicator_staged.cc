#include "worker/runtime/communication/communicator_staged.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <exception>
#include <string>
#include <utility>

namespace deepool::worker {
namespace {

bool NotOnHost(const torch::Tensor& tensor) { return !tensor.device().is_cpu(); }

// Blocks the host until the work queued on `device`'s current stream (the calling thread's)
// finished. Through c10's device guard, so this file needs no CUDA headers; a no-op on the CPU.
void SynchronizeCurrentStream(const torch::Device& device) {
  if (device.is_cpu()) return;
  c10::impl::VirtualGuardImpl guard(device.type());
  guard.getStream(device).synchronize();
}

// A caller's tensor and the host buffer the inner communicator works on in its place.
struct Staged {
  torch::Tensor caller;
  torch::Tensor host;
  bool copy_back = false;  // a result (sum, receive), not a send
};

// The caller's tensors staged for one operation; the host buffers are what the inner
// communicator sees.
class Staging {
 public:
  explicit Staging(const StagingOptions& options) : options_(options) {}

  // The tensor to hand the inner communicator in place of `tensor`. `read`: the operation reads
  // it (a send, an all-reduce), so its value is copied in; `result`: it is written back on wait.
  torch::Tensor Stage(const torch::Tensor& tensor, bool read, bool result) {
    const bool stage = options_.stage ? options_.stage(tensor) : NotOnHost(tensor);
    if (!stage) return tensor;
    // Pinned for a device tensor, so the copy back can be queued without blocking the host.
    torch::Tensor host = torch::empty(
        tensor.sizes(), tensor.options().device(torch::kCPU).pinned_memory(tensor.is_cuda()));
    if (read) {
      // Queued on the current stream; one synchronisation below covers every copy.
      host.copy_(tensor, /*non_blocking=*/tensor.is_cuda());
      if (!tensor.device().is_cpu()) device_to_sync_ = tensor.device();
    }
    staged_.push_back(Staged{tensor, host, result});
    return host;
  }

  // Waits until the host copies taken by Stage hold their values.
  void CopiesTaken() {
    if (device_to_sync_) SynchronizeCurrentStream(*device_to_sync_);
    device_to_sync_.reset();
  }

  std::vector<Staged> Take() { return std::move(staged_); }

 private:
  const StagingOptions& options_;
  std::vector<Staged> staged_;
  std::optional<torch::Device> device_to_sync_;
};

class StagedWork final : public CommWork {
 public:
  StagedWork(std::unique_ptr<CommWork> inner, std::vector<Staged> staged)
      : inner_(std::move(inner)), staged_(std::move(staged)) {}

  Status Wait(std::chrono::milliseconds timeout) override {
    RETURN_IF_ERROR(inner_->WaitHost(timeout));
    return CopyBack(/*block=*/false);
  }
  Status WaitHost(std::chrono::milliseconds timeout) override {
    RETURN_IF_ERROR(inner_->WaitHost(timeout));
    return CopyBack(/*block=*/true);
  }

 private:
  // Queues the results' copies into the caller's tensors on the current stream (once); with
  // `block`, waits until they finished.
  Status CopyBack(bool block) {
    try {
      if (!copied_) {
        for (Staged& s : staged_) {
          if (s.copy_back) s.caller.copy_(s.host, /*non_blocking=*/s.caller.is_cuda());
        }
        copied_ = true;
      }
      if (block) {
        for (const Staged& s : staged_) {
          if (s.copy_back) SynchronizeCurrentStream(s.caller.device());
        }
      }
    } catch (const std::exception& e) {
      return InternalError(std::string("copying staged results back: ") + e.what());
    }
    // The host buffers are kept until the handle goes: a pinned buffer's queued copy keeps its
    // block from reuse (libtorch's caching host allocator records the stream's use).
    return Status::Ok();
  }

  std::unique_ptr<CommWork> inner_;
  std::vector<Staged> staged_;
  bool copied_ = false;
};

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(std::unique_ptr<Communicator> inner, StagingOptions options)
      : inner_(std::move(inner)), options_(std::move(options)) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  Status CreateGroups(const std::vector<RankGroup>& groups) override {
    return inner_->CreateGroups(groups);
  }

  StatusOr<std::unique_ptr<CommWork>> Exchange(std::vector<P2POp> ops) override {
    RETURN_IF_ERROR(CheckP2POps(ops, rank(), world_size()));
    Staging staging(options_);
    std::vector<P2POp> host_ops;
    host_ops.reserve(ops.size());
    try {
      for (const P2POp& op : ops) {
        const bool send = op.kind == P2POp::Kind::kSend;
        P2POp host_op = op;
        host_op.tensor = staging.Stage(op.tensor, /*read=*/send, /*result=*/!send);
        host_ops.push_back(std::move(host_op));
      }
      staging.CopiesTaken();
    } catch (const std::exception& e) {
      return InternalError(std::string("staging a point-to-point group: ") + e.what());
    }
    ASSIGN_OR_RETURN(auto work, inner_->Exchange(std::move(host_ops)));
    return std::unique_ptr<CommWork>(new StagedWork(std::move(work), staging.Take()));
  }

  StatusOr<std::unique_ptr<CommWork>> AllReduceSum(torch::Tensor tensor,
                                                   const RankGroup& group) override {
    Staging staging(options_);
    torch::Tensor host;
    try {
      host = staging.Stage(tensor, /*read=*/true, /*result=*/true);
      staging.CopiesTaken();
    } catch (const std::exception& e) {
      return InternalError(std::string("staging an all-reduce: ") + e.what());
    }
    ASSIGN_OR_RETURN(auto work, inner_->AllReduceSum(host, group));
    return std::unique_ptr<CommWork>(new StagedWork(std::move(work), staging.Take()));
  }

 private:
  std::unique_ptr<Communicator> inner_;
  StagingOptions options_;
};

}  // namespace

std::unique_ptr<Communicator> MakeStagedCommunicator(std::unique_ptr<Communicator> inner,
                                                     StagingOptions options) {
  return std::make_unique<StagedCommunicator>(std::move(inner), std::move(options));
}

StatusOr<std::unique_ptr<Communicator>> ConnectStaged(
    const CommOptions& options, const std::function<void(int port)>& on_store_ready) {
  ASSIGN_OR_RETURN(auto inner, ConnectGloo(options, on_store_ready));
  return MakeStagedCommunicator(std::move(inner));
}

}  // namespace deepool::worker
