// A flood of idle TCP connections against a real coordinator whose open-file limit is low (issue
// 47: 2,100 connections against a limit of 2,048 left the gRPC port deaf until a restart). Here
// the limit is 1,024 and each flood holds 1,100 connections that never say a word: first from one
// address, then from eleven. A fresh client (the CLI, from another address) must be served while
// one peer floods, and again once the flood from many peers has been cut off; the connection the
// harness opened before the floods must keep working throughout.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/e2e/local_cluster.h"

using namespace deepool;
using namespace deepool::e2e;

namespace {

constexpr int kCoordinatorOpenFiles = 1024;

// Idle connections to 127.0.0.1:port, `per_source` from each of 127.0.0.2, 127.0.0.3, ...
// (the whole of 127/8 is this host's loopback); closed when it goes.
class Flood {
 public:
  Flood(int port, int count, int per_source) {
    for (int i = 0; i < count; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      REQUIRE(fd >= 0);
      timeval timeout{2, 0};  // a connect the backlog cannot take fails instead of hanging
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
      sockaddr_in from{};
      from.sin_family = AF_INET;
      from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + i / per_source);
      REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) == 0);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(static_cast<uint16_t>(port));
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) {
        fds_.push_back(fd);
      } else {
        close(fd);
      }
    }
  }
  ~Flood() {
    for (int fd : fds_) close(fd);
  }
  size_t connected() const { return fds_.size(); }

 private:
  std::vector<int> fds_;
};

int OpenFds(pid_t pid) {
  std::error_code ec;
  int count = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++count;
  }
  return count;
}

// The most descriptors the process holds over `span`, sampled every 20 ms: the coordinator takes
// the flood's connections off its backlog while the test looks.
int PeakFds(pid_t pid, std::chrono::milliseconds span) {
  int peak = 0;
  const auto end = std::chrono::steady_clock::now() + span;
  while (std::chrono::steady_clock::now() < end) {
    peak = std::max(peak, OpenFds(pid));
    std::this_thread::sleep_for(20ms);
  }
  return peak;
}

// The test holds a flood's 1,100 sockets at once: its own soft limit goes up toward the hard one.
bool RaiseOwnOpenFiles(rlim_t wanted) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  if (limit.rlim_cur >= wanted) return true;
  if (limit.rlim_max < wanted) return false;
  limit.rlim_cur = wanted;
  return setrlimit(RLIMIT_NOFILE, &limit) == 0;
}

}  // namespace

TEST_CASE("a flood of idle connections past the open-file limit leaves the port answering",
          "[e2e][security]") {
  if (!RaiseOwnOpenFiles(4096)) {
    WARN("skipped: needs an open-file limit of 4096 for the test's own sockets");
    return;
  }
  ClusterOptions options;
  options.workers = 0;
  options.coordinator_open_files = kCoordinatorOpenFiles;
  LocalCluster cluster(options);
  const int port = std::stoi(cluster.address().substr(cluster.address().rfind(':') + 1));
  // A fresh process, so a fresh connection: what a new worker or user would open.
  auto fresh_client_served = [&] {
    std::string out, err;
    return cluster.RunCli({"nodes"}, &out, &err) == 0;
  };
  auto old_connection_served = [&] {
    v1::ListNodesResponse response;
    auto context = cli::UnaryContext(10s);
    return cluster.stub().ListNodes(context.get(), v1::ListNodesRequest(), &response).ok();
  };
  REQUIRE(fresh_client_served());
  REQUIRE(old_connection_served());

  {
    Flood one_peer(port, 1100, 1100);
    INFO("connected from one peer: " << one_peer.connected());
    CHECK(fresh_client_served());
    CHECK(old_connection_served());
    const int fds = PeakFds(cluster.coordinator_pid(), 2s);
    WARN("coordinator descriptors while one peer floods: " << fds);
    CHECK(fds < kCoordinatorOpenFiles);
  }
  {
    Flood many_peers(port, 1100, 100);
    const auto connected = std::chrono::steady_clock::now();
    INFO("connected from eleven peers: " << many_peers.connected());
    const int fds = PeakFds(cluster.coordinator_pid(), 2s);
    WARN("coordinator descriptors while eleven peers flood: " << fds);
    CHECK(old_connection_served());
    CHECK(fds < kCoordinatorOpenFiles);
    // The flood holds its connections open: a fresh client gets in once the coordinator has cut
    // off those that never spoke.
    const bool served = PollUntil(fresh_client_served, 60s);
    CHECK(served);
    if (served) {
      WARN("a fresh client was served during the flood from many peers "
           << std::chrono::duration<double>(std::chrono::steady_clock::now() - connected).count()
           << " s after it connected");
    }
  }
  CHECK(PollUntil(fresh_client_served, 60s));
  CHECK(old_connection_served());
}
