// FakeNetwork: an in-process network of ranks (threads) for executor and communicator tests,
// with failure injection, in one of two matching modes:
//   - kTagged (Gloo-like): a send is buffered at once and completes; a receive takes the oldest
//     message with its (source, tag). Operations run in any order.
//   - kNccl: NCCL's rules (communicator.h), the conservative model of ProcessGroupNCCL with an
//     eagerly created communicator: tags are ignored and the sends from a to b match the
//     receives on b from a first-in first-out; each rank has one stream per communication group
//     (the world stream carries every point-to-point group and the world all-reduces), on which
//     entries start in posting order, each after the previous one completed; the ops of one group
//     run concurrently; a send and its receive complete together once both their groups started
//     (rendezvous: no send completes before its receive is reached). A numel or dtype mismatch
//     between matched ops, and collectives that two members post in different orders, are
//     errors. When every rank is blocked in a wait that nothing can complete (the others have
//     failed or left), the waits return a deadlock error at once instead of timing out.
// In both modes an all-reduce completes when every member posted it (and, in kNccl, reached it
// on its stream) and a rank marked failed makes every operation that needs it fail with
// UNAVAILABLE. Received data and sums are copied into the caller's tensor by its own Wait.
// Threading: FakeNetwork is shared by the rank threads and guarded by one mutex; each
// FakeCommunicator is used by its own rank's thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "worker/runtime/communication/communicator.h"

namespace deepool::worker::testing {

enum class FakeSemantics { kTagged, kNccl };

class FakeNetwork : public std::enable_shared_from_this<FakeNetwork> {
 public:
  explicit FakeNetwork(int world_size, FakeSemantics semantics = FakeSemantics::kTagged)
      : world_size_(world_size), semantics_(semantics) {}

  std::unique_ptr<Communicator> Join(int rank, std::chrono::milliseconds timeout);

  // Marks a rank dead: its peers' pending and later operations with it fail.
  void Fail(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    failed_.insert(rank);
    Advance();
    CheckDeadlock();
    cv_.notify_all();
  }
  int world_size() const { return world_size_; }
  FakeSemantics semantics() const { return semantics_; }
  int64_t messages_sent() const {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_sent_;
  }
  // Bytes of every point-to-point send, and of the 16-bit ones (bf16, fp16) among them.
  int64_t bytes_sent() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_sent_;
  }
  int64_t half_bytes_sent() const {
    std::lock_guard<std::mutex> lock(mu_);
    return half_bytes_sent_;
  }
  // Bytes every rank posted to all-reduces (summed over ranks), and of the bf16 ones among them.
  int64_t bytes_all_reduced() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_all_reduced_;
  }
  int64_t bf16_bytes_all_reduced() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bf16_bytes_all_reduced_;
  }

 private:
  friend class FakeCommunicator;
  friend class FakeWork;
  struct Entry;
  struct Op {
    P2POp::Kind kind = P2POp::Kind::kSend;
    int rank = 0, peer = 0, tag = 0;
    torch::Tensor data;         // send: a snapshot; recv: the caller's buffer
    torch::Tensor payload;      // recv: the matched send's data, until the owner's Wait copies it
    std::shared_ptr<Op> match;  // the paired op, until both completed
    bool started = false;       // its group started on the stream
    bool done = false;
    Status status;
  };
  struct Collective {
    RankGroup group;
    int64_t seq = 0;
    std::map<int, torch::Tensor> contributions;  // by rank
    std::map<int, Entry*> entries;               // by rank
    torch::Tensor sum;
    Status status;
  };
  // One position on a rank's stream: a point-to-point group or this rank's part of a collective.
  struct Entry {
    int rank = 0;
    std::string what;
    std::vector<std::shared_ptr<Op>> ops;
    std::shared_ptr<Collective> collective;
    bool started = false, done = false;
    Status status;
  };
  // (rank, communication group, serial): kNccl keeps serial 0, so a rank's entries on one group
  // queue up; kTagged gives every entry its own stream, so nothing waits for anything else.
  using StreamKey = std::tuple<int, RankGroup, int64_t>;
  using MatchKey = std::tuple<int, int, int>;  // src, dst, tag (0 in kNccl)

  bool nccl() const { return semantics_ == FakeSemantics::kNccl; }
  std::string Name() const { return nccl() ? "fake nccl" : "fake"; }
  RankGroup World() const {
    RankGroup world(static_cast<size_t>(world_size_));
    for (int r = 0; r < world_size_; ++r) world[static_cast<size_t>(r)] = r;
    return world;
  }
  static std::string Describe(const Op& op) {
    int src = op.kind == P2POp::Kind::kSend ? op.rank : op.peer;
    int dst = op.kind == P2POp::Kind::kSend ? op.peer : op.rank;
    std::ostringstream out;
    out << (op.kind == P2POp::Kind::kSend ? "send " : "recv ") << src << "->" << dst << " tag "
        << op.tag << " " << op.data.sizes() << " " << op.data.scalar_type();
    return out.str();
  }

  // Posts a group of point-to-point ops (already checked) for `rank`. Caller holds mu_.
  std::shared_ptr<Entry> PostGroup(int rank, const std::vector<P2POp>& ops) {
    auto entry = std::make_shared<Entry>();
    entry->rank = rank;
    entry->what = "group " + std::to_string(groups_posted_[rank]++) + " of rank " +
                  std::to_string(rank) + " (";
    for (const P2POp& p2p : ops) {
      auto op = std::make_shared<Op>();
      op->kind = p2p.kind;
      op->rank = rank;
      op->peer = p2p.peer;
      op->tag = p2p.tag;
      bool send = p2p.kind == P2POp::Kind::kSend;
      op->data = send ? p2p.tensor.detach().clone() : p2p.tensor;
      if (send) {
        ++messages_sent_;
        const int64_t bytes = p2p.tensor.numel() * static_cast<int64_t>(p2p.tensor.element_size());
        bytes_sent_ += bytes;
        const auto dtype = p2p.tensor.scalar_type();
        if (dtype == torch::kBFloat16 || dtype == torch::kHalf) half_bytes_sent_ += bytes;
      }
      if (send && !nccl()) op->done = true;  // buffered at once
      entry->what += (entry->ops.empty() ? "" : ", ") + Describe(*op);
      Match(op, send ? MatchKey{rank, p2p.peer, nccl() ? 0 : p2p.tag}
                     : MatchKey{p2p.peer, rank, nccl() ? 0 : p2p.tag});
      entry->ops.push_back(std::move(op));
    }
    entry->what += ")";
    Enqueue(entry, World());
    return entry;
  }

  // Pairs `op` with the oldest unmatched op of the other kind under `key`, or queues it.
  void Match(const std::shared_ptr<Op>& op, const MatchKey& key) {
    bool send = op->kind == P2POp::Kind::kSend;
    auto& others = send ? unmatched_recvs_[key] : unmatched_sends_[key];
    if (others.empty()) {
      (send ? unmatched_sends_[key] : unmatched_recvs_[key]).push_back(op);
      return;
    }
    op->match = others.front();
    others.front()->match = op;
    others.pop_front();
  }

  void Enqueue(const std::shared_ptr<Entry>& entry, const RankGroup& group) {
    int64_t serial = nccl() ? 0 : ++serial_;
    streams_[StreamKey{entry->rank, group, serial}].push_back(entry);
    entries_.push_back(entry);  // kept until completed, so that Advance sees every entry
  }

  // Posts `rank`'s part of its next all-reduce on `group`; an order mismatch is an error.
  StatusOr<std::shared_ptr<Entry>> PostAllReduce(int rank, const torch::Tensor& tensor,
                                                 const RankGroup& group, int64_t seq) {
    if (nccl()) RETURN_IF_ERROR(CheckCollectiveOrder(rank, group, seq));
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    bytes_all_reduced_ += bytes;
    if (tensor.scalar_type() == torch::kBFloat16) bf16_bytes_all_reduced_ += bytes;
    auto& collective = collectives_[{group, seq}];
    if (!collective) {
      collective = std::make_shared<Collective>();
      collective->group = group;
      collective->seq = seq;
    }
    auto entry = std::make_shared<Entry>();
    entry->rank = rank;
    entry->collective = collective;
    entry->what = "all-reduce " + std::to_string(seq) + " on " + GroupName(group);
    collective->contributions[rank] = tensor.detach().clone();
    collective->entries[rank] = entry.get();
    Enqueue(entry, group);
    return entry;
  }

  static std::string GroupName(const RankGroup& group) {
    std::string name = "{";
    for (size_t i = 0; i < group.size(); ++i) {
      name += (i ? "," : "") + std::to_string(group[i]);
    }
    return name + "}";
  }

  // NCCL hangs when two members issue the collectives they share in different orders (each
  // blocks in the one the other has not reached). Each ordered pair of ranks keeps the shared
  // collectives one side posted that the other has not yet; the other side must post the same.
  Status CheckCollectiveOrder(int rank, const RankGroup& group, int64_t seq) {
    std::pair<RankGroup, int64_t> key{group, seq};
    for (int member : group) {
      if (member == rank) continue;
      auto& theirs = order_[{member, rank}];
      if (theirs.empty()) {
        order_[{rank, member}].push_back(key);
      } else if (theirs.front() == key) {
        theirs.pop_front();
      } else {
        broken_ = FailedPreconditionError(
            Name() + ": collective order mismatch: rank " + std::to_string(rank) +
            " issued all-reduce " + std::to_string(seq) + " on " + GroupName(group) +
            " where rank " + std::to_string(member) + " issued all-reduce " +
            std::to_string(theirs.front().second) + " on " + GroupName(theirs.front().first));
        cv_.notify_all();
        return broken_;
      }
    }
    return Status::Ok();
  }

  // Starts stream heads and completes what can complete, until nothing changes. Caller holds mu_.
  void Advance() {
    for (bool changed = true; changed;) {
      changed = false;
      for (auto stream = streams_.begin(); stream != streams_.end();) {
        auto& queue = stream->second;
        while (!queue.empty()) {
          Entry& head = *queue.front();
          if (!head.started) {
            head.started = changed = true;
            for (auto& op : head.ops) op->started = true;
          }
          if (!head.done) Progress(head);
          if (!head.done) break;
          queue.pop_front();
          changed = true;
        }
        stream = queue.empty() ? streams_.erase(stream) : std::next(stream);
      }
    }
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = (*it)->done ? entries_.erase(it) : std::next(it);
    }
  }

  void Progress(Entry& entry) {
    if (entry.collective) {
      ProgressCollective(*entry.collective);
      return;
    }
    bool all_done = true;
    for (auto& op : entry.ops) {
      if (!op->done) ProgressOp(*op);
      all_done = all_done && op->done;
      if (op->done && !op->status.ok() && entry.status.ok()) entry.status = op->status;
    }
    entry.done = all_done;
  }

  // Completes `op` with its match once both groups started (a send of kTagged is done already).
  void ProgressOp(Op& op) {
    if (op.match && op.match->started && op.started) {
      std::shared_ptr<Op> other = op.match;  // keeps it alive while the links are cut
      Op& send = op.kind == P2POp::Kind::kSend ? op : *other;
      Op& recv = op.kind == P2POp::Kind::kSend ? *other : op;
      Status status;
      if (send.data.numel() != recv.data.numel() || send.data.dtype() != recv.data.dtype()) {
        status = InvalidArgumentError(Name() + ": " + Describe(send) + " was matched with " +
                                      Describe(recv) + " (numel or dtype differ)");
      } else {
        recv.payload = send.data;
      }
      for (Op* side : {&send, &recv}) {
        if (!side->done) side->status = status;
        side->done = true;
        side->match.reset();
      }
      return;
    }
    if (failed_.count(op.peer) > 0) {
      op.done = true;
      op.status = UnavailableError(Name() + " " + Describe(op) + ": rank " +
                                   std::to_string(op.peer) + " failed");
    }
  }

  void ProgressCollective(Collective& collective) {
    Status status;
    bool ready = collective.entries.size() == collective.group.size();
    for (auto& [rank, entry] : collective.entries) ready = ready && entry->started;
    for (int member : collective.group) {
      if (failed_.count(member) > 0) {
        status = UnavailableError(Name() + " all-reduce on " + GroupName(collective.group) +
                                  ": rank " + std::to_string(member) + " failed (a member)");
        ready = true;
      }
    }
    if (!ready) return;
    if (status.ok()) status = Sum(collective);
    for (auto& [rank, entry] : collective.entries) {
      entry->done = true;
      entry->status = status;
    }
    collective.entries.clear();
    collectives_.erase({collective.group, collective.seq});  // the entries still hold it
  }

  // Sums in rank order, as a deterministic reduction would.
  Status Sum(Collective& collective) {
    for (auto& [rank, tensor] : collective.contributions) {
      if (collective.sum.defined() && (!collective.sum.sizes().equals(tensor.sizes()) ||
                                       collective.sum.dtype() != tensor.dtype())) {
        return InvalidArgumentError(Name() + ": all-reduce on " + GroupName(collective.group) +
                                    ": rank " + std::to_string(rank) +
                                    " contributed another shape or dtype");
      }
      collective.sum = collective.sum.defined() ? collective.sum + tensor : tensor.clone();
    }
    collective.contributions.clear();
    return Status::Ok();
  }

  // A deadlock: every rank has joined and is blocked on an incomplete entry, has failed or has
  // left, and at least one is blocked. Nothing can change then (Advance ran), so the waits fail at
  // once.
  void CheckDeadlock() {
    if (!broken_.ok()) return;
    std::string waits;
    for (int r = 0; r < world_size_; ++r) {
      if (failed_.count(r) > 0 || left_.count(r) > 0) continue;
      if (joined_.count(r) == 0) return;  // it may still join and post
      auto waiting = waiting_on_.find(r);
      if (waiting == waiting_on_.end() || waiting->second->done) return;
      waits += "; rank " + std::to_string(r) + " waits on " + waiting->second->what;
    }
    if (waits.empty()) return;
    broken_ =
        AbortedError(Name() + ": deadlock: every rank is blocked and none can progress" + waits);
    cv_.notify_all();
  }

  // Blocks `rank` until `entry` completed; then copies what it received into the caller's
  // tensors (`out`: an all-reduce's).
  Status Wait(int rank, Entry& entry, torch::Tensor& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    waiting_on_[rank] = &entry;
    CheckDeadlock();
    cv_.wait_for(lock, timeout, [&] { return entry.done || !broken_.ok(); });
    waiting_on_.erase(rank);
    if (!entry.done) {
      if (!broken_.ok()) return broken_;
      return DeadlineExceededError(Name() + ": " + entry.what + " on rank " + std::to_string(rank) +
                                   " timed out");
    }
    RETURN_IF_ERROR(entry.status);
    for (auto& op : entry.ops) {
      if (!op->payload.defined()) continue;
      op->data.view(-1).copy_(op->payload.reshape(-1));
      op->payload = torch::Tensor();
    }
    if (entry.collective && out.defined()) out.copy_(entry.collective->sum);
    entry.collective.reset();  // copied once; the sum goes with the last member's entry
    return Status::Ok();
  }

  void Leave(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    left_.insert(rank);
    CheckDeadlock();
  }

  const int world_size_;
  const FakeSemantics semantics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<StreamKey, std::deque<std::shared_ptr<Entry>>> streams_;
  std::vector<std::shared_ptr<Entry>> entries_;
  std::map<MatchKey, std::deque<std::shared_ptr<Op>>> unmatched_sends_, unmatched_recvs_;
  std::map<std::pair<RankGroup, int64_t>, std::shared_ptr<Collective>> collectives_;
  std::map<std::pair<int, int>, std::deque<std::pair<RankGroup, int64_t>>> order_;
  std::map<int, int64_t> groups_posted_;
  std::map<int, Entry*> waiting_on_;
  std::set<int> joined_, left_, failed_;
  Status broken_;  // a deadlock or a collective order mismatch: every later wait fails with it
  int64_t serial_ = 0;
  int64_t messages_sent_ = 0;
  int64_t bytes_sent_ = 0;
  int64_t half_bytes_sent_ = 0;
  int64_t bytes_all_reduced_ = 0;
  int64_t bf16_bytes_all_reduced_ = 0;
};

class FakeWork final : public CommWork {
 public:
  FakeWork(std::shared_ptr<FakeNetwork> net, int rank, std::shared_ptr<FakeNetwork::Entry> entry)
      : net_(std::move(net)), rank_(rank), entry_(std::move(entry)) {}
  Status Wait(std::chrono::milliseconds timeout) override {
    return net_->Wait(rank_, *entry_, out_, timeout);
  }
  void set_out(torch::Tensor out) { out_ = std::move(out); }

 private:
  std::shared_ptr<FakeNetwork> net_;
  int rank_;
  std::shared_ptr<FakeNetwork::Entry> entry_;
  torch::Tensor out_;  // all-reduce: the caller's tensor
};

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeNetwork> net, int rank, std::chrono::milliseconds timeout)
      : net_(std::move(net)), rank_(rank), timeout_(timeout) {
    std::lock_guard<std::mutex> lock(net_->mu_);
    net_->joined_.insert(rank_);
  }
  ~FakeCommunicator() override { net_->Leave(rank_); }

  int rank() const override { return rank_; }
  int world_size() const override { return net_->world_size(); }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  Status CreateGroups(const std::vector<RankGroup>& groups) override {
    for (const auto& group : groups) created_.insert(group);
    return Status::Ok();
  }
  StatusOr<std::unique_ptr<CommWork>> Exchange(std::vector<P2POp> ops) override {
    RETURN_IF_ERROR(CheckP2POps(ops, rank_, world_size()));
    if (ops.empty()) return std::unique_ptr<CommWork>(new DoneWork());
    std::lock_guard<std::mutex> lock(net_->mu_);
    auto entry = net_->PostGroup(rank_, ops);
    net_->Advance();
    net_->cv_.notify_all();
    return std::unique_ptr<CommWork>(new FakeWork(net_, rank_, std::move(entry)));
  }
  StatusOr<std::unique_ptr<CommWork>> AllReduceSum(torch::Tensor tensor,
                                                   const RankGroup& group) override {
    if (static_cast<int>(group.size()) != world_size() && !created_.count(group)) {
      return FailedPreconditionError("fake all-reduce on a group CreateGroups did not create");
    }
    int64_t seq = sequence_[group]++;
    std::lock_guard<std::mutex> lock(net_->mu_);
    ASSIGN_OR_RETURN(auto entry, net_->PostAllReduce(rank_, tensor, group, seq));
    net_->Advance();
    net_->cv_.notify_all();
    auto work = std::make_unique<FakeWork>(net_, rank_, std::move(entry));
    work->set_out(std::move(tensor));
    return std::unique_ptr<CommWork>(std::move(work));
  }

 private:
  std::shared_ptr<FakeNetwork> net_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::set<RankGroup> created_;
  std::map<RankGroup, int64_t> sequence_;
};

inline std::unique_ptr<Communicator> FakeNetwork::Join(int rank,
                                                       std::chrono::milliseconds timeout) {
  return std::make_unique<FakeCommunicator>(shared_from_this(), rank, timeout);
}

}  // namespace deepool::worker::testing
