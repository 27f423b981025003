// The fake network's NCCL mode keeps NCCL's matching rules (tests/runtime/fake_communicator.h):
// tags ignored and first-in first-out per pair, one stream per rank, rendezvous sends, errors for
// mismatched ops and collective orders, and deadlocks reported at once. The tagged mode keeps
// Gloo's (buffered sends, pairing by tag).
#include "tests/runtime/fake_communicator.h"

#include <catch2/catch.hpp>
#include <functional>
#include <thread>

namespace deepool::worker::testing {
namespace {

using std::chrono::milliseconds;

// Runs body(rank, comm) for every rank on its own thread and returns their statuses.
std::vector<Status> RunWorld(const std::shared_ptr<FakeNetwork>& net, milliseconds timeout,
                             const std::function<Status(int, Communicator&)>& body) {
  std::vector<Status> results(static_cast<size_t>(net->world_size()));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < net->world_size(); ++rank) {
    threads.emplace_back([&, rank] {
      auto comm = net->Join(rank, timeout);
      results[static_cast<size_t>(rank)] = body(rank, *comm);
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

void RequireAllOk(const std::vector<Status>& results) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    INFO("rank " << rank << ": " << results[rank].ToString());
    REQUIRE(results[rank].ok());
  }
}

Status Expect(bool condition, const std::string& what) {
  return condition ? Status::Ok() : InternalError(what);
}

TEST_CASE("fake nccl matches first-in first-out per pair and ignores tags", "[communicator]") {
  auto net = std::make_shared<FakeNetwork>(2, FakeSemantics::kNccl);
  auto results = RunWorld(net, milliseconds(10000), [](int rank, Communicator& comm) -> Status {
    if (rank == 0) {
      ASSIGN_OR_RETURN(auto first, comm.Send(torch::full({2}, 1.0f), 1, /*tag=*/1));
      ASSIGN_OR_RETURN(auto second, comm.Send(torch::full({2}, 2.0f), 1, /*tag=*/2));
      RETURN_IF_ERROR(first->Wait(comm.timeout()));
      return second->Wait(comm.timeout());
    }
    // Posted with the tags the other way round: NCCL pairs by order, not by tag.
    auto a = torch::zeros({2}), b = torch::zeros({2});
    ASSIGN_OR_RETURN(auto recv_a, comm.Recv(a, 0, /*tag=*/2));
    ASSIGN_OR_RETURN(auto recv_b, comm.Recv(b, 0, /*tag=*/1));
    RETURN_IF_ERROR(recv_a->Wait(comm.timeout()));
    RETURN_IF_ERROR(recv_b->Wait(comm.timeout()));
    RETURN_IF_ERROR(Expect(torch::equal(a, torch::full({2}, 1.0f)),
                           "first recv got " + std::to_string(a[0].item<float>())));
    return Expect(torch::equal(b, torch::full({2}, 2.0f)), "second recv got the wrong message");
  });
  RequireAllOk(results);
}

TEST_CASE("fake tagged mode pairs by tag and buffers sends", "[communicator]") {
  auto net = std::make_shared<FakeNetwork>(2);
  auto sender = net->Join(0, milliseconds(5000));
  auto receiver = net->Join(1, milliseconds(5000));
  auto first = sender->Send(torch::full({2}, 1.0f), 1, 1);
  auto second = sender->Send(torch::full({2}, 2.0f), 1, 2);
  REQUIRE((*first)->Wait(milliseconds(100)).ok());  // buffered: no receive needed
  auto a = torch::zeros({2});
  auto recv = receiver->Recv(a, 0, 2);
  REQUIRE((*recv)->Wait(milliseconds(5000)).ok());
  REQUIRE(torch::equal(a, torch::full({2}, 2.0f)));
  REQUIRE(net->messages_sent() == 2);
}

TEST_CASE("fake nccl reports a numel or dtype mismatch between matched ops", "[communicator]") {
  auto net = std::make_shared<FakeNetwork>(2, FakeSemantics::kNccl);
  auto results = RunWorld(net, milliseconds(10000), [](int rank, Communicator& comm) -> Status {
    if (rank == 0) {
      ASSIGN_OR_RETURN(auto send, comm.Send(torch::ones({4}), 1, 0));
      ASSIGN_OR_RETURN(auto typed, comm.Send(torch::ones({3}), 1, 0));
      Status first = send->Wait(comm.timeout());
      Status second = typed->Wait(comm.timeout());
      return first.ok() ? second : first;
    }
    ASSIGN_OR_RETURN(auto recv, comm.Recv(torch::zeros({3}), 0, 0));
    ASSIGN_OR_RETURN(auto typed, comm.Recv(torch::zeros({3}, torch::kFloat64), 0, 0));
    Status first = recv->Wait(comm.timeout());
    Status second = typed->Wait(comm.timeout());
    RETURN_IF_ERROR(Expect(second.code() == StatusCode::kInvalidArgument, second.ToString()));
    return first;
  });
  for (const Status& status : results) {
    INFO(status.ToString());
    REQUIRE(status.code() == StatusCode::kInvalidArgument);
    REQUIRE_THAT(status.message(), Catch::Contains("was matched with"));
  }
}

TEST_CASE("fake nccl reports two ranks that both send first as a deadlock at once",
          "[communicator]") {
  auto net = std::make_shared<FakeNetwork>(2, FakeSemantics::kNccl);
  auto start = std::chrono::steady_clock::now();
  auto results = RunWorld(net, milliseconds(30000), [](int rank, Communicator& comm) -> Status {
    int peer = 1 - rank;
    ASSIGN_OR_RETURN(auto send, comm.Send(torch::ones({8}), peer, 0));
    RETURN_IF_ERROR(send->Wait(comm.timeout()));  // each send waits for the other's receive
    ASSIGN_OR_RETURN(auto recv, comm.Recv(torch::zeros({8}), peer, 0));
    return recv->Wait(comm.timeout());
  });
  auto elapsed = std::chrono::steady_clock::now() - start;
  REQUIRE(elapsed < std::chrono::seconds(10));
  for (const Status& status : results) {
    INFO(status.ToString());
    REQUIRE(status.code() == StatusCode::kAborted);
    REQUIRE_THAT(status.message(), Catch::Contains("deadlock"));
  }
}

TEST_CASE("fake nccl: a group that sends and receives both ways completes", "[communicator]") {
  auto net = std::make_shared<FakeNetwork>(2, FakeSemantics::kNccl);
  auto results = RunWorld(net, milliseconds(10000), [](int rank, Communicator& comm) -> Status {
    int peer = 1 - rank;
    auto in = torch::zeros({3});
    std::vector<P2POp> ops{P2POp::Send(torch::full({3}, float(rank + 1)), peer, 7),
                           P2POp::Recv(in, peer, 7)};
    if (rank == 1) std::swap(ops[0], ops[1]);  // the order inside a group does not matter
    ASSIGN_OR_RETURN(auto group, comm.Exchange(std::move(ops)));
    RETURN_IF_ERROR(group->Wait(comm.timeout()));
    return Expect(torch::equal(in, torch::full({3}, float(peer + 1))), "wrong data");
  });
  RequireAllOk(results);
}

TEST_CASE("fake nccl runs a rank's groups in order, each after the previous completed",
          "[communicator]") {
  auto net = std::make_shared<FakeNetwork>(3, FakeSemantics::kNccl);
  auto r0 = net->Join(0, milliseconds(5000));
  auto r1 = net->Join(1, milliseconds(5000));
  auto r2 = net->Join(2, milliseconds(5000));
  // Rank 0's receive from 2 sits behind its send to 1, which waits for rank 1's receive.
  auto to1 = r0->Send(torch::ones({2}), 1, 0);
  auto from2 = r0->Recv(torch::zeros({2}), 2, 0);
  auto send2 = r2->Send(torch::full({2}, 5.0f), 0, 0);
  REQUIRE((*send2)->Wait(milliseconds(100)).code() == StatusCode::kDeadlineExceeded);
  auto recv1 = r1->Recv(torch::zeros({2}), 0, 0);
  REQUIRE((*send2)->Wait(milliseconds(5000)).ok());
  REQUIRE((*from2)->Wait(milliseconds(5000)).ok());
  REQUIRE((*to1)->Wait(milliseconds(5000)).ok());
  REQUIRE((*recv1)->Wait(milliseconds(5000)).ok());
}

TEST_CASE("fake nccl all-reduces sum, and collectives issued out of order are an error",
          "[communicator]") {
  auto net = std::make_shared<FakeNetwork>(3, FakeSemantics::kNccl);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int rank = 0; rank < 3; ++rank) {
    comms.push_back(net->Join(rank, milliseconds(5000)));
    REQUIRE(comms.back()->CreateGroups({{0, 1}, {0, 1, 2}}).ok());
  }
  std::vector<torch::Tensor> values;
  std::vector<std::unique_ptr<CommWork>> works;
  for (int rank = 0; rank < 3; ++rank) {
    values.push_back(torch::full({2}, float(rank + 1)));
    auto work = comms[static_cast<size_t>(rank)]->AllReduceSum(values.back(), {0, 1, 2});
    REQUIRE(work.ok());
    works.push_back(std::move(work).value());
  }
  for (size_t rank = 0; rank < 3; ++rank) {
    REQUIRE(works[rank]->Wait(milliseconds(5000)).ok());
    REQUIRE(torch::equal(values[rank], torch::full({2}, 6.0f)));
  }
  // Rank 0 issues {0,1} then the world; rank 1 the world first.
  REQUIRE(comms[0]->AllReduceSum(torch::ones({1}), {0, 1}).ok());
  REQUIRE(comms[0]->AllReduceSum(torch::ones({1}), {0, 1, 2}).ok());
  auto out_of_order = comms[1]->AllReduceSum(torch::ones({1}), {0, 1, 2});
  INFO(out_of_order.status().ToString());
  REQUIRE(out_of_order.status().code() == StatusCode::kFailedPrecondition);
  REQUIRE_THAT(out_of_order.status().message(), Catch::Contains("order mismatch"));
}

TEST_CASE("fake nccl: a failed rank makes its peers' transfers and sums fail", "[communicator]") {
  auto net = std::make_shared<FakeNetwork>(2, FakeSemantics::kNccl);
  auto r0 = net->Join(0, milliseconds(5000));
  auto recv = r0->Recv(torch::zeros({2}), 1, 0);
  net->Fail(1);
  Status status = (*recv)->Wait(milliseconds(5000));
  INFO(status.ToString());
  REQUIRE(status.code() == StatusCode::kUnavailable);
  REQUIRE_THAT(status.message(), Catch::Contains("rank 1 failed"));
  auto sum = r0->AllReduceSum(torch::ones({1}), {0, 1});
  REQUIRE(sum.ok());
  REQUIRE((*sum)->Wait(milliseconds(5000)).code() == StatusCode::kUnavailable);
}

TEST_CASE("fake nccl: a peer that left while this rank waits is a deadlock, not a timeout",
          "[communicator]") {
  auto net = std::make_shared<FakeNetwork>(2, FakeSemantics::kNccl);
  auto r0 = net->Join(0, milliseconds(30000));
  { auto r1 = net->Join(1, milliseconds(30000)); }  // joins and leaves without sending
  auto recv = r0->Recv(torch::zeros({2}), 1, 0);
  auto start = std::chrono::steady_clock::now();
  Status status = (*recv)->Wait(milliseconds(30000));
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  INFO(status.ToString());
  REQUIRE(status.code() == StatusCode::kAborted);
}

}  // namespace
}  // namespace deepool::worker::testing
