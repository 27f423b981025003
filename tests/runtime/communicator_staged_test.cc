// The staging communicator (communicator_staged.h) on CPU: with every tensor staged, the inner
// communicator works on separate host buffers, results reach the caller's tensors only by a wait,
// sends are never written, groups and their ops keep the caller's order, and a failed wait copies
// nothing. Ranks over it train small_cnn on a burst plan (re-splits, synchronised batch norm) and
// data parallel over uneven shares to the single-device result, as over the plain fake network.
// The CUDA side (pinned buffers, stream order) needs a GPU: executor_shared_gpu_test.cc.
#include "worker/runtime/communication/communicator_staged.h"

#include <catch2/catch.hpp>

#include "executor_test_util.h"
#include "tests/runtime/fake_communicator.h"

namespace deepool::worker {
namespace {

// What the inner communicator saw of one operation.
struct SeenOp {
  std::string kind;  // "send", "recv", "allreduce"
  int peer = -1;
  int tag = -1;
  torch::Tensor tensor;  // the buffer it was handed
  torch::Tensor value;   // its value at posting
};

// Completes each operation in its Wait: a receive's buffer becomes `kReceived`, an all-reduce's
// is doubled, and a send's buffer is scribbled on (which the caller's tensor must not see).
class RecordingWork final : public CommWork {
 public:
  RecordingWork(std::vector<SeenOp> ops, Status status)
      : ops_(std::move(ops)), status_(std::move(status)) {}
  Status Wait(std::chrono::milliseconds) override {
    if (!status_.ok()) return status_;
    for (SeenOp& op : ops_) {
      if (op.kind == "recv") op.tensor.fill_(kReceived);
      if (op.kind == "allreduce") op.tensor.mul_(2);
      if (op.kind == "send") op.tensor.fill_(-1);
    }
    return status_;
  }
  static constexpr float kReceived = 42;

 private:
  std::vector<SeenOp> ops_;
  Status status_;
};

class RecordingCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 3; }
  std::chrono::milliseconds timeout() const override { return std::chrono::seconds(1); }
  Status CreateGroups(const std::vector<RankGroup>& groups) override {
    groups_created += static_cast<int>(groups.size());
    return Status::Ok();
  }
  StatusOr<std::unique_ptr<CommWork>> Exchange(std::vector<P2POp> ops) override {
    std::vector<SeenOp> group;
    for (const P2POp& op : ops) {
      const bool send = op.kind == P2POp::Kind::kSend;
      group.push_back({send ? "send" : "recv", op.peer, op.tag, op.tensor, op.tensor.clone()});
    }
    groups.push_back(group);
    return std::unique_ptr<CommWork>(new RecordingWork(group, wait_status));
  }
  StatusOr<std::unique_ptr<CommWork>> AllReduceSum(torch::Tensor tensor,
                                                   const RankGroup&) override {
    SeenOp op{"allreduce", -1, -1, tensor, tensor.clone()};
    groups.push_back({op});
    return std::unique_ptr<CommWork>(new RecordingWork({op}, wait_status));
  }

  std::vector<std::vector<SeenOp>> groups;  // in posting order
  int groups_created = 0;
  Status wait_status;
};

StagingOptions StageEverything() {
  StagingOptions options;
  options.stage = [](const torch::Tensor&) { return true; };
  return options;
}

struct Staged {
  RecordingCommunicator* inner;
  std::unique_ptr<Communicator> comm;
};

Staged MakeStaged(StagingOptions options = StageEverything()) {
  auto inner = std::make_unique<RecordingCommunicator>();
  RecordingCommunicator* raw = inner.get();
  return {raw, MakeStagedCommunicator(std::move(inner), std::move(options))};
}

bool SameStorage(const torch::Tensor& a, const torch::Tensor& b) {
  return a.data_ptr() == b.data_ptr();
}

TEST_CASE("staged point-to-point groups keep their order and write back receives only on wait",
          "[communicator][staged]") {
  Staged s = MakeStaged();
  torch::Tensor send1 = torch::arange(4, torch::kFloat);
  torch::Tensor recv2 = torch::zeros({3});
  torch::Tensor send2 = torch::full({2}, 7.0);
  auto first = s.comm->Exchange({P2POp::Send(send1, 1, 5), P2POp::Recv(recv2, 2, 6)});
  REQUIRE(first.ok());
  auto second = s.comm->Send(send2, 2, 9);
  REQUIRE(second.ok());

  REQUIRE(s.inner->groups.size() == 2);
  const auto& group = s.inner->groups[0];
  REQUIRE(group.size() == 2);
  REQUIRE(group[0].kind == "send");
  REQUIRE(group[0].peer == 1);
  REQUIRE(group[0].tag == 5);
  REQUIRE(group[1].kind == "recv");
  REQUIRE(group[1].peer == 2);
  REQUIRE(group[1].tag == 6);
  REQUIRE(s.inner->groups[1][0].peer == 2);
  REQUIRE(s.inner->groups[1][0].tag == 9);
  // Separate host buffers, holding the sends' values at posting.
  REQUIRE_FALSE(SameStorage(group[0].tensor, send1));
  REQUIRE_FALSE(SameStorage(group[1].tensor, recv2));
  REQUIRE(torch::equal(group[0].value, send1));
  REQUIRE(torch::equal(s.inner->groups[1][0].value, send2));
  REQUIRE(group[1].tensor.sizes() == recv2.sizes());

  // Nothing lands before the wait.
  REQUIRE(torch::equal(recv2, torch::zeros({3})));
  REQUIRE((*first)->Wait(std::chrono::seconds(1)).ok());
  REQUIRE(torch::equal(recv2, torch::full({3}, RecordingWork::kReceived)));
  // The inner backend scribbled on its send buffer; the caller's send is unchanged.
  REQUIRE(torch::equal(send1, torch::arange(4, torch::kFloat)));
  REQUIRE((*second)->WaitHost(std::chrono::seconds(1)).ok());
  REQUIRE(torch::equal(send2, torch::full({2}, 7.0)));
}

TEST_CASE("a staged all-reduce sums into the caller's tensor on wait, once",
          "[communicator][staged]") {
  Staged s = MakeStaged();
  torch::Tensor grads = torch::tensor({1.0f, 2.0f, 3.0f});
  auto work = s.comm->AllReduceSum(grads, {0, 1, 2});
  REQUIRE(work.ok());
  REQUIRE_FALSE(SameStorage(s.inner->groups[0][0].tensor, grads));
  REQUIRE(torch::equal(grads, torch::tensor({1.0f, 2.0f, 3.0f})));
  SECTION("Wait") { REQUIRE((*work)->Wait(std::chrono::seconds(1)).ok()); }
  SECTION("WaitHost") { REQUIRE((*work)->WaitHost(std::chrono::seconds(1)).ok()); }
  REQUIRE(torch::equal(grads, torch::tensor({2.0f, 4.0f, 6.0f})));
  // A second wait does not copy again over what the caller did with the result since.
  grads.zero_();
  REQUIRE((*work)->Wait(std::chrono::seconds(1)).ok());
  REQUIRE(torch::equal(grads, torch::zeros({3})));
}

TEST_CASE("a failed staged wait returns the inner error and writes nothing",
          "[communicator][staged]") {
  Staged s = MakeStaged();
  s.inner->wait_status = UnavailableError("peer 2 is gone");
  torch::Tensor received = torch::zeros({2});
  auto work = s.comm->Recv(received, 2, 1);
  REQUIRE(work.ok());
  Status waited = (*work)->Wait(std::chrono::seconds(1));
  REQUIRE(waited.code() == StatusCode::kUnavailable);
  REQUIRE(torch::equal(received, torch::zeros({2})));
}

TEST_CASE("tensors the staging rule leaves out go to the inner communicator as they are",
          "[communicator][staged]") {
  Staged s = MakeStaged(StagingOptions{});  // the default: only tensors not on the CPU
  torch::Tensor grads = torch::ones({2});
  auto work = s.comm->AllReduceSum(grads, {0, 1, 2});
  REQUIRE(work.ok());
  REQUIRE(SameStorage(s.inner->groups[0][0].tensor, grads));
  REQUIRE(s.comm->CreateGroups({{0, 1}, {1, 2}}).ok());
  REQUIRE(s.inner->groups_created == 2);
  REQUIRE(s.comm->Exchange({P2POp::Send(torch::ones({2}), 0, 1)}).status().code() ==
          StatusCode::kInvalidArgument);  // to itself: checked before anything is staged
}

// Ranks over the fake network with NCCL's matching rules, every tensor staged.
testing::CommMaker StagedFakeComms(int world) {
  testing::CommMaker fake = testing::FakeComms(world);
  return [fake](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
    ASSIGN_OR_RETURN(auto inner, fake(rank));
    return MakeStagedCommunicator(std::move(inner), StageEverything());
  };
}

TEST_CASE("ranks over staged communicators train a burst plan to the single-device result",
          "[communicator][staged][executor]") {
  torch::set_num_threads(1);
  auto graph = testing::Zoo("small_cnn");
  // Re-splits between every pair of device sets, batch norm on one rank.
  auto plan = testing::MakePlan(graph, 8, 3, {0, 1, 2}, testing::SmallCnnBurst());
  auto reference = testing::TrainSingleDevice(graph, 8, 4, testing::Sgd(), 5, 6);
  auto runs = testing::RunRanks(graph, plan, 4, testing::Sgd(), 5, 6, StagedFakeComms(3));
  testing::RequireMatchesReference(runs, reference, 1e-5, 1e-6);
}

TEST_CASE("ranks over staged communicators train uneven shares with synchronised batch norm",
          "[communicator][staged][executor]") {
  torch::set_num_threads(1);
  auto graph = testing::Zoo("small_cnn");
  // Batch 8 over 3 ranks: shares 3, 3, 2; batch norm's statistics summed over the ranks.
  auto plan = testing::MakePlan(graph, 8, 3, {0, 1, 2});
  auto reference = testing::TrainSingleDevice(graph, 8, 4, testing::Sgd(), 7, 11);
  testing::RankOptions options;
  options.sync_batch_norm = true;
  auto runs = testing::RunRanks(graph, plan, 4, testing::Sgd(), 7, 11, StagedFakeComms(3), options);
  testing::RequireMatchesReference(runs, reference, 1e-5, 1e-6);
}

}  // namespace
}  // namespace deepool::worker
