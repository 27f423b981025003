// A real Prometheus server (Debian's package) scrapes a running local cluster's coordinator and
// answers queries about it over its HTTP API. Skipped, saying so, where prometheus is not
// installed.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tests/e2e/local_cluster.h"
#include "tests/raw_http.h"

namespace deepool::e2e {
namespace {

// The TCP ports process `pid` listens on (IPv4), from /proc: Prometheus is told port 0 and does
// not print the one it got.
std::set<int> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(fd_dir, error)) {
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
        timeout >> inode;
    if (state == "0A" && inodes.count(inode) > 0) {
      ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

// The query's first sample value as text; "" while there is none.
std::string QueryValue(const std::string& prometheus, const std::string& encoded_query) {
  const std::string body = deepool::testing::HttpBody(
      deepool::testing::HttpGet(prometheus, "/api/v1/query?query=" + encoded_query));
  const auto doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || doc.value("status", "") != "success") return "";
  const auto& result = doc["data"]["result"];
  if (!result.is_array() || result.empty()) return "";
  return result[0]["value"][1].get<std::string>();
}

// Starts Prometheus with `scrape_config` (one scrape_configs entry, YAML indented by 2) in
// `dir`; returns the process and its API's "HOST:PORT" once it serves queries.
std::unique_ptr<TestProcess> StartPrometheus(const std::string& dir,
                                             const std::string& scrape_config, std::string* api) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/prometheus.yml") << "global:\n  scrape_interval: 1s\nscrape_configs:\n"
                                         << scrape_config;
  auto prometheus = TestProcess::Start(
      "prometheus", "/usr/bin/prometheus",
      {"--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/data",
       "--web.listen-address=127.0.0.1:0"},
      dir + "/prometheus.log");
  int port = 0;
  REQUIRE(PollUntil(
      [&] {
        for (int p : ListeningPorts(prometheus->pid())) {
          // Prometheus listens on one port; its /-/ready says when it serves queries.
          if (deepool::testing::HttpGet("127.0.0.1:" + std::to_string(p), "/-/ready")
                  .rfind("HTTP/1.1 200", 0) == 0) {
            port = p;
            return true;
          }
        }
        return false;
      },
      60s));
  *api = "127.0.0.1:" + std::to_string(port);
  return prometheus;
}

bool PrometheusInstalled() {
  if (system("command -v prometheus >/dev/null 2>&1") == 0) return true;
  WARN("prometheus is not installed (apt-get install prometheus): test skipped");
  return false;
}

}  // namespace

TEST_CASE("Prometheus scrapes the coordinator and answers queries about the cluster", "[e2e]") {
  if (!PrometheusInstalled()) return;
  ClusterOptions options;
  options.metrics = true;
  LocalCluster cluster(options);
  REQUIRE_FALSE(cluster.metrics_address().empty());
  std::string job;
  REQUIRE(cluster.Submit(FgJob("scraped", 3), &job).ok());
  CHECK(cluster.WaitForTerminal(job).state() == v1::JOB_STATE_SUCCEEDED);

  std::string api;
  auto prometheus =
      StartPrometheus(cluster.dir() + "/prometheus",
                      "  - job_name: deepool\n    static_configs:\n      - targets: ['" +
                          cluster.metrics_address() + "']\n",
                      &api);
  // deepool_nodes{state="UP"} and the succeeded job, once the first scrapes are in.
  std::string nodes_up, succeeded;
  CHECK(PollUntil(
      [&] {
        nodes_up = QueryValue(api, "deepool_nodes%7Bstate%3D%22UP%22%7D");
        succeeded = QueryValue(api, "deepool_jobs%7Bstate%3D%22SUCCEEDED%22%2Crole%3D%22fg%22%7D");
        return !nodes_up.empty() && !succeeded.empty();
      },
      60s));
  CHECK(nodes_up == "2");
  CHECK(succeeded == "1");
  CHECK(QueryValue(api, "up%7Bjob%3D%22deepool%22%7D") == "1");
  // The submission went through the gRPC interceptor.
  CHECK(QueryValue(api, "sum(deepool_rpc_calls_total%7Bmethod%3D%22SubmitJob%22%7D)") == "1");
  prometheus->Stop();
}

TEST_CASE("Prometheus scrapes a secured coordinator over HTTPS with a cluster certificate",
          "[e2e]") {
  if (!PrometheusInstalled()) return;
  ClusterOptions options;
  options.metrics = true;
  options.secure = true;
  LocalCluster cluster(options);
  REQUIRE_FALSE(cluster.metrics_address().empty());
  // Plain HTTP gets no metrics from the TLS port.
  CHECK(deepool::testing::HttpGet(cluster.metrics_address(), "/metrics").find("deepool_nodes") ==
        std::string::npos);
  // Prometheus gets a certificate of its own from the cluster CA, as an operator would.
  StatusOr<security::TlsFiles> scraper = security::IssueClusterCertificate(
      cluster.security_dir(), security::Role::kUser, "prometheus", std::chrono::hours(24));
  REQUIRE(scraper.ok());
  std::string api;
  auto prometheus = StartPrometheus(
      cluster.dir() + "/prometheus",
      "  - job_name: deepool\n    scheme: https\n    tls_config:\n      ca_file: " +
          cluster.security_dir() + "/ca.pem\n      cert_file: " + scraper->cert +
          "\n      key_file: " + scraper->key +
          "\n      server_name: deepool-coordinator\n    static_configs:\n      - targets: ['" +
          cluster.metrics_address() + "']\n",
      &api);
  std::string nodes_up;
  CHECK(PollUntil(
      [&] {
        nodes_up = QueryValue(api, "deepool_nodes%7Bstate%3D%22UP%22%7D");
        return !nodes_up.empty();
      },
      60s));
  CHECK(nodes_up == "2");
  CHECK(QueryValue(api, "up%7Bjob%3D%22deepool%22%7D") == "1");
  prometheus->Stop();
}

}  // namespace deepool::e2e
