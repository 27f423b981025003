// Benchmark (b): re-split throughput between two processes. The executor's path (slice the
// sample range, Communicator::Send/Recv over the Gloo communicator, assemble the input) moves a
// batch from layout {0} to layout {1} and back (forward re-split and its backward mirror); the
// baseline moves the same bytes with raw c10d ProcessGroupGloo send/recv. The two alternate
// round trip by round trip (each goes first in every other pair), so load on a shared machine
// hits both alike; every round trip is timed and the medians over all trials are compared.
// Prints MB/s of each (from the median round trip) and the ratio deepool / raw.
//   build-*/bin/deepool-bench-resplit_throughput [round_trips] [trials]
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <tuple>
#include <vector>

#include "bench/bench_util.h"
#include "common/forked_ranks.h"
#include "worker/runtime/communication/communicator_gloo.h"
#include "worker/runtime/layers/resplit.h"

namespace dw = deepool::worker;
using Ms = std::chrono::duration<double, std::milli>;

namespace {

using deepool::bench::Median;

void Die(const deepool::Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
  std::exit(1);
}

deepool::planner::LayerPlacement Layout(int device, int64_t batch) {
  deepool::planner::LayerPlacement placement;
  placement.layer = "x";
  placement.devices = {device};
  placement.samples = {batch};
  return placement;
}

// Moves `held` (this rank's rows under `from`) to the `to` layout the way the executor does;
// returns this rank's rows under `to` (undefined when it holds none).
torch::Tensor Resplit(dw::Communicator& comm, const torch::Tensor& held,
                      const deepool::planner::LayerPlacement& from,
                      const deepool::planner::LayerPlacement& to, const std::vector<int64_t>& row,
                      int tag, std::map<std::tuple<int, int, int64_t>, torch::Tensor>& buffers) {
  int rank = comm.rank();
  auto [held_first, held_last] = from.SampleRange(rank);
  std::vector<std::unique_ptr<dw::CommWork>> works;
  std::vector<torch::Tensor> parts;
  for (const auto& piece : dw::ResplitPieces(from, to)) {
    if (piece.src == rank && piece.dst != rank) {
      auto send = comm.Send(held.narrow(0, piece.first - held_first, piece.size()).contiguous(),
                            piece.dst, tag);
      if (!send.ok()) Die(send.status());
      works.push_back(std::move(send).value());
    } else if (piece.dst == rank && piece.src != rank) {
      std::vector<int64_t> sizes{piece.size()};
      sizes.insert(sizes.end(), row.begin(), row.end());
      // Like the executor: one receive buffer per (tag, peer, first sample), reused.
      torch::Tensor& buffer = buffers[{tag, piece.src, piece.first}];
      if (!buffer.defined()) buffer = torch::empty(sizes);
      auto recv = comm.Recv(buffer, piece.src, tag);
      if (!recv.ok()) Die(recv.status());
      works.push_back(std::move(recv).value());
      parts.push_back(buffer);
    } else if (piece.src == rank) {
      parts.push_back(held.narrow(0, piece.first - held_first, piece.size()));
    }
  }
  for (auto& work : works) {
    auto status = work->Wait(comm.timeout());
    if (!status.ok()) Die(status);
  }
  if (parts.empty()) return {};
  return parts.size() == 1 ? parts[0] : torch::cat(parts);
}

// Appends the ms of each timed round trip of each side to deepool_ms and raw_ms.
void Measure(int rank, dw::Communicator& comm, c10d::ProcessGroupGloo& raw, int64_t batch,
             const std::vector<int64_t>& row, int round_trips, std::vector<double>& deepool_ms,
             std::vector<double>& raw_ms) {
  std::vector<int64_t> sizes{batch};
  sizes.insert(sizes.end(), row.begin(), row.end());
  auto on0 = Layout(0, batch), on1 = Layout(1, batch);
  torch::Tensor data = rank == 0 ? torch::randn(sizes) : torch::Tensor();
  std::map<std::tuple<int, int, int64_t>, torch::Tensor> buffers;
  auto deepool_round = [&](int tag) {
    torch::Tensor moved = Resplit(comm, data, on0, on1, row, tag, buffers);
    torch::Tensor back = Resplit(comm, moved, on1, on0, row, tag + 1, buffers);
    if (rank == 0) data = back;  // sent (and waited for) before the next receive into it
  };
  std::vector<torch::Tensor> buffer{torch::empty(sizes)};
  if (rank == 0) buffer[0].copy_(torch::randn(sizes));
  auto raw_round = [&](int tag) {
    if (rank == 0) {
      raw.send(buffer, 1, tag)->wait();
      raw.recv(buffer, 1, tag + 1)->wait();
    } else {
      raw.recv(buffer, 0, tag)->wait();
      raw.send(buffer, 0, tag + 1)->wait();
    }
  };
  auto timed = [](auto&& round, std::vector<double>& ms) {
    auto begin = std::chrono::steady_clock::now();
    round(2);
    ms.push_back(Ms(std::chrono::steady_clock::now() - begin).count());
  };
  // Warm-up: connections, receive buffers and the allocator's pages for both sides.
  for (int i = 0; i < 2; ++i) {
    deepool_round(0);
    raw_round(0);
  }
  for (int i = 0; i < round_trips; ++i) {
    if (i % 2 == 0) {
      timed(deepool_round, deepool_ms);
      timed(raw_round, raw_ms);
    } else {
      timed(raw_round, raw_ms);
      timed(deepool_round, deepool_ms);
    }
  }
}

int RunRank(int rank, const deepool::PortPipe& ports, int round_trips, int trials) {
  dw::CommOptions options;
  options.rank = rank;
  options.world_size = 2;
  // Rank 0 hands rank 1 each store's port through the pipe as soon as that store listens.
  if (rank == 1) {
    deepool::StatusOr<int> port = ports.Await();
    if (!port.ok()) Die(port.status());
    options.store_port = *port;
  }
  auto comm = dw::ConnectGloo(options, [&](int port) {
    if (!ports.Publish(port, 1).ok()) std::exit(1);
  });
  if (!comm.ok()) Die(comm.status());
  c10d::TCPStoreOptions store_options;
  store_options.isServer = rank == 0;
  store_options.port = 0;
  if (rank == 1) {
    deepool::StatusOr<int> port = ports.Await();
    if (!port.ok()) Die(port.status());
    store_options.port = static_cast<uint16_t>(*port);
  }
  store_options.numWorkers = 2;
  store_options.waitWorkers = false;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  if (rank == 0 && !ports.Publish(store->getPort(), 1).ok()) return 1;
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto raw = c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("raw", store), rank, 2, gloo_options);

  struct Case {
    int64_t batch;
    std::vector<int64_t> row;
  };
  if (rank == 0) {
    std::printf(
        "| activation [batch, C, H, W] | MB moved per round trip | raw Gloo MB/s | "
        "deepool re-split MB/s | ratio |\n|---|---|---|---|---|\n");
  }
  for (const Case& c : {Case{32, {16, 16, 16}}, Case{32, {64, 32, 32}}, Case{64, {64, 56, 56}}}) {
    std::vector<double> deepool_ms, raw_ms;
    for (int t = 0; t < trials; ++t) {
      Measure(rank, **comm, *raw, c.batch, c.row, round_trips, deepool_ms, raw_ms);
    }
    double mb = 2.0 * 4 * c.batch * c.row[0] * c.row[1] * c.row[2] / 1e6;
    double d = mb / (Median(deepool_ms) / 1e3);
    double r = mb / (Median(raw_ms) / 1e3);
    if (rank == 0) {
      std::printf("| [%lld, %lld, %lld, %lld] | %.1f | %.0f | %.0f | %.3f |\n",
                  static_cast<long long>(c.batch), static_cast<long long>(c.row[0]),
                  static_cast<long long>(c.row[1]), static_cast<long long>(c.row[2]), mb, r, d,
                  d / r);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int round_trips = 20;
  int trials = 3;
  CLI::App app{
      "Re-split throughput between two processes: the executor's path (slice, send and "
      "receive over Gloo, assemble) vs raw c10d ProcessGroupGloo send/recv; MB/s"};
  app.add_option("round_trips", round_trips, "round trips per trial")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("trials", trials, "trials")->capture_default_str()->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);
  deepool::StatusOr<deepool::PortPipe> ports = deepool::PortPipe::Create();
  if (!ports.ok()) Die(ports.status());
  // Fork before any thread exists; the two ranks meet through stores on free ports.
  const deepool::StatusOr<std::vector<int>> codes =
      deepool::ForkRanks(2, [&](int rank) { return RunRank(rank, *ports, round_trips, trials); });
  if (!codes.ok()) Die(codes.status());
  for (int code : *codes) {
    if (code != 0) return code < 0 ? 1 : code;
  }
  return 0;
}
