#include "worker/runtime/communication/communicator_c10d.h"

#include <algorithm>
#include <exception>
#include <sstream>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/host_port.h"
#include "common/logging.h"

namespace deepool::worker::internal {
namespace {

std::string GroupKey(const RankGroup& group) {
  std::ostringstream key;
  key << "group";
  for (int rank : group) key << '/' << rank;
  return key.str();
}

bool LooksLikeTimeout(const std::string& message) {
  std::string lower = message;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

// A libtorch/Gloo failure as a Status: timeouts become DEADLINE_EXCEEDED, the rest (closed
// connections, dead peers) UNAVAILABLE. Only the first line of c10::Error's message is kept.
Status FromException(const std::string& what, const std::exception& e) {
  std::string message = e.what();
  if (auto newline = message.find('\n'); newline != std::string::npos) message.resize(newline);
  if (LooksLikeTimeout(message)) return DeadlineExceededError(what + ": " + message);
  return UnavailableError(what + ": " + message);
}

// A c10d operation (or coalesced group) as a CommWork. On CUDA tensors Wait() only makes the
// current stream wait on the operation's end event (c10d's wait without a timeout): passing a
// timeout would block the host until the kernel finished, which is what the executor must not do
// on its hot path. NCCL's watchdog bounds the operation by the group's timeout and records the
// failure, which the next wait rethrows. WaitHost() always blocks, with the timeout.
class C10dWork final : public CommWork {
 public:
  C10dWork(c10::intrusive_ptr<c10d::Work> work, std::vector<torch::Tensor> tensors,
           std::string what)
      : work_(std::move(work)), tensors_(std::move(tensors)), what_(std::move(what)) {
    for (const auto& tensor : tensors_) on_device_ = on_device_ || tensor.is_cuda();
  }

  Status Wait(std::chrono::milliseconds timeout) override {
    return on_device_ ? WaitFor(::kNoTimeout) : WaitFor(timeout);
  }
  Status WaitHost(std::chrono::milliseconds timeout) override { return WaitFor(timeout); }

 private:
  Status WaitFor(std::chrono::milliseconds timeout) {
    try {
      if (!work_->wait(timeout)) {
        return DeadlineExceededError(what_ + ": no completion within " +
                                     std::to_string(timeout.count()) + " ms");
      }
      return Status::Ok();
    } catch (const std::exception& e) {
      return FromException(what_, e);
    }
  }

  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<torch::Tensor> tensors_;  // kept alive until the transfer completed
  std::string what_;
  bool on_device_ = false;
};

std::string Describe(const P2POp& op, int rank) {
  bool send = op.kind == P2POp::Kind::kSend;
  return std::string(send ? "send " : "recv ") + std::to_string(send ? rank : op.peer) + "->" +
         std::to_string(send ? op.peer : rank) + " tag " + std::to_string(op.tag);
}

// "group of 3 on rank 1 (send 1->2 tag 4, ...)", naming the first few ops.
std::string DescribeGroup(const std::vector<P2POp>& ops, int rank) {
  std::string what =
      "group of " + std::to_string(ops.size()) + " on rank " + std::to_string(rank) + " (";
  for (size_t i = 0; i < ops.size() && i < 3; ++i) {
    what += (i > 0 ? ", " : "") + Describe(ops[i], rank);
  }
  return what + (ops.size() > 3 ? ", ...)" : ")");
}

}  // namespace

StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(
    const CommOptions& options, const std::function<void(int port)>& on_store_ready) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return InvalidArgumentError("rank " + std::to_string(options.rank) +
                                " is outside a world of size " +
                                std::to_string(options.world_size));
  }
  if (options.rank != 0 && options.store_port <= 0) {
    return InvalidArgumentError("rank " + std::to_string(options.rank) +
                                " needs the store's port (only rank 0 may pass 0)");
  }
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(options.store_port);
  store_options.isServer = options.rank == 0;
  store_options.numWorkers = static_cast<std::size_t>(options.world_size);
  store_options.waitWorkers = false;  // the world group's rendezvous waits, with our timeout
  // libtorch rounds the socket connect timeout down to whole seconds (0 s would fail at once),
  // so the store gets at least a few seconds; transfers keep the caller's timeout.
  store_options.timeout =
      std::max<std::chrono::milliseconds>(options.timeout, std::chrono::seconds(5));
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>(options.store_host, store_options);
    if (options.rank == 0 && on_store_ready) on_store_ready(store->getPort());
    return c10::intrusive_ptr<c10d::Store>(store);
  } catch (const std::exception& e) {
    return FromException("store " + FormatHostPort(options.store_host, options.store_port),
                         e);
  }
}

StatusOr<std::unique_ptr<Communicator>> C10dCommunicator::Create(
    const CommOptions& options, c10::intrusive_ptr<c10d::Store> store, GroupFactory make_group,
    std::string backend_name) {
  std::unique_ptr<C10dCommunicator> comm(new C10dCommunicator(
      options, std::move(store), std::move(make_group), std::move(backend_name)));
  ASSIGN_OR_RETURN(comm->world_, comm->MakeGroup("world", options.rank, options.world_size));
  RankGroup everyone(static_cast<size_t>(options.world_size));
  for (int r = 0; r < options.world_size; ++r) everyone[static_cast<size_t>(r)] = r;
  comm->groups_[everyone] = comm->world_;
  DP_LOG_DEBUG("rank {} joined a {} world of {}", options.rank, comm->backend_name_,
               options.world_size);
  return std::unique_ptr<Communicator>(std::move(comm));
}

StatusOr<c10::intrusive_ptr<C10dGroup>> C10dCommunicator::MakeGroup(const std::string& prefix,
                                                                    int rank, int size) {
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
    return make_group_(prefixed, rank, size);
  } catch (const std::exception& e) {
    return FromException(
        backend_name_ + " group " + prefix + " (rank " + std::to_string(options_.rank) + ")", e);
  }
}

Status C10dCommunicator::CreateGroups(const std::vector<RankGroup>& groups) {
  for (const RankGroup& group : groups) {
    if (group.size() < 2 || groups_.count(group) > 0) continue;
    auto member = std::find(group.begin(), group.end(), options_.rank);
    if (member == group.end()) continue;
    for (size_t i = 0; i < group.size(); ++i) {
      if (group[i] < 0 || group[i] >= options_.world_size || (i > 0 && group[i] <= group[i - 1])) {
        return InvalidArgumentError(GroupKey(group) + " is not an ascending set of world ranks");
      }
    }
    ASSIGN_OR_RETURN(auto created,
                     MakeGroup(GroupKey(group), static_cast<int>(member - group.begin()),
                               static_cast<int>(group.size())));
    groups_[group] = std::move(created);
  }
  return Status::Ok();
}

c10::intrusive_ptr<c10d::Work> C10dCommunicator::Post(const P2POp& op) {
  std::vector<torch::Tensor> tensors{op.tensor};
  return op.kind == P2POp::Kind::kSend ? world_->send(tensors, op.peer, op.tag)
                                       : world_->recv(tensors, op.peer, op.tag);
}

StatusOr<std::unique_ptr<CommWork>> C10dCommunicator::Exchange(std::vector<P2POp> ops) {
  RETURN_IF_ERROR(CheckP2POps(ops, options_.rank, options_.world_size));
  if (ops.empty()) return std::unique_ptr<CommWork>(new DoneWork());
  return world_->supportsCoalescing() ? ExchangeCoalesced(ops) : ExchangeEach(ops);
}

// One NCCL group (ncclGroupStart/End inside startCoalescing/endCoalescing): the ops run
// concurrently, so a group that sends to and receives from the same peer cannot deadlock on
// itself. The ops' own works are null while coalescing; endCoalescing returns the group's.
StatusOr<std::unique_ptr<CommWork>> C10dCommunicator::ExchangeCoalesced(
    const std::vector<P2POp>& ops) {
  std::string what = DescribeGroup(ops, options_.rank);
  std::vector<torch::Tensor> tensors;
  bool coalescing = false;
  try {
    world_->startCoalescing();
    coalescing = true;
    for (const P2POp& op : ops) {
      Post(op);
      tensors.push_back(op.tensor);
    }
    coalescing = false;
    auto work = world_->endCoalescing();
    if (!work) return InternalError(what + ": the backend returned no work for the group");
    return std::unique_ptr<CommWork>(new C10dWork(std::move(work), tensors, std::move(what)));
  } catch (const std::exception& e) {
    if (coalescing) {
      try {  // leave coalescing mode, so that the backend does not fold later ops into this group
        world_->endCoalescing();
      } catch (const std::exception&) {
      }
    }
    return FromException(what, e);
  }
}

// Op by op, for backends without coalescing (Gloo, whose tags pair the ops).
StatusOr<std::unique_ptr<CommWork>> C10dCommunicator::ExchangeEach(const std::vector<P2POp>& ops) {
  std::vector<std::unique_ptr<CommWork>> works;
  for (const P2POp& op : ops) {
    std::string what = Describe(op, options_.rank);
    try {
      works.emplace_back(new C10dWork(Post(op), {op.tensor}, std::move(what)));
    } catch (const std::exception& e) {
      return FromException(what, e);
    }
  }
  return AllOf(std::move(works));
}

StatusOr<std::unique_ptr<CommWork>> C10dCommunicator::AllReduceSum(torch::Tensor tensor,
                                                                   const RankGroup& group) {
  auto found = groups_.find(group);
  if (found == groups_.end()) {
    return FailedPreconditionError("all-reduce on " + GroupKey(group) +
                                   ", which CreateGroups did not create on rank " +
                                   std::to_string(options_.rank));
  }
  std::vector<torch::Tensor> tensors{std::move(tensor)};
  std::string what = "all-reduce on " + GroupKey(group);
  try {
    c10d::AllreduceOptions reduce_options;
    reduce_options.reduceOp = c10d::ReduceOp::SUM;
    reduce_options.timeout = options_.timeout;
    auto work = found->second->allreduce(tensors, reduce_options);
    return std::unique_ptr<CommWork>(new C10dWork(std::move(work), tensors, std::move(what)));
  } catch (const std::exception& e) {
    return FromException(what, e);
  }
}

}  // namespace deepool::worker::internal
