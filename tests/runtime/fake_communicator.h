// FakeCommunicator: an in-process network of ranks (threads) for executor unit tests, with
// failure injection. Sends are copied into mailboxes; Recv and AllReduceSum wait on a condition
// variable with the caller's timeout; a rank marked failed makes every operation that needs it
// fail with UNAVAILABLE.
// Threading: FakeNetwork is shared by the rank threads and guarded by one mutex; each
// FakeCommunicator is used by its own rank's thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

#include "worker/runtime/communicator.h"

namespace deepool::worker::testing {

class FakeNetwork : public std::enable_shared_from_this<FakeNetwork> {
 public:
  explicit FakeNetwork(int world_size) : world_size_(world_size) {}

  std::unique_ptr<Communicator> Join(int rank, std::chrono::milliseconds timeout);

  // Marks a rank dead: its peers' pending and later operations with it fail.
  void Fail(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    failed_.insert(rank);
    cv_.notify_all();
  }
  int world_size() const { return world_size_; }
  int64_t messages_sent() const {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_sent_;
  }

 private:
  friend class FakeCommunicator;
  friend class FakeRecvWork;
  friend class FakeReduceWork;
  using MailboxKey = std::tuple<int, int, int>;  // src, dst, tag
  struct Collective {
    std::map<int, torch::Tensor> contributions;  // by rank
    torch::Tensor sum;
  };

  bool AnyFailed(const RankGroup& ranks) const {
    for (int r : ranks) {
      if (failed_.count(r)) return true;
    }
    return false;
  }

  const int world_size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<MailboxKey, std::deque<torch::Tensor>> mailboxes_;
  std::map<std::pair<RankGroup, int64_t>, Collective> collectives_;
  std::set<int> failed_;
  int64_t messages_sent_ = 0;
};

class FakeRecvWork final : public CommWork {
 public:
  FakeRecvWork(std::shared_ptr<FakeNetwork> net, FakeNetwork::MailboxKey key, torch::Tensor out)
      : net_(std::move(net)), key_(key), out_(std::move(out)) {}
  Status Wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(net_->mu_);
    auto& box = net_->mailboxes_[key_];
    int src = std::get<0>(key_);
    bool ready = net_->cv_.wait_for(lock, timeout,
                                    [&] { return !box.empty() || net_->failed_.count(src) > 0; });
    if (!ready)
      return DeadlineExceededError("fake recv from " + std::to_string(src) + " timed out");
    if (box.empty()) return UnavailableError("fake recv: rank " + std::to_string(src) + " failed");
    out_.copy_(box.front());
    box.pop_front();
    return Status::Ok();
  }

 private:
  std::shared_ptr<FakeNetwork> net_;
  FakeNetwork::MailboxKey key_;
  torch::Tensor out_;
};

class FakeReduceWork final : public CommWork {
 public:
  FakeReduceWork(std::shared_ptr<FakeNetwork> net, std::pair<RankGroup, int64_t> key,
                 torch::Tensor out)
      : net_(std::move(net)), key_(std::move(key)), out_(std::move(out)) {}
  Status Wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(net_->mu_);
    auto& collective = net_->collectives_[key_];
    const RankGroup& group = key_.first;
    bool ready = net_->cv_.wait_for(lock, timeout, [&] {
      return collective.contributions.size() == group.size() || net_->AnyFailed(group);
    });
    if (!ready) return DeadlineExceededError("fake all-reduce timed out");
    if (collective.contributions.size() != group.size()) {
      return UnavailableError("fake all-reduce: a member failed");
    }
    if (!collective.sum.defined()) {
      // Sum in rank order, as a deterministic reduction would.
      for (auto& [rank, tensor] : collective.contributions) {
        collective.sum = collective.sum.defined() ? collective.sum + tensor : tensor.clone();
      }
    }
    out_.copy_(collective.sum);
    return Status::Ok();
  }

 private:
  std::shared_ptr<FakeNetwork> net_;
  std::pair<RankGroup, int64_t> key_;
  torch::Tensor out_;
};

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeNetwork> net, int rank, std::chrono::milliseconds timeout)
      : net_(std::move(net)), rank_(rank), timeout_(timeout) {}
  int rank() const override { return rank_; }
  int world_size() const override { return net_->world_size(); }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  Status CreateGroups(const std::vector<RankGroup>& groups) override {
    for (const auto& group : groups) created_.insert(group);
    return Status::Ok();
  }
  StatusOr<std::unique_ptr<CommWork>> Send(const torch::Tensor& tensor, int dst, int tag) override {
    std::lock_guard<std::mutex> lock(net_->mu_);
    if (net_->failed_.count(dst)) {
      return std::unique_ptr<CommWork>(
          new DoneWork(UnavailableError("fake send: rank " + std::to_string(dst) + " failed")));
    }
    net_->mailboxes_[{rank_, dst, tag}].push_back(tensor.detach().clone());
    ++net_->messages_sent_;
    net_->cv_.notify_all();
    return std::unique_ptr<CommWork>(new DoneWork());
  }
  StatusOr<std::unique_ptr<CommWork>> Recv(torch::Tensor tensor, int src, int tag) override {
    return std::unique_ptr<CommWork>(new FakeRecvWork(net_, {src, rank_, tag}, tensor));
  }
  StatusOr<std::unique_ptr<CommWork>> AllReduceSum(torch::Tensor tensor,
                                                   const RankGroup& group) override {
    if (static_cast<int>(group.size()) != world_size() && !created_.count(group)) {
      return FailedPreconditionError("fake all-reduce on a group CreateGroups did not create");
    }
    int64_t seq = sequence_[group]++;
    std::pair<RankGroup, int64_t> key{group, seq};
    {
      std::lock_guard<std::mutex> lock(net_->mu_);
      net_->collectives_[key].contributions[rank_] = tensor.detach().clone();
      net_->cv_.notify_all();
    }
    return std::unique_ptr<CommWork>(new FakeReduceWork(net_, key, tensor));
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
