// Hosts for multi-host tests on one machine: each host is a network namespace with one address,
// joined to the others by a veth link to a bridge (iproute2). The test process itself stays in
// its own namespace and reaches every host through the bridge's address, so its gRPC stubs and
// CLI runs work unchanged. A link can be cut and restored, as a pulled cable would be, or made
// slow: a token bucket (tc tbf) in both directions limits its rate, and packets that would wait
// longer than a bound are dropped, so a loaded slow link also loses packets. (netem, which adds
// fixed delay and random loss, is not in every kernel: not in the test machines'.)
//
// Needs root (CAP_NET_ADMIN) and the `ip` tool; Create() says why not where they are missing,
// and the tests skip with that message. Names carry the test process's pid, so concurrent test
// processes do not meet, and leftovers of a killed test process are removed by the next one.
// Threading: used from the test's thread.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "tests/e2e/local_cluster.h"

namespace deepool::e2e {

class VirtualNetwork {
 public:
  // `hosts` namespaces on one bridge, with addresses 10.X.Y.1 to 10.X.Y.hosts (X.Y from the
  // pid); the test process gets 10.X.Y.254 on the bridge. Null, with *why_not, where this
  // machine cannot make them.
  static std::unique_ptr<VirtualNetwork> Create(int hosts, std::string* why_not) {
    if (geteuid() != 0) {
      *why_not = "creating network namespaces needs root (CAP_NET_ADMIN)";
      return nullptr;
    }
    std::string ip = FindIpTool();
    if (ip.empty()) {
      *why_not = "the iproute2 'ip' tool is not installed";
      return nullptr;
    }
    auto network = std::unique_ptr<VirtualNetwork>(new VirtualNetwork(ip));
    network->RemoveLeftovers();
    std::string error;
    if (!network->Build(hosts, &error)) {
      *why_not = "cannot build the virtual network: " + error;
      return nullptr;  // the destructor removes what was made
    }
    return network;
  }

  ~VirtualNetwork() { Remove(prefix_); }

  int size() const { return static_cast<int>(addresses_.size()); }
  // Host i: its address and the command prefix that runs a process inside it.
  Host host(int i) const {
    Host h;
    h.address = addresses_.at(i);
    h.enter = {ip_, "netns", "exec", Namespace(i)};
    return h;
  }
  // Cuts (up = false) or restores host i's link to the bridge: its packets are dropped, its
  // processes keep running.
  bool SetLink(int i, bool up, std::string* error) {
    return Run({"link", "set", RootSide(i), up ? "up" : "down"}, error);
  }

  // Limits host i's link to `rate` (tc syntax, e.g. "8mbit") both ways, dropping what would
  // queue longer than `max_queue` (e.g. "50ms").
  bool SlowLink(int i, const std::string& rate, const std::string& max_queue, std::string* error) {
    const std::vector<std::string> tbf = {"tbf",    "rate",    rate,     "burst",
                                          "32kbit", "latency", max_queue};
    std::vector<std::string> toward_host = {"qdisc", "replace", "dev", RootSide(i), "root"};
    std::vector<std::string> from_host = {"-n",  Namespace(i), "qdisc", "replace",
                                          "dev", HostSide(i),  "root"};
    toward_host.insert(toward_host.end(), tbf.begin(), tbf.end());
    from_host.insert(from_host.end(), tbf.begin(), tbf.end());
    return RunTool(tc_, toward_host, error) && RunTool(tc_, from_host, error);
  }

  // The queues of host i's link, both ways, with their counters (tc -s qdisc show).
  std::string LinkStats(int i) {
    std::string out, error;
    RunTool(tc_, {"-s", "qdisc", "show", "dev", RootSide(i)}, &out, &error);
    RunTool(tc_, {"-n", Namespace(i), "-s", "qdisc", "show", "dev", HostSide(i)}, &out, &error);
    return out + error;
  }
  // Packets host i's slow link dropped so far, both ways ("dropped N" in LinkStats).
  uint64_t DroppedPackets(int i) {
    const std::string stats = LinkStats(i);
    const std::regex re("dropped ([0-9]+)");
    uint64_t dropped = 0;
    for (std::sregex_iterator it(stats.begin(), stats.end(), re), end; it != end; ++it) {
      dropped += std::stoull((*it)[1]);
    }
    return dropped;
  }

 private:
  explicit VirtualNetwork(std::string ip)
      : ip_(std::move(ip)), tc_(FindTool("tc")), prefix_("dp" + std::to_string(getpid())) {}

  static std::string FindTool(const std::string& name) {
    for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
      if (access((dir + name).c_str(), X_OK) == 0) return dir + name;
    }
    return "";
  }
  static std::string FindIpTool() { return FindTool("ip"); }

  std::string Bridge() const { return prefix_ + "br"; }
  std::string Namespace(int i) const { return prefix_ + "n" + std::to_string(i); }
  std::string RootSide(int i) const { return prefix_ + "h" + std::to_string(i); }
  std::string HostSide(int i) const { return prefix_ + "p" + std::to_string(i); }

  bool Build(int hosts, std::string* error) {
    // 10.X.Y.0/24 from the pid: distinct for every pid below 37,500 and never 10.0.*.
    const int pid = getpid();
    const std::string subnet =
        "10." + std::to_string(100 + (pid / 250) % 150) + "." + std::to_string(pid % 250) + ".";
    if (!Run({"link", "add", Bridge(), "type", "bridge"}, error) ||
        !Run({"addr", "add", subnet + "254/24", "dev", Bridge()}, error) ||
        !Run({"link", "set", Bridge(), "up"}, error)) {
      return false;
    }
    for (int i = 0; i < hosts; ++i) {
      const std::string ns = Namespace(i);
      const std::string address = subnet + std::to_string(i + 1);
      if (!Run({"netns", "add", ns}, error) ||
          !Run({"link", "add", RootSide(i), "type", "veth", "peer", "name", HostSide(i)}, error) ||
          !Run({"link", "set", HostSide(i), "netns", ns}, error) ||
          !Run({"link", "set", RootSide(i), "master", Bridge()}, error) ||
          !Run({"link", "set", RootSide(i), "up"}, error) ||
          !Run({"-n", ns, "addr", "add", address + "/24", "dev", HostSide(i)}, error) ||
          !Run({"-n", ns, "link", "set", HostSide(i), "up"}, error) ||
          !Run({"-n", ns, "link", "set", "lo", "up"}, error)) {
        return false;
      }
      addresses_.push_back(address);
    }
    return true;
  }

  // Everything named with `prefix`: namespaces (their ends of the links go with them), the
  // root-side links (some kernels keep them after the namespace is gone) and the bridge.
  void Remove(const std::string& prefix) {
    std::string ignored;
    for (const auto& ns : Names({"netns", "list"}, "^(" + prefix + "n[0-9]+)")) {
      Run({"netns", "del", ns}, &ignored);
    }
    for (const auto& link : Names({"-o", "link", "show"}, "^[0-9]+: (" + prefix + "h[0-9]+)")) {
      Run({"link", "del", link}, &ignored);
    }
    Run({"link", "del", prefix + "br"}, &ignored);
  }

  // Networks of test processes that are gone (killed before their destructor ran).
  void RemoveLeftovers() {
    for (const auto& bridge : Names({"-o", "link", "show"}, "^[0-9]+: (dp[0-9]+)br")) {
      const int pid = std::stoi(bridge.substr(2));
      if (pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH) Remove(bridge);
    }
  }

  // First capture group of `pattern` in each line of `ip args`.
  std::vector<std::string> Names(const std::vector<std::string>& args, const std::string& pattern) {
    std::vector<std::string> names;
    std::string out;
    if (!Run(args, &out, &out)) return names;
    std::istringstream lines(out);
    std::string line;
    const std::regex re(pattern);
    std::smatch match;
    while (std::getline(lines, line)) {
      if (std::regex_search(line, match, re)) names.push_back(match[1]);
    }
    return names;
  }

  bool Run(const std::vector<std::string>& args, std::string* error) {
    std::string out;
    return Run(args, &out, error);
  }
  bool Run(const std::vector<std::string>& args, std::string* out, std::string* error) {
    return RunTool(ip_, args, out, error);
  }
  bool RunTool(const std::string& tool, const std::vector<std::string>& args, std::string* error) {
    std::string out;
    return RunTool(tool, args, &out, error);
  }
  bool RunTool(const std::string& tool, const std::vector<std::string>& args, std::string* out,
               std::string* error) {
    if (tool.empty()) {
      *error = "a tool of iproute2 is not installed";
      return false;
    }
    ProcessSpec spec;
    spec.executable = tool;
    spec.args = args;
    std::mutex mu;
    std::string err;
    ChildCallbacks callbacks;
    callbacks.on_stdout_line = [&](const std::string& l) {
      std::lock_guard<std::mutex> lock(mu);
      *out += l + "\n";
    };
    callbacks.on_stderr_line = [&](const std::string& l) {
      std::lock_guard<std::mutex> lock(mu);
      err += l + "\n";
    };
    auto child = ChildProcess::Start(spec, callbacks);
    if (!child.ok()) {
      *error = child.status().ToString();
      return false;
    }
    ProcessExit exit = (*child)->Wait();
    child->reset();  // joins the readers before `err` is read
    if (exit.ok()) return true;
    std::string command = fs::path(tool).filename();
    for (const auto& a : args) command += " " + a;
    *error = command + ": " + exit.Describe() + (err.empty() ? "" : ": " + err);
    return false;
  }

  const std::string ip_;
  const std::string tc_;
  const std::string prefix_;
  std::vector<std::string> addresses_;
};

}  // namespace deepool::e2e
