// The coordinator's port under floods of idle connections, in-process: the bounds per peer
// address and in total (grpc_listener.h), and an accept that runs out of descriptors, after
// which the port must answer again (gRPC 1.51's own listener never did: issue 47). Floods come
// from 127.0.0.2 and up, legitimate clients from 127.0.0.1.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "coordinator/server.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "tests/service/service_test_util.h"

namespace deepool::coordinator {
namespace {

using namespace std::chrono_literals;

bool PollUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 30s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

struct Coordinator {
  Coordinator(int max_connections, int per_peer) {
    CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.store = "memory";
    options.control_loop = false;
    options.max_connections = max_connections;
    options.max_connections_per_peer = per_peer;
    options.insecure = true;  // anonymous calls: connections are what is tested
    auto started =
        CoordinatorServer::Start(options, std::make_unique<InMemoryJobStore>(),
                                 std::make_unique<testing::FakePlanningBackend>(), &clock);
    REQUIRE(started.ok());
    server = std::move(*started);
    port = std::stoi(server->address().substr(server->address().rfind(':') + 1));
  }
  ~Coordinator() { server->Shutdown(); }

  // A call on a new connection (a channel argument of its own keeps gRPC from sharing one).
  grpc::Status FreshCall(std::chrono::milliseconds deadline = 10s) {
    grpc::ChannelArguments args;
    args.SetInt("deepool.test.connection", ++fresh_channels);
    auto stub = v1::CoordinatorService::NewStub(
        grpc::CreateCustomChannel(server->address(), grpc::InsecureChannelCredentials(), args));
    return Call(*stub, deadline);
  }
  static grpc::Status Call(v1::CoordinatorService::Stub& stub, std::chrono::milliseconds deadline) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    v1::ListJobsResponse response;
    return stub.ListJobs(&context, v1::ListJobsRequest(), &response);
  }
  // Every connection of a flood of `count` was either kept or refused.
  bool Settled(uint64_t count) {
    const ListenerStats s = server->connection_stats();
    return s.kept + s.refused_peer + s.refused_total >= count;
  }

  FakeClock clock;
  std::unique_ptr<CoordinatorServer> server;
  int port = 0;
  int fresh_channels = 0;
};

// A TCP connection from 127.0.0.<host> that says nothing; -1 when the system refuses one.
int Connect(int port, int host) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(INADDR_LOOPBACK - 1 + host);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

struct Flood {
  ~Flood() { Close(); }
  void Close() {
    for (int fd : fds) close(fd);
    fds.clear();
  }
  std::vector<int> fds;
};

TEST_CASE("one peer's flood stops at its bound while another peer is served", "[service]") {
  Coordinator c(40, 10);
  Flood flood;
  for (int i = 0; i < 30; ++i) flood.fds.push_back(Connect(c.port, 2));
  REQUIRE(PollUntil([&] { return c.Settled(30); }));
  const ListenerStats during = c.server->connection_stats();
  CHECK(during.kept == 10);
  CHECK(during.refused_peer == 20);
  CHECK(during.refused_total == 0);
  CHECK(c.FreshCall().ok());  // from 127.0.0.1
}

TEST_CASE("past the total bound new connections are reset until old ones close", "[service]") {
  Coordinator c(20, 10);
  auto before = v1::CoordinatorService::NewStub(
      grpc::CreateChannel(c.server->address(), grpc::InsecureChannelCredentials()));
  REQUIRE(Coordinator::Call(*before, 10s).ok());  // a connection made before the flood
  Flood flood;
  for (int host = 2; host <= 4; ++host) {
    for (int i = 0; i < 10; ++i) flood.fds.push_back(Connect(c.port, host));
  }
  REQUIRE(PollUntil([&] { return c.Settled(1 + 30); }));
  CHECK(c.server->connection_stats().refused_total == 1 + 30 - 20);
  CHECK(Coordinator::Call(*before, 10s).ok());  // what was connected keeps working
  CHECK_FALSE(c.FreshCall(1s).ok());            // a new one is reset
  flood.Close();
  CHECK(PollUntil([&] { return c.FreshCall(2s).ok(); }));
  CHECK(c.server->connection_stats().open <= 20);
}

int OpenDescriptors() {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    static_cast<void>(entry);
    ++count;
  }
  return count;
}

TEST_CASE("an accept out of descriptors pauses, and the port answers once some are free",
          "[service]") {
  Coordinator c(4096, 100);  // no call yet: no connection of ours may close and free a descriptor
  // UBSan checks a virtual call's type on first sight of it with a pipe, which a process out of
  // descriptors cannot make: seen once here, the listener's clock calls need none later.
  const Clock* clock = SystemClock::Get();
  static_cast<void>(clock->Now());
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  struct Restore {
    rlimit limit;
    ~Restore() { setrlimit(RLIMIT_NOFILE, &limit); }
  } restore{saved};
  // Only raw system calls until the limit is back: the process is out of descriptors.
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(OpenDescriptors() + 16);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> fillers;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.push_back(fd);
  REQUIRE(errno == EMFILE);
  // One descriptor for a connection the coordinator then has none to accept with.
  close(fillers.back());
  fillers.pop_back();
  const int waiting = Connect(c.port, 2);
  REQUIRE(waiting >= 0);
  const bool paused = PollUntil([&] { return c.server->connection_stats().accept_pauses > 0; });
  for (int fd : fillers) close(fd);
  setrlimit(RLIMIT_NOFILE, &saved);
  CHECK(paused);
  // The waiting connection is taken once accepting resumes, and new calls are served.
  CHECK(PollUntil([&] { return c.server->connection_stats().kept >= 1; }));
  CHECK(c.FreshCall().ok());
  close(waiting);
}

}  // namespace
}  // namespace deepool::coordinator
