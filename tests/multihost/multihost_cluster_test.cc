// A cluster on four hosts: the coordinator on one, a worker with one CPU device on each of the
// other three, every host a network namespace with its own address (virtual_network.h), mutual
// TLS on every connection. Loopback is of no use between hosts here (each namespace has its
// own), so anything in deepool that assumed one machine fails these tests. Skipped, with the
// reason, where network namespaces cannot be made.
#include <catch2/catch.hpp>
#include <set>

#include "tests/multihost/virtual_network.h"

using namespace deepool;
using namespace deepool::e2e;
using nlohmann::json;

namespace {

constexpr int kWorkerHosts = 3;
// A global batch at which small_cnn's plan over three CPU devices uses all three.
constexpr int kSpreadBatch = 1536;

std::unique_ptr<VirtualNetwork> NetworkOrSkip() {
  std::string why_not;
  auto network = VirtualNetwork::Create(1 + kWorkerHosts, &why_not);
  if (!network) WARN("skipped: " << why_not);
  return network;
}

// Coordinator on host 0, worker node-i on host i+1.
ClusterOptions OnHosts(const VirtualNetwork& network, double node_timeout_s = 20) {
  ClusterOptions options;
  options.workers = kWorkerHosts;
  options.devices_per_worker = 1;
  options.node_timeout_s = node_timeout_s;
  options.secure = true;
  options.coordinator_host = network.host(0);
  for (int i = 1; i <= kWorkerHosts; ++i) options.worker_hosts.push_back(network.host(i));
  return options;
}

std::string HostPart(const std::string& address) { return address.substr(0, address.rfind(':')); }

std::optional<v1::Node> NodeNamed(LocalCluster& cluster, const std::string& name) {
  for (auto& node : cluster.Nodes()) {
    if (node.name() == name) return node;
  }
  return std::nullopt;
}

bool NodeIs(LocalCluster& cluster, const std::string& name, v1::NodeState state) {
  auto node = NodeNamed(cluster, name);
  return node && node->state() == state;
}

std::vector<int> RanksOn(const v1::Job& job, const std::string& node_name) {
  std::vector<int> ranks;
  for (const auto& d : job.devices()) {
    if (d.node_name() == node_name) ranks.push_back(d.rank());
  }
  return ranks;
}

bool RunningAtLeast(const v1::Job& job, int64_t iteration) {
  return job.state() == v1::JOB_STATE_RUNNING && job.progress().iteration() >= iteration;
}

}  // namespace

TEST_CASE("a FG burst-parallel job spans three worker hosts beside a BG job and finishes",
          "[multihost]") {
  auto network = NetworkOrSkip();
  if (!network) return;
  LocalCluster cluster(OnHosts(*network));

  // Each worker found its own host's address toward the coordinator; none registered loopback.
  for (int i = 0; i < kWorkerHosts; ++i) {
    auto node = NodeNamed(cluster, "node-" + std::to_string(i));
    REQUIRE(node);
    CHECK(HostPart(node->address()) == network->host(i + 1).address);
  }

  std::string fg, bg;
  // At this batch the plan runs layers on all three devices, so activations and gradients
  // cross the links between hosts every iteration (at small batches it keeps every layer on
  // one device, and only the loss's all-reduce would).
  REQUIRE(cluster.Submit(FgJob("fg-hosts", 8, kWorkerHosts, kSpreadBatch), &fg).ok());
  REQUIRE(cluster.Submit(BgJob("bg-hosts", 8), &bg).ok());
  v1::Job fg_job = cluster.WaitForTerminal(fg);
  v1::Job bg_job = cluster.WaitForTerminal(bg);
  INFO(cli::ToJson(fg_job) << "\n" << cli::ToJson(bg_job));
  CHECK(fg_job.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(bg_job.state() == v1::JOB_STATE_SUCCEEDED);
  std::set<std::string> nodes;
  for (const auto& d : fg_job.devices()) nodes.insert(d.node_name());
  CHECK(nodes.size() == kWorkerHosts);
  CHECK(fg_job.progress().iteration() == 8);
  REQUIRE(fg_job.progress().devices_size() == kWorkerHosts);
  for (const auto& device : fg_job.progress().devices()) {
    INFO("rank " << device.rank());
    CHECK(device.fg_busy_ms() > 0);  // every rank computed layers
  }
  CHECK(bg_job.progress().iteration() == 8);

  // The CLI, from outside every host, reaches the coordinator over TLS as well.
  std::string out, err;
  CHECK(cluster.RunCli({"status", fg}, &out, &err) == 0);
  CHECK_THAT(out, Catch::Contains("SUCCEEDED"));
}

TEST_CASE("a worker host cut off mid-job is DOWN within the node timeout and comes back clean",
          "[multihost]") {
  const bool requeue = GENERATE(false, true);  // the whole case runs once for each
  INFO("requeue_on_failure " << requeue);
  auto network = NetworkOrSkip();
  if (!network) return;
  constexpr double kNodeTimeoutS = 5;
  LocalCluster cluster(OnHosts(*network, kNodeTimeoutS));

  json spec = FgJob("cut-off", 100000, kWorkerHosts, 12);
  spec["requeue_on_failure"] = requeue;
  std::string id;
  REQUIRE(cluster.Submit(spec, &id).ok());
  v1::Job running = cluster.WaitForJob(id, [](const v1::Job& j) { return RunningAtLeast(j, 2); });
  const std::vector<int> cut_ranks = RanksOn(running, "node-2");
  REQUIRE(cut_ranks.size() == 1);
  const std::string cut_dir = cluster.dir() + "/node-2";
  const pid_t cut_executor = FindExecutor(cut_dir, cut_ranks[0]);
  REQUIRE(cut_executor != 0);

  std::string error;
  const auto cut_at = std::chrono::steady_clock::now();
  REQUIRE(network->SetLink(3, false, &error));
  INFO(error);

  // DOWN once silent past the timeout, and the job is failed or requeued with the node named.
  // Silence starts at the last heartbeat before the cut, up to one interval (0.2 s) earlier.
  REQUIRE(PollUntil([&] { return NodeIs(cluster, "node-2", v1::NODE_STATE_DOWN); }, 30s));
  const auto down_after = std::chrono::steady_clock::now() - cut_at;
  WARN("node-2 DOWN " << std::chrono::duration_cast<std::chrono::milliseconds>(down_after).count()
                      << " ms after its link was cut (node timeout " << kNodeTimeoutS << " s)");
  CHECK(down_after >= std::chrono::milliseconds(static_cast<int>(kNodeTimeoutS * 1000) - 250));
  CHECK(down_after < std::chrono::milliseconds(static_cast<int>(kNodeTimeoutS * 1000) + 3000));
  v1::Job after = cluster.WaitForJob(id, [](const v1::Job& j) {
    return j.state() == v1::JOB_STATE_FAILED || j.state() == v1::JOB_STATE_PENDING;
  });
  INFO(cli::ToJson(after));
  CHECK(after.state() == (requeue ? v1::JOB_STATE_PENDING : v1::JOB_STATE_FAILED));
  // The transition out of RUNNING names the lost node (a requeued job's reason then says what
  // it waits for).
  std::optional<v1::StateTransition> left_running;
  for (int i = 1; i < after.history_size(); ++i) {
    if (after.history(i - 1).state() == v1::JOB_STATE_RUNNING) left_running = after.history(i);
  }
  REQUIRE(left_running);
  CHECK(left_running->code() == (requeue ? v1::REASON_CODE_REQUEUED : v1::REASON_CODE_NODE_LOST));
  CHECK_THAT(left_running->reason(), Catch::Contains("node node-2"));

  // Still cut off, its worker stops the executor once its lease (the node timeout less one
  // heartbeat interval) runs out: it does not train on beside a rerun of its job. Without the
  // lease it ran until the link returned.
  REQUIRE(PollUntil([&] { return FindExecutor(cut_dir, cut_ranks[0]) != cut_executor; }, 30s));
  const auto stopped_after = std::chrono::steady_clock::now() - cut_at;
  WARN("node-2's executor gone "
       << std::chrono::duration_cast<std::chrono::milliseconds>(stopped_after).count()
       << " ms after the cut, the link still down");
  // The lease, then up to the worker's 2 s kill grace.
  CHECK(stopped_after < std::chrono::milliseconds(static_cast<int>(kNodeTimeoutS * 1000) + 2500));

  // The link returns: the node rejoins with nothing left running.
  REQUIRE(network->SetLink(3, true, &error));
  REQUIRE(PollUntil([&] { return NodeIs(cluster, "node-2", v1::NODE_STATE_UP); }, 30s));

  if (requeue) {
    // Dispatched again over all three hosts once node-2 is back, it trains again.
    v1::Job again = cluster.WaitForJob(id, [](const v1::Job& j) { return RunningAtLeast(j, 2); });
    CHECK(RanksOn(again, "node-2").size() == 1);
    std::string out, err;
    CHECK(cluster.RunCli({"cancel", id}, &out, &err) == 0);
    CHECK(cluster.WaitForTerminal(id).state() == v1::JOB_STATE_CANCELLED);
  } else {
    // Every device is free again: a new job over the three hosts runs to the end.
    std::string next;
    REQUIRE(cluster.Submit(FgJob("after-rejoin", 4, kWorkerHosts, 12), &next).ok());
    CHECK(cluster.WaitForTerminal(next).state() == v1::JOB_STATE_SUCCEEDED);
  }
  CHECK(PollUntil([&] { return cluster.NoTasksLeft(); }));
}

TEST_CASE("a slow link that drops packets under load does not fail a live job", "[multihost]") {
  auto network = NetworkOrSkip();
  if (!network) return;
  LocalCluster cluster(OnHosts(*network));  // node timeout 20 s, heartbeats every 0.2 s
  std::string error;
  // node-2's link: 4 Mbit/s each way, and what would queue longer than 5 ms is dropped; the
  // job's activations (about 150 kB per iteration each way) fill it, and heartbeats queue
  // behind them.
  REQUIRE(network->SlowLink(3, "4mbit", "5ms", &error));
  INFO(error);

  std::string id;
  REQUIRE(cluster.Submit(FgJob("slow-link", 6, kWorkerHosts, kSpreadBatch), &id).ok());
  bool went_down = false;  // watched while the job runs
  v1::Job end = cluster.WaitForJob(
      id,
      [&](const v1::Job& j) {
        went_down = went_down || NodeIs(cluster, "node-2", v1::NODE_STATE_DOWN);
        return cli::IsTerminal(j.state());
      },
      600s);
  INFO(cli::ToJson(end));
  CHECK(end.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK_FALSE(went_down);
  const uint64_t dropped = network->DroppedPackets(3);
  CHECK(dropped > 0);  // the link did lose packets: TCP resent them
  WARN("slow link: " << dropped << " packets dropped; iteration " << end.progress().iteration_ms()
                     << " ms at the end\n"
                     << network->LinkStats(3));
}

// The restart test of e2e/cluster_test across hosts: workers on other hosts, mutual TLS, the
// coordinator killed and restarted mid-job. They register again through the bridge, far inside
// their lease, and the job runs on to its end without a new attempt.
TEST_CASE("a coordinator killed and restarted mid-job: workers on other hosts come back over TLS",
          "[multihost]") {
  auto network = NetworkOrSkip();
  if (!network) return;
  ClusterOptions options = OnHosts(*network);
  options.heartbeat_interval_s = 1;
  LocalCluster cluster(options);
  std::string fg;
  REQUIRE(cluster.Submit(FgJob("survivor-hosts", 60, kWorkerHosts, kSpreadBatch), &fg).ok());
  v1::Job before =
      cluster.WaitForJob(fg, [](const v1::Job& j) { return RunningAtLeast(j, 1); });

  cluster.KillCoordinator();
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // the outage, not a wait
  cluster.RestartCoordinator();
  const auto restarted = std::chrono::steady_clock::now();
  REQUIRE(cluster.WaitForNodesUp(kWorkerHosts));
  const auto back_after = std::chrono::steady_clock::now() - restarted;
  INFO("workers back after " << std::chrono::duration<double>(back_after).count() << " s");
  CHECK(back_after < std::chrono::seconds(8));
  v1::Job end = cluster.WaitForTerminal(fg);
  INFO(cli::ToJson(end));
  CHECK(end.state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(end.progress().iteration() == 60);
  CHECK(end.attempt() == before.attempt());  // not restarted from scratch
}
