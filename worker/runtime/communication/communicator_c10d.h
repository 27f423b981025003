// Internal to the communicators: the c10d-backed Communicator shared by Gloo and NCCL.
// A backend supplies MakeGroup (store, rank in group, group size) -> c10d group object.
// Point-to-point groups go over the world group: as one coalesced NCCL group where the backend
// supports coalescing (ProcessGroupNCCL), otherwise op by op (Gloo pairs them by tag).
// Waits on CUDA tensors only order the current stream (CommWork::Wait); WaitHost blocks.
// Threading: as Communicator (one driving thread).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "worker/runtime/communication/communicator.h"
#include "worker/runtime/communication/communicator_gloo.h"

namespace deepool::worker::internal {

// A backend's communication group (ProcessGroupGloo or ProcessGroupNCCL).
using C10dGroup = c10d::Backend;

using GroupFactory = std::function<c10::intrusive_ptr<C10dGroup>(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size)>;

// Hosts or joins the TCPStore as CommOptions says (rank 0 hosts; port 0 binds a free port and
// calls on_store_ready with it). Errors are values; c10d exceptions are converted.
StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(
    const CommOptions& options, const std::function<void(int port)>& on_store_ready);

class C10dCommunicator final : public Communicator {
 public:
  // Joins the world group through `store` (blocks until every rank joined, or the timeout).
  static StatusOr<std::unique_ptr<Communicator>> Create(const CommOptions& options,
                                                        c10::intrusive_ptr<c10d::Store> store,
                                                        GroupFactory make_group,
                                                        std::string backend_name);

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  Status CreateGroups(const std::vector<RankGroup>& groups) override;
  StatusOr<std::unique_ptr<CommWork>> Exchange(std::vector<P2POp> ops) override;
  StatusOr<std::unique_ptr<CommWork>> AllReduceSum(torch::Tensor tensor,
                                                   const RankGroup& group) override;

 private:
  C10dCommunicator(CommOptions options, c10::intrusive_ptr<c10d::Store> store,
                   GroupFactory make_group, std::string backend_name)
      : options_(std::move(options)),
        store_(std::move(store)),
        make_group_(std::move(make_group)),
        backend_name_(std::move(backend_name)) {}
  StatusOr<c10::intrusive_ptr<C10dGroup>> MakeGroup(const std::string& prefix, int rank, int size);
  // One c10d send or recv on the world group.
  c10::intrusive_ptr<c10d::Work> Post(const P2POp& op);
  StatusOr<std::unique_ptr<CommWork>> ExchangeCoalesced(const std::vector<P2POp>& ops);
  StatusOr<std::unique_ptr<CommWork>> ExchangeEach(const std::vector<P2POp>& ops);

  CommOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  GroupFactory make_group_;
  std::string backend_name_;
  c10::intrusive_ptr<C10dGroup> world_;
  std::map<RankGroup, c10::intrusive_ptr<C10dGroup>> groups_;
};

}  // namespace deepool::worker::internal
