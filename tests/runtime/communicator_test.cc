// The Gloo communicator with ranks as threads on loopback: point-to-point (single ops and
// groups), all-reduce on groups of members only, and timeouts instead of hangs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <future>
#include <thread>

#include "worker/runtime/communication/communicator_gloo.h"
#include "worker/runtime/communication/communicator_nccl.h"

namespace deepool::worker {
namespace {

using std::chrono::milliseconds;

// Connects `world` ranks on threads, runs body(rank, comm) on each, returns their statuses.
std::vector<Status> RunWorld(int world, milliseconds timeout,
                             const std::function<Status(int, Communicator&)>& body) {
  std::promise<int> port;
  std::shared_future<int> port_future = port.get_future().share();
  std::vector<Status> results(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      CommOptions options;
      options.rank = rank;
      options.world_size = world;
      options.timeout = timeout;
      StatusOr<std::unique_ptr<Communicator>> comm = UnavailableError("not connected");
      if (rank == 0) {
        bool port_sent = false;
        comm = ConnectGloo(options, [&](int p) {
          port.set_value(p);
          port_sent = true;
        });
        if (!port_sent) port.set_value(-1);  // do not leave the other ranks waiting
      } else {
        options.store_port = port_future.get();
        if (options.store_port < 0) {
          results[static_cast<size_t>(rank)] = UnavailableError("rank 0 hosted no store");
          return;
        }
        comm = ConnectGloo(options);
      }
      results[static_cast<size_t>(rank)] = comm.ok() ? body(rank, **comm) : comm.status();
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

TEST_CASE("gloo send/recv and group all-reduce between thread ranks", "[communicator][gloo]") {
  auto results = RunWorld(3, milliseconds(20000), [](int rank, Communicator& comm) -> Status {
    RETURN_IF_ERROR(comm.CreateGroups({{0, 2}, {0, 1, 2}, {1, 2}}));
    // Ring: rank r sends [r, r+1] to r+1 and receives from r-1.
    auto out = torch::tensor({float(rank), float(rank + 1)});
    auto in = torch::zeros({2});
    ASSIGN_OR_RETURN(auto send, comm.Send(out, (rank + 1) % 3, 5));
    ASSIGN_OR_RETURN(auto recv, comm.Recv(in, (rank + 2) % 3, 5));
    RETURN_IF_ERROR(recv->Wait(comm.timeout()));
    RETURN_IF_ERROR(send->Wait(comm.timeout()));
    float from = float((rank + 2) % 3);
    if (!torch::equal(in, torch::tensor({from, from + 1}))) return InternalError("bad recv");
    if (rank != 1) {
      auto value = torch::full({3}, float(rank + 1));
      ASSIGN_OR_RETURN(auto reduce, comm.AllReduceSum(value, {0, 2}));
      RETURN_IF_ERROR(reduce->Wait(comm.timeout()));
      if (!torch::equal(value, torch::full({3}, 4.0f))) return InternalError("bad group sum");
    }
    auto all = torch::ones({2}, torch::kFloat64);
    ASSIGN_OR_RETURN(auto reduce, comm.AllReduceSum(all, {0, 1, 2}));
    RETURN_IF_ERROR(reduce->Wait(comm.timeout()));
    if (all[0].item<double>() != 3.0) return InternalError("bad world sum");
    return Status::Ok();
  });
  for (const auto& status : results) {
    INFO(status.ToString());
    REQUIRE(status.ok());
  }
}

TEST_CASE("gloo exchange: one group sends and receives both ways, several per pair",
          "[communicator][gloo]") {
  auto results = RunWorld(2, milliseconds(20000), [](int rank, Communicator& comm) -> Status {
    int peer = 1 - rank;
    auto first = torch::zeros({3}), second = torch::zeros({2}, torch::kFloat64);
    std::vector<P2POp> ops{P2POp::Send(torch::full({3}, float(rank + 1)), peer, 1),
                           P2POp::Send(torch::full({2}, rank + 10.0, torch::kFloat64), peer, 2),
                           P2POp::Recv(first, peer, 1), P2POp::Recv(second, peer, 2)};
    if (rank == 1) std::reverse(ops.begin(), ops.end());  // Gloo pairs by tag
    ASSIGN_OR_RETURN(auto group, comm.Exchange(std::move(ops)));
    RETURN_IF_ERROR(group->WaitHost(comm.timeout()));
    if (!torch::equal(first, torch::full({3}, float(peer + 1)))) return InternalError("first");
    if (!torch::equal(second, torch::full({2}, peer + 10.0, torch::kFloat64)))
      return InternalError("second");
    ASSIGN_OR_RETURN(auto empty, comm.Exchange({}));
    return empty->Wait(comm.timeout());
  });
  for (const auto& status : results) {
    INFO(status.ToString());
    REQUIRE(status.ok());
  }
}

TEST_CASE("exchange refuses itself or a rank outside the world as a peer", "[communicator][gloo]") {
  auto results = RunWorld(2, milliseconds(10000), [](int rank, Communicator& comm) -> Status {
    for (int peer : {rank, -1, 2}) {
      auto posted = comm.Exchange({P2POp::Send(torch::ones({1}), peer, 0)});
      if (posted.status().code() != StatusCode::kInvalidArgument) {
        return InternalError("peer " + std::to_string(peer) + ": " + posted.status().ToString());
      }
    }
    auto strided = torch::ones({4, 4}).t();
    auto posted = comm.Exchange({P2POp::Recv(strided, 1 - rank, 0)});
    if (posted.status().code() != StatusCode::kInvalidArgument) {
      return InternalError("a non-contiguous buffer was accepted");
    }
    return Status::Ok();
  });
  for (const auto& status : results) {
    INFO(status.ToString());
    REQUIRE(status.ok());
  }
}

TEST_CASE("gloo recv from a peer that never sends times out", "[communicator][gloo]") {
  // Rank 1 stays connected but silent until rank 0 has given up.
  std::promise<void> gave_up;
  std::shared_future<void> gave_up_future = gave_up.get_future().share();
  auto results = RunWorld(2, milliseconds(500), [&](int rank, Communicator& comm) -> Status {
    if (rank == 1) {
      gave_up_future.wait();
      return Status::Ok();
    }
    auto in = torch::zeros({4});
    ASSIGN_OR_RETURN(auto recv, comm.Recv(in, 1, 9));
    Status status = recv->Wait(milliseconds(500));
    gave_up.set_value();
    return status;
  });
  INFO(results[0].ToString());
  REQUIRE(results[0].code() == StatusCode::kDeadlineExceeded);
}

TEST_CASE("gloo recv from a peer that exits fails at once", "[communicator][gloo]") {
  auto results = RunWorld(2, milliseconds(20000), [](int rank, Communicator& comm) -> Status {
    if (rank == 1) return Status::Ok();  // closes its connections
    auto in = torch::zeros({4});
    ASSIGN_OR_RETURN(auto recv, comm.Recv(in, 1, 9));
    return recv->Wait(comm.timeout());
  });
  INFO(results[0].ToString());
  REQUIRE(results[0].code() == StatusCode::kUnavailable);
}

TEST_CASE("all-reduce on a group that was not created is refused", "[communicator][gloo]") {
  auto results = RunWorld(2, milliseconds(10000), [](int, Communicator& comm) -> Status {
    auto value = torch::ones({1});
    return comm.AllReduceSum(value, {1}).status();
  });
  REQUIRE(results[0].code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("a non-zero rank without the store port is refused", "[communicator]") {
  CommOptions options;
  options.rank = 1;
  options.world_size = 2;
  REQUIRE(ConnectGloo(options).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("the NCCL library loaded is the version torch was built with", "[communicator][nccl]") {
  if (!NcclAvailable()) return;  // a build without CUDA has no NCCL
  Status loaded = CheckLoadedNccl();
  INFO(loaded.ToString());
  REQUIRE(loaded.ok());
}

}  // namespace
}  // namespace deepool::worker
