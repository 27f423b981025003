// deepool-worker: registers this node's devices with the coordinator and runs the tasks it is
// given as deepool-executor / deepool-profile processes. main() parses flags and wires parts.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "common/build_info.h"
#include "common/host_port.h"
#include "common/http_endpoint.h"
#include "common/logging.h"
#include "common/metrics_text.h"
#include "common/open_files.h"
#include "common/path_roots.h"
#include "common/sigpipe.h"
#include "common/subprocess.h"
#include "security/grpc_locks.h"
#include "security/tls_stream.h"
#include "security/transport.h"
#include "worker/daemon/coordinator_channel.h"
#include "worker/daemon/devices.h"
#include "worker/daemon/worker_daemon.h"

namespace fs = std::filesystem;
using namespace deepool::worker::daemon;

namespace {

std::string Hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "worker";
  return name;
}

// The local address the kernel would use to reach the coordinator: what other nodes (and the
// coordinator) most likely reach this node at. A UDP connect sends nothing.
std::string LocalAddressToward(const std::string& coordinator) {
  auto host_port = deepool::ParseHostPort(coordinator);
  if (!host_port.ok()) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host_port->host.c_str(), std::to_string(host_port->port).c_str(), &hints,
                  &result) != 0 ||
      !result) {
    return "127.0.0.1";
  }
  std::string local = "127.0.0.1";
  int fd = socket(result->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    char text[INET6_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      if (addr.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
      } else {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof(text));
      }
      if (text[0]) local = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(result);
  return local;
}

struct Flags {
  std::string coordinator;
  std::string devices;
  int cpu_cores = 0;  // 0: every core of the host
  std::string name = Hostname();
  std::string address;
  std::string work_dir;
  std::string executor = deepool::SiblingExecutable("deepool-executor");
  std::string profiler = deepool::SiblingExecutable("deepool-profile");
  std::string log_level = "info";
  int log_tail_lines = 50;
  double kill_grace_s = 5;
  double executor_lease_s = 5;
  double coordinator_lease_s = -1;  // -1: from the coordinator's node timeout
  deepool::security::TlsFiles tls;
  std::string token_file;
  std::vector<std::string> path_roots;
  deepool::PathRoots resolved_roots;
  std::string metrics_listen;
};

void AddFlags(CLI::App& app, Flags& flags) {
  app.add_option("--coordinator", flags.coordinator,
                 "coordinator HOST:PORT, or several comma-separated (active and standby "
                 "coordinators of one PostgreSQL store: the worker follows the leader) (default: "
                 "$DEEPOOL_COORDINATOR or 127.0.0.1:7070)");
  app.add_option("--devices", flags.devices, "cuda:all | cuda:0,1 | cpu:N")->required();
  app.add_option("--cpu-cores", flags.cpu_cores,
                 "cores this worker's CPU devices divide among their executors (default: all "
                 "the host's; give each worker its share when several run on one host)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--name", flags.name, "stable node name (default: the hostname)");
  app.add_option("--address", flags.address,
                 "host other nodes reach this one at (default: the local address toward the "
                 "coordinator)");
  app.add_option("--work-dir", flags.work_dir,
                 "where run specs and executor logs go (default: /tmp/deepool-worker-NAME)");
  app.add_option("--executor", flags.executor,
                 "deepool-executor binary (default: beside this one)");
  app.add_option("--profiler", flags.profiler, "deepool-profile binary (default: beside this one)");
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error");
  app.add_option("--log-tail-lines", flags.log_tail_lines, "log lines kept per rank for errors");
  app.add_option("--kill-grace-s", flags.kill_grace_s, "SIGTERM to SIGKILL delay on cancel");
  app.add_option("--executor-lease-s", flags.executor_lease_s,
                 "executors end when this daemon exits or is stopped longer than this; keep it "
                 "below the coordinator's node timeout less a heartbeat interval (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--coordinator-lease-s", flags.coordinator_lease_s,
                 "stop this node's tasks when the coordinator has not answered for this long "
                 "(by then it has declared the node DOWN and failed or requeued their jobs; "
                 "default: its node timeout less one heartbeat interval; 0: never, so tasks "
                 "outlive coordinator outages but also run on, cut off, through a partition)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tls-ca", flags.tls.ca,
                 "PEM certificate of the cluster CA (the coordinator's certificate must be "
                 "signed by it)");
  app.add_option(
      "--tls-cert", flags.tls.cert,
      "this node's PEM certificate (`deepool certs node NAME`; its name must be --name)");
  app.add_option("--tls-key", flags.tls.key,
                 "PEM private key of --tls-cert (refused unless only its owner may read it: "
                 "chmod 600)");
  app.add_option("--token-file", flags.token_file,
                 "a file holding this node's bearer token (role worker, named like --name), for "
                 "a coordinator that takes tokens instead of certificates (mode 0600; sent "
                 "without TLS only to a loopback coordinator; default: WORK_DIR/node.token when "
                 "it exists and no --tls-* files are given)");
  app.add_option("--path-roots", flags.path_roots,
                 "directories job specs' checkpoint and data paths must lie under, after "
                 "symlinks and '..' are resolved; a {user} component stands for the job's owner "
                 "(give the coordinator's roots); tasks with other paths are refused "
                 "(repeatable or comma-separated; default: anywhere)")
      ->delimiter(',');
  app.add_option("--metrics-listen", flags.metrics_listen,
                 "serve Prometheus metrics at HOST:PORT/metrics: HTTPS with client certificates "
                 "when the --tls-* files are given (any address), else plain HTTP on a loopback "
                 "address; off when not given");
  app.set_version_flag("--version", deepool::BuildDescription("deepool-worker"));
}

// Checks the flags and fills in the defaults that depend on others (work dir, address).
deepool::StatusOr<std::vector<LocalDevice>> ResolveFlags(Flags& flags) {
  auto coordinators = deepool::ParseHostPortList(flags.coordinator);
  if (!coordinators.ok()) return coordinators.status().WithContext("--coordinator");
  SystemDeviceProbe probe;
  ASSIGN_OR_RETURN(std::vector<LocalDevice> devices, ParseDevices(flags.devices, probe));
  if (flags.work_dir.empty()) flags.work_dir = "/tmp/deepool-worker-" + flags.name;
  std::error_code ec;
  fs::create_directories(flags.work_dir, ec);
  if (ec) {
    return deepool::InvalidArgumentError("cannot create --work-dir " + flags.work_dir + ": " +
                                         ec.message());
  }
  if (flags.address.empty()) {
    flags.address = LocalAddressToward(deepool::FormatHostPort(coordinators->front()));
  }
  // A node token beside the worker, for a coordinator on this host that keeps its own users
  // file (security/local_admin.h): `deepool token create NAME --role worker ... --out` there.
  if (flags.token_file.empty() && !flags.tls.configured() &&
      fs::exists(fs::path(flags.work_dir) / "node.token", ec)) {
    flags.token_file = (fs::path(flags.work_dir) / "node.token").string();
  }
  if (!flags.metrics_listen.empty()) {
    deepool::StatusOr<deepool::HostPort> metrics = deepool::ParseHostPort(flags.metrics_listen);
    if (!metrics.ok()) return metrics.status().WithContext("--metrics-listen");
    if (!deepool::IsLoopbackHost(metrics->host) && !flags.tls.configured()) {
      return deepool::InvalidArgumentError(
          "--metrics-listen " + flags.metrics_listen +
          ": without TLS files the metrics endpoint serves only a loopback address (scrape "
          "with a Prometheus agent on this node); with --tls-ca/--tls-cert/--tls-key it serves "
          "HTTPS with client certificates on any address");
    }
  }
  deepool::StatusOr<deepool::PathRoots> roots = deepool::PathRoots::Make(flags.path_roots);
  if (!roots.ok()) return roots.status().WithContext("--path-roots");
  flags.resolved_roots = *std::move(roots);
  return devices;
}

deepool::StatusOr<std::shared_ptr<grpc::Channel>> CoordinatorChannel(const Flags& flags) {
  deepool::security::ClientSecurity security;
  security.tls = flags.tls;
  if (!flags.token_file.empty()) {
    ASSIGN_OR_RETURN(security.token, deepool::security::ReadTokenFile(flags.token_file));
  }
  return OpenCoordinatorChannel(flags.coordinator, security);
}

SupervisorOptions SupervisorOptionsFrom(const Flags& flags,
                                        const std::vector<LocalDevice>& devices) {
  SupervisorOptions supervisor;
  supervisor.executor_path = flags.executor;
  supervisor.profiler_path = flags.profiler;
  supervisor.work_dir = flags.work_dir;
  supervisor.address = flags.address;
  supervisor.log_tail_lines = static_cast<size_t>(std::max(1, flags.log_tail_lines));
  supervisor.kill_grace =
      std::chrono::milliseconds(static_cast<int64_t>(flags.kill_grace_s * 1000));
  supervisor.executor_lease =
      std::chrono::milliseconds(static_cast<int64_t>(flags.executor_lease_s * 1000));
  supervisor.path_roots = flags.resolved_roots;
  supervisor.cpu_threads_per_device = CpuThreadsPerDevice(
      devices, flags.cpu_cores > 0 ? flags.cpu_cores
                                   : static_cast<int>(std::thread::hardware_concurrency()));
  return supervisor;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (const char* env = std::getenv("DEEPOOL_COORDINATOR")) flags.coordinator = env;
  if (flags.coordinator.empty()) flags.coordinator = "127.0.0.1:7070";
  CLI::App app{"deepool-worker: runs deepool training tasks on this node's devices"};
  AddFlags(app, flags);
  CLI11_PARSE(app, argc, argv);

  deepool::InitLogging("worker", flags.log_level);
  deepool::security::TurnOffAbslDeadlockDetection();
  // Executors' pipes, task files and the coordinator's channel all take descriptors.
  if (auto files = deepool::RaiseOpenFileLimit("deepool-worker"); !files.ok()) {
    std::cerr << files.status().message() << "\n";
    return 1;
  }
  // The executors (which inherit this environment) number GPUs as CUDA does: in PCI bus order,
  // nvidia-smi's, whose numbers this worker offers (devices.h), rather than fastest first.
  ::setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", /*overwrite=*/1);
  auto devices = ResolveFlags(flags);
  if (!devices.ok()) {
    std::cerr << "deepool-worker: " << devices.status().message() << "\n";
    return 2;
  }

  // Signals are taken by sigwait below; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  deepool::IgnoreSigpipe();

  auto channel = CoordinatorChannel(flags);
  if (!channel.ok()) {
    std::cerr << "deepool-worker: " << channel.status().message() << "\n";
    return 2;
  }
  WorkerOptions options;
  options.name = flags.name;
  options.address = flags.address;
  options.devices = *devices;
  if (flags.coordinator_lease_s >= 0) {
    options.coordinator_lease =
        std::chrono::milliseconds(static_cast<int64_t>(flags.coordinator_lease_s * 1000));
  }
  // Keeps the channel connecting while the coordinator is away, and logs what it sees.
  ChannelWatcher link(*channel, "coordinator " + flags.coordinator);
  WorkerDaemon daemon(options, deepool::v1::NodeService::NewStub(*channel),
                      SupervisorOptionsFrom(flags, *devices));
  std::string device_names;
  for (const auto& d : *devices) device_names += (device_names.empty() ? "" : ",") + d.name;
  DP_LOG_INFO("worker {} ({}) with devices {}; coordinator {}; work dir {}{}", flags.name,
              flags.address, device_names, flags.coordinator, flags.work_dir,
              flags.token_file.empty() ? "" : "; token from " + flags.token_file);
  std::unique_ptr<deepool::HttpEndpoint> metrics;
  if (!flags.metrics_listen.empty()) {
    deepool::HttpEndpoint::Routes routes;
    routes["/metrics"] = [&daemon] {
      deepool::HttpResponse response;
      response.content_type = deepool::kMetricsContentType;
      response.body = daemon.MetricsText();
      return response;
    };
    // With the node's TLS files, the same mutual TLS as its calls to the coordinator.
    deepool::HttpStreamFactory streams;
    if (flags.tls.configured()) {
      auto tls = deepool::security::MakeTlsHttpStreams(flags.tls);
      if (!tls.ok()) {
        std::cerr << "deepool-worker: --metrics-listen: " << tls.status().message() << "\n";
        return 2;
      }
      streams = *std::move(tls);
    }
    auto endpoint = deepool::HttpEndpoint::Start(flags.metrics_listen, std::move(routes),
                                                 "dp-work-metric", std::move(streams));
    if (!endpoint.ok()) {
      std::cerr << "deepool-worker: --metrics-listen: " << endpoint.status().message() << "\n";
      return 2;
    }
    metrics = *std::move(endpoint);
    DP_LOG_INFO("metrics at {}://{}/metrics", flags.tls.configured() ? "https" : "http",
                metrics->address());
  }
  daemon.Start();
  int received = 0;
  sigwait(&signals, &received);
  DP_LOG_INFO("signal {}: stopping executors and shutting down", received);
  if (metrics) metrics->Stop();
  daemon.Stop();
  return 0;
}
