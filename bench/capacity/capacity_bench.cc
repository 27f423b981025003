// Capacity benchmark (docs/operations.md, "Capacity"; docs/benchmarks.md, "Capacity").
//
// Plays a large pool against one real coordinator process (deepool-coordinator, started here
// on 127.0.0.1:0 with the chosen store) and measures what it carries:
//   0. history: `--history` finished jobs are written into the store first, through the
//      coordinator's own JobStore, so the coordinator loads them at start as after months of use;
//   1. nodes: `--nodes` fake workers with `--devices-per-node` devices each register through the
//      real NodeService API, keep a StreamTasks stream open, and heartbeat every
//      `--heartbeat-s` with their running tasks; measured alone first;
//   2. running: one FG job per node fills every device; each task reports progress (an
//      iteration and, every tenth report, a log line) every `--report-s`, and `--watchers`
//      clients watch those jobs (WatchJob streams);
//   3. pending: `--pending` more jobs are submitted by `--clients` clients at once; they wait,
//      and every scheduling round looks at all of them; then `--submit-per-s` more a second for
//      a phase, at that steady rate, for the latency a user sees in the busy pool;
//   4. status: pages of ListJobs through the whole history, GetJob, and /metrics scrapes, while
//      the pool goes on.
// In every phase: the heartbeat and report rates sustained and their latency, the scheduling
// round time (from the coordinator's /metrics), and the coordinator process's CPU (utime +
// stime over wall time: 1.0 = one core busy) and memory (RSS), read from /proc.
//
// The fake workers and clients run in this process on gRPC's callback API (a few threads for
// all of them), beside the coordinator on the same cores: on a 2-core machine they compete, so
// latencies are upper bounds. Calls are anonymous (--insecure): every client is one user to the
// coordinator.
#include <grpcpp/create_channel.h>
#include <grpcpp/support/client_callback.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "bench/bench_stats.h"
#include "bench/capacity/fake_pool.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/subprocess.h"
#include "common/thread_name.h"
#include "coordinator/job_store.h"
#include "coordinator/server.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "deepool/v1/node.grpc.pb.h"
#include "protocol/version.h"

namespace {

using deepool::bench::MsSince;
using deepool::bench::NewChannel;
using deepool::bench::Percentile;
using deepool::bench::capacity::CallStats;
using deepool::bench::capacity::Die;
using deepool::bench::capacity::FakeNode;
using deepool::bench::capacity::PoolStats;
using deepool::bench::capacity::WallMs;
using deepool::bench::capacity::Watcher;

namespace v1 = deepool::v1;
namespace fs = std::filesystem;
using deepool::coordinator::JobRecord;
using deepool::coordinator::JobState;
using SteadyClock = std::chrono::steady_clock;
// The coordinator process's CPU seconds (user + system) and resident memory, from /proc.
struct ProcessUse {
  double cpu_s = 0;
  double rss_mib = 0;
  int threads = 0;
};
ProcessUse ReadProcessUse(pid_t pid) {
  ProcessUse use;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    use.cpu_s = (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) use.rss_mib = std::stod(line.substr(6)) / 1024.0;
    if (line.rfind("Threads:", 0) == 0) use.threads = std::stoi(line.substr(8));
  }
  return use;
}

// GET http://address/metrics, the body; "" on failure.
std::string Scrape(const std::string& address) {
  deepool::StatusOr<deepool::HostPort> hp = deepool::ParseHostPort(address);
  if (!hp.ok()) return "";
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(hp->port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
    if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// The value of a metrics line that starts with `name` followed by a space.
double MetricValue(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::stod(text.substr(at + name.size() + 2));
}

struct Rounds {
  double sum_s = 0;
  double count = 0;
};
Rounds ReadRounds(const std::string& metrics_address) {
  const std::string text = Scrape(metrics_address);
  return {MetricValue(text, "deepool_scheduler_round_duration_seconds_sum"),
          MetricValue(text, "deepool_scheduler_round_duration_seconds_count")};
}

// One method's cumulative buckets of deepool_rpc_duration_seconds: (upper bound in seconds,
// calls at or under it), +Inf last.
using Buckets = std::vector<std::pair<double, double>>;
Buckets ReadRpcBuckets(const std::string& metrics_address, const std::string& method) {
  const std::string text = Scrape(metrics_address);
  const std::string prefix = "deepool_rpc_duration_seconds_bucket{";
  const std::string tag = "method=\"" + method + "\",le=\"";
  Buckets out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t at = line.find(tag);
    if (at == std::string::npos) continue;
    const size_t le = at + tag.size();
    const std::string bound = line.substr(le, line.find('"', le) - le);
    out.emplace_back(bound == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(bound),
                     std::stod(line.substr(line.rfind(' ') + 1)));
  }
  return out;
}

// The q-quantile in ms of the calls between two readings, interpolated within its bucket as
// Prometheus' histogram_quantile does; -1 when no call was served in between.
double BucketQuantileMs(const Buckets& before, const Buckets& after, double q) {
  if (after.empty()) return -1;
  auto count = [&](size_t i) {
    return after[i].second - (i < before.size() ? before[i].second : 0);
  };
  const double total = count(after.size() - 1);
  if (total <= 0) return -1;
  const double rank = q * total;
  double lower_bound = 0, lower_count = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    const double upto = count(i);
    if (upto >= rank) {
      if (std::isinf(after[i].first)) return 1000.0 * lower_bound;
      const double width = after[i].first - lower_bound;
      const double in_bucket = upto - lower_count;
      return 1000.0 *
             (lower_bound + width * (in_bucket > 0 ? (rank - lower_count) / in_bucket : 1));
    }
    lower_bound = after[i].first;
    lower_count = upto;
  }
  return -1;
}

// A finished job as the coordinator would have stored it.
JobRecord FinishedJob(int64_t seq, int64_t now_ms) {
  JobRecord job;
  char id[32];
  std::snprintf(id, sizeof(id), "job-%06lld", static_cast<long long>(seq));
  job.id = id;
  job.seq = seq;
  job.spec.name = "history";
  job.spec.model = "small_cnn";
  job.spec.global_batch = 32;
  job.spec.gpus = 8;
  job.spec.iterations = 1000;
  job.spec.profile = "analytical";
  job.submitted_ms = now_ms - 3'600'000;
  job.updated_ms = now_ms - 60'000;
  job.state = JobState::kSucceeded;
  job.reason = "all ranks finished";
  job.attempt = 1;
  job.device_type = "cpu";
  using deepool::coordinator::ReasonCode;
  job.history = {
      {JobState::kPending, "waiting to be scheduled", job.submitted_ms, ReasonCode::kSubmitted},
      {JobState::kPlanning, "planning", job.submitted_ms + 10, ReasonCode::kUnspecified},
      {JobState::kRunning, "running", job.submitted_ms + 20, ReasonCode::kUnspecified},
      {JobState::kSucceeded, job.reason, job.updated_ms, ReasonCode::kUnspecified}};
  job.progress.iteration = 1000;
  job.progress.iterations = 1000;
  job.progress.loss = 0.1;
  return job;
}

deepool::coordinator::CoordinatorOptions StoreOptions(const std::string& store,
                                                      const std::string& dir) {
  deepool::coordinator::CoordinatorOptions options;
  options.store = store;
  options.data_dir = dir;
  return options;
}

// Writes `count` finished jobs into the store, `writers` connections at once (one for SQLite,
// whose writes serialise anyway).
double Preload(const std::string& store, const std::string& dir, int64_t count) {
  const auto start = SteadyClock::now();
  const int writers = deepool::coordinator::IsPostgresUri(store) ? 8 : 1;
  const int64_t now_ms = WallMs();
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      auto opened = deepool::coordinator::OpenJobStore(StoreOptions(store, dir));
      if (!opened.ok()) Die(opened.status().ToString());
      for (int64_t seq = 1 + w; seq <= count; seq += writers) {
        deepool::Status saved = (*opened)->SaveJob(FinishedJob(seq, now_ms));
        if (!saved.ok()) Die("preload: " + saved.ToString());
      }
    });
  }
  for (auto& t : threads) t.join();
  return MsSince(start) / 1000.0;
}

struct Options {
  int nodes = 1000;
  int devices_per_node = 8;
  double heartbeat_s = 2;
  double report_s = 1;
  int watchers = 1000;
  int pending = 10000;
  int64_t history = 100000;
  int clients = 16;
  double submit_per_s = 50;
  double phase_s = 20;
  std::string coordinator;  // the deepool-coordinator binary
};

// Runs the phases against one store and prints the table's rows for it.
class Run {
 public:
  Run(const Options& o, std::string store) : o_(o), store_(std::move(store)) {}

  void Go() {
    dir_ = fs::temp_directory_path() / ("deepool-bench-capacity-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string store_arg =
        deepool::coordinator::IsPostgresUri(store_) ? store_ : std::string("sqlite");
    if (o_.history > 0) {
      const double s = Preload(store_arg, dir_.string(), o_.history);
      Row("history written", std::to_string(o_.history) + " finished jobs in " + Fixed(s, 1) +
                                 " s (the bench's own writes, before the coordinator starts)");
    }
    StartCoordinator(store_arg);
    StartNodes();
    Measure("1 nodes heartbeating", o_.phase_s);
    FillNodes();
    Measure("2 + a FG job on every device, reports, watchers", o_.phase_s);
    SubmitPending();
    Measure("3 + pending jobs", o_.phase_s);
    SubmitSteadily();
    StatusQueries();
    Stop();
  }

 private:
  static std::string Fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
    return buf;
  }
  void Row(const std::string& what, const std::string& value) {
    std::printf("| %s | %s | %s |\n", StoreName().c_str(), what.c_str(), value.c_str());
    std::fflush(stdout);
  }
  std::string StoreName() const {
    return deepool::coordinator::IsPostgresUri(store_) ? "postgresql" : store_;
  }

  void StartCoordinator(const std::string& store_arg) {
    deepool::ProcessSpec spec;
    spec.executable = o_.coordinator;
    spec.args = {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--insecure",
                 "--store", store_arg, "--data-dir", dir_.string(), "--heartbeat-interval-s",
                 Fixed(o_.heartbeat_s, 1), "--max-client-streams", std::to_string(o_.watchers + 64),
                 "--max-client-streams-per-user", std::to_string(o_.watchers + 64),
                 "--max-client-calls", "256", "--max-client-calls-per-user", "256",
                 // Every fake node connects from 127.0.0.1, where real ones come from an address
                 // each: one peer holds them all.
                 "--max-connections-per-peer", std::to_string(o_.nodes + o_.clients + 64),
                 // Open calls are all one user's: the per-user queue bound would stop the pool.
                 "--max-pending-jobs-per-user", "0", "--log-level", "warn"};
    spec.stderr_to = deepool::ProcessOutput::AppendTo((dir_ / "coordinator.log").string());
    spec.end_with_parent = true;
    std::mutex mu;
    std::condition_variable cv;
    std::string listening;
    deepool::ChildCallbacks callbacks;
    callbacks.on_stdout_line = [&](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      if (line.find("\"listening\"") != std::string::npos) listening = line;
      cv.notify_all();
    };
    const auto start = SteadyClock::now();
    auto child = deepool::ChildProcess::Start(spec, callbacks);
    if (!child.ok()) Die(child.status().ToString());
    coordinator_ = std::move(*child);
    {
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_for(lock, std::chrono::minutes(10), [&] { return !listening.empty(); })) {
        Die("the coordinator did not start; see " + (dir_ / "coordinator.log").string());
      }
    }
    auto doc = nlohmann::json::parse(listening);
    address_ = doc.at("address").get<std::string>();
    metrics_ = doc.at("metrics").get<std::string>();
    const ProcessUse use = ReadProcessUse(coordinator_->pid());
    Row("coordinator start", Fixed(MsSince(start) / 1000.0, 2) +
                                 " s to serving (history loaded), " + Fixed(use.rss_mib, 0) +
                                 " MiB RSS");
    stub_ = v1::CoordinatorService::NewStub(NewChannel(address_, -1));
  }

  void StartNodes() {
    const auto start = SteadyClock::now();
    for (int n = 0; n < o_.nodes; ++n) {
      nodes_.push_back(
          std::make_unique<FakeNode>(NewChannel(address_, n), n, o_.devices_per_node, &stats_));
    }
    // Registration from a few threads, as nodes booting together.
    std::vector<std::thread> threads;
    std::atomic<int> next{0};
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int n = next++; n < o_.nodes; n = next++) nodes_[n]->Register();
      });
    }
    for (auto& t : threads) t.join();
    Row("nodes registered", std::to_string(o_.nodes) + " x " + std::to_string(o_.devices_per_node) +
                                " devices in " + Fixed(MsSince(start) / 1000.0, 1) + " s");
    const auto now = SteadyClock::now();
    const auto spread = std::chrono::duration<double>(o_.heartbeat_s);
    for (int n = 0; n < o_.nodes; ++n) {
      nodes_[n]->SetFirstBeat(now + std::chrono::duration_cast<SteadyClock::duration>(
                                        spread * (static_cast<double>(n) / o_.nodes)));
    }
    ticker_ = std::thread([this] { Tick(); });
  }

  void Tick() {
    deepool::SetCurrentThreadName("bench-ticker");
    const auto heartbeat = std::chrono::milliseconds(static_cast<int64_t>(o_.heartbeat_s * 1000));
    const auto report = std::chrono::milliseconds(static_cast<int64_t>(o_.report_s * 1000));
    while (!stop_ticker_) {
      const auto now = SteadyClock::now();
      for (auto& node : nodes_) node->Tick(now, heartbeat, report, finish_all_);
      stats_.ticker_pass_ms.Record(MsSince(now));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::string JobSpecJson(const std::string& name) const {
    return R"({"name":")" + name + R"(","model":"small_cnn","global_batch":)" +
           std::to_string(4 * o_.devices_per_node) + R"(,"gpus":)" +
           std::to_string(o_.devices_per_node) + R"(,"iterations":1000000,"profile":"analytical"})";
  }

  // Submits `count` jobs from o_.clients threads; their SubmitJob latencies. With `per_s` 0 each
  // client sends its next job as soon as the last is answered (the most the coordinator takes);
  // else job i is due at i / per_s seconds and its latency counts from then, so a slow answer
  // that delays the submissions behind it is counted in theirs too.
  std::vector<double> Submit(int count, const std::string& name, std::vector<std::string>* ids,
                             double per_s = 0) {
    std::vector<double> ms;
    std::mutex mu;
    std::atomic<int> next{0};
    std::vector<std::thread> threads;
    const auto begin = SteadyClock::now();
    for (int c = 0; c < o_.clients; ++c) {
      threads.emplace_back([&, c] {
        auto stub = v1::CoordinatorService::NewStub(NewChannel(address_, 100000 + c));
        for (int i = next++; i < count; i = next++) {
          v1::SubmitJobRequest req;
          req.set_spec_json(JobSpecJson(name));
          v1::SubmitJobResponse resp;
          grpc::ClientContext ctx;
          auto start = SteadyClock::now();
          if (per_s > 0) {
            start = begin + std::chrono::duration_cast<SteadyClock::duration>(
                                std::chrono::duration<double>(i / per_s));
            std::this_thread::sleep_until(start);
          }
          grpc::Status status = stub->SubmitJob(&ctx, req, &resp);
          const double took = MsSince(start);
          std::lock_guard<std::mutex> lock(mu);
          if (!status.ok()) {
            Die("submit: " + status.error_message());
          }
          ms.push_back(took);
          if (ids) ids->push_back(resp.job_id());
        }
      });
    }
    for (auto& t : threads) t.join();
    return ms;
  }

  void FillNodes() {
    const auto start = SteadyClock::now();
    std::vector<double> ms = Submit(o_.nodes, "fill", &running_);
    // Wait until every job has its devices and every node its task.
    while (stats_.assignments < o_.nodes && MsSince(start) < 300'000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    Row("fill: submit p50 / p99 / max ms", Fixed(Percentile(ms, 0.5), 1) + " / " +
                                               Fixed(Percentile(ms, 0.99), 1) + " / " +
                                               Fixed(*std::max_element(ms.begin(), ms.end()), 1) +
                                               " (" + std::to_string(ms.size()) + " jobs)");
    Row("fill: all jobs dispatched", std::to_string(stats_.assignments.load()) + " tasks in " +
                                         Fixed(MsSince(start) / 1000.0, 1) + " s");
    const int watchers = std::min<int>(o_.watchers, static_cast<int>(running_.size()));
    for (int w = 0; w < watchers; ++w) {
      watchers_.push_back(std::make_unique<Watcher>(stub_.get(), running_[w], &stats_));
    }
  }

  void SubmitPending() {
    stats_.heartbeat_gap_ms.Take();
    stats_.ticker_pass_ms.Take();
    const auto start = SteadyClock::now();
    const Buckets served0 = ReadRpcBuckets(metrics_, "SubmitJob");
    std::vector<double> ms = Submit(o_.pending, "pending", nullptr);
    Row("pending: submit p50 / p99 / max ms",
        Fixed(Percentile(ms, 0.5), 1) + " / " + Fixed(Percentile(ms, 0.99), 1) + " / " +
            Fixed(ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()), 1) + " (" +
            std::to_string(ms.size()) + " jobs by " + std::to_string(o_.clients) + " clients, " +
            Fixed(ms.size() / (MsSince(start) / 1000.0), 0) + " /s; " +
            ServedLatency(served0, ReadRpcBuckets(metrics_, "SubmitJob")) +
            "); meanwhile longest heartbeat gap " +
            Fixed(stats_.heartbeat_gap_ms.Take() / 1000.0, 1) + " s, ticker pass " +
            Fixed(stats_.ticker_pass_ms.Take(), 0) + " ms");
  }

  // Submissions at a steady rate into the busy pool with its queue, as users send them (not as
  // fast as the coordinator answers): the latency a user sees.
  void SubmitSteadily() {
    if (o_.submit_per_s <= 0) return;
    const int count = static_cast<int>(o_.submit_per_s * o_.phase_s);
    const Buckets served0 = ReadRpcBuckets(metrics_, "SubmitJob");
    std::vector<double> ms = Submit(count, "steady", nullptr, o_.submit_per_s);
    Row("3 steady submits: p50 / p99 / max ms",
        Fixed(Percentile(ms, 0.5), 1) + " / " + Fixed(Percentile(ms, 0.99), 1) + " / " +
            Fixed(ms.empty() ? 0 : *std::max_element(ms.begin(), ms.end()), 1) + " (" +
            std::to_string(ms.size()) + " jobs at " + Fixed(o_.submit_per_s, 0) +
            " /s, while every device is busy and the queue holds " + std::to_string(o_.pending) +
            "; " + ServedLatency(served0, ReadRpcBuckets(metrics_, "SubmitJob")) + ")");
  }

  // The coordinator's own time for the calls between two readings of its histogram (arrival
  // to status, without the client's side and the network): what a client on another machine
  // would see, where the benchmark's clients share the coordinator's cores.
  static std::string ServedLatency(const Buckets& before, const Buckets& after) {
    return "in the coordinator p50 " + Fixed(BucketQuantileMs(before, after, 0.5), 1) + ", p99 " +
           Fixed(BucketQuantileMs(before, after, 0.99), 1) + " ms";
  }

  // A phase: `seconds` of the pool as it is, then its rates, latencies and the coordinator's use.
  void Measure(const std::string& phase, double seconds) {
    stats_.heartbeats.TakeSummary();
    stats_.reports.TakeSummary();
    stats_.heartbeat_gap_ms.Take();
    stats_.ticker_pass_ms.Take();
    const int64_t updates0 = stats_.watch_updates;
    const Rounds rounds0 = ReadRounds(metrics_);
    const ProcessUse use0 = ReadProcessUse(coordinator_->pid());
    const auto start = SteadyClock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    const double wall = MsSince(start) / 1000.0;
    const ProcessUse use1 = ReadProcessUse(coordinator_->pid());
    const Rounds rounds1 = ReadRounds(metrics_);
    const CallStats::Summary beats = stats_.heartbeats.TakeSummary();
    const CallStats::Summary reports = stats_.reports.TakeSummary();
    const double round_count = rounds1.count - rounds0.count;
    std::printf(
        "| %s | %s | heartbeats %.0f/s (p50 %.1f, p99 %.1f ms, %d failed); reports %.0f/s (p50 "
        "%.1f, p99 %.1f ms, %d failed); watch updates %.0f/s; rounds %.0f, mean %.1f ms; "
        "coordinator CPU %.2f cores, RSS %.0f MiB, %d threads; longest heartbeat gap %.1f s, "
        "ticker pass %.0f ms |\n",
        StoreName().c_str(), phase.c_str(), beats.ok / wall, beats.p50, beats.p99, beats.errors,
        reports.ok / wall, reports.p50, reports.p99, reports.errors,
        (stats_.watch_updates - updates0) / wall, round_count,
        round_count > 0 ? 1000.0 * (rounds1.sum_s - rounds0.sum_s) / round_count : 0.0,
        (use1.cpu_s - use0.cpu_s) / wall, use1.rss_mib, use1.threads,
        stats_.heartbeat_gap_ms.Take() / 1000.0, stats_.ticker_pass_ms.Take());
    std::fflush(stdout);
  }

  void StatusQueries() {
    // Every page of the whole history, 100 jobs a page, newest first.
    const Rounds rounds0 = ReadRounds(metrics_);
    const ProcessUse use0 = ReadProcessUse(coordinator_->pid());
    const auto start = SteadyClock::now();
    std::vector<double> page_ms;
    v1::ListJobsRequest list;
    list.set_limit(100);
    int64_t listed = 0;
    while (true) {
      v1::ListJobsResponse page;
      grpc::ClientContext ctx;
      const auto t = SteadyClock::now();
      grpc::Status status = stub_->ListJobs(&ctx, list, &page);
      if (!status.ok()) Die("ListJobs: " + status.error_message());
      page_ms.push_back(MsSince(t));
      listed += page.jobs_size();
      if (page.next_page_token().empty()) break;
      list.set_page_token(page.next_page_token());
    }
    const double wall = MsSince(start) / 1000.0;
    const ProcessUse use1 = ReadProcessUse(coordinator_->pid());
    const Rounds rounds1 = ReadRounds(metrics_);
    const double round_count = rounds1.count - rounds0.count;
    Row("4 status: ListJobs pages of 100 through all",
        std::to_string(listed) + " jobs in " + std::to_string(page_ms.size()) + " pages, p50 " +
            Fixed(Percentile(page_ms, 0.5), 2) + ", p99 " + Fixed(Percentile(page_ms, 0.99), 2) +
            " ms a page; meanwhile rounds " + Fixed(round_count, 0) + ", mean " +
            Fixed(round_count > 0 ? 1000.0 * (rounds1.sum_s - rounds0.sum_s) / round_count : 0, 1) +
            " ms; coordinator CPU " + Fixed((use1.cpu_s - use0.cpu_s) / wall, 2) + " cores");
    std::vector<double> get_ms;
    for (int i = 0; i < 2000; ++i) {
      v1::GetJobRequest req;
      char id[32];
      std::snprintf(id, sizeof(id), "job-%06lld",
                    static_cast<long long>(1 + (i * 7919LL) % std::max<int64_t>(1, o_.history)));
      req.set_job_id(o_.history > 0 ? id : running_[0]);
      v1::Job job;
      grpc::ClientContext ctx;
      const auto t = SteadyClock::now();
      grpc::Status status = stub_->GetJob(&ctx, req, &job);
      if (!status.ok()) Die("GetJob: " + status.error_message());
      get_ms.push_back(MsSince(t));
    }
    Row("4 status: GetJob of a finished job", "p50 " + Fixed(Percentile(get_ms, 0.5), 2) +
                                                  ", p99 " + Fixed(Percentile(get_ms, 0.99), 2) +
                                                  " ms (2,000 calls)");
    std::vector<double> scrape_ms;
    size_t bytes = 0;
    for (int i = 0; i < 20; ++i) {
      const auto t = SteadyClock::now();
      bytes = Scrape(metrics_).size();
      scrape_ms.push_back(MsSince(t));
    }
    Row("4 status: /metrics scrape",
        "p50 " + Fixed(Percentile(scrape_ms, 0.5), 1) + ", max " +
            Fixed(*std::max_element(scrape_ms.begin(), scrape_ms.end()), 1) + " ms, " +
            std::to_string(bytes / 1024) + " KiB");
  }

  void Stop() {
    for (auto& w : watchers_) (void)w->Close();  // CANCELLED: ours
    watchers_.clear();
    finish_all_ = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    stop_ticker_ = true;
    ticker_.join();
    for (auto& node : nodes_) node->Close();
    coordinator_->Terminate(std::chrono::seconds(20));
    nodes_.clear();
    fs::remove_all(dir_);
  }

  const Options o_;
  const std::string store_;
  fs::path dir_;
  std::unique_ptr<deepool::ChildProcess> coordinator_;
  std::string address_, metrics_;
  std::unique_ptr<v1::CoordinatorService::Stub> stub_;
  PoolStats stats_;
  std::vector<std::unique_ptr<FakeNode>> nodes_;
  std::vector<std::unique_ptr<Watcher>> watchers_;
  std::vector<std::string> running_;
  std::thread ticker_;
  std::atomic<bool> stop_ticker_{false};
  std::atomic<bool> finish_all_{false};
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "deepool capacity benchmark: a pool of fake worker nodes and clients against one "
      "deepool-coordinator process (docs/operations.md, \"Capacity\")"};
  Options o;
  std::vector<std::string> stores = {"sqlite"};
  o.coordinator = deepool::SiblingExecutable("deepool-coordinator");
  app.add_option("--nodes", o.nodes, "fake worker nodes")->capture_default_str();
  app.add_option("--devices-per-node", o.devices_per_node, "devices per node")
      ->capture_default_str();
  app.add_option("--heartbeat-s", o.heartbeat_s, "heartbeat interval")->capture_default_str();
  app.add_option("--report-s", o.report_s, "progress report interval of each running task")
      ->capture_default_str();
  app.add_option("--watchers", o.watchers, "WatchJob streams on running jobs")
      ->capture_default_str();
  app.add_option("--pending", o.pending, "jobs submitted to wait once every device is busy")
      ->capture_default_str();
  app.add_option("--history", o.history, "finished jobs in the store before the coordinator starts")
      ->capture_default_str();
  app.add_option("--clients", o.clients, "concurrent submitting clients")->capture_default_str();
  app.add_option("--submit-per-s", o.submit_per_s,
                 "steady submissions a second after phase 3, by the same clients (0: none)")
      ->capture_default_str();
  app.add_option("--phase-s", o.phase_s, "seconds each measured phase lasts")
      ->capture_default_str();
  app.add_option("--coordinator", o.coordinator, "the deepool-coordinator binary")
      ->capture_default_str();
  app.add_option("--stores", stores,
                 "stores to compare: sqlite, a postgresql:// URI (run.sh starts a server and "
                 "adds one)");
  CLI11_PARSE(app, argc, argv);
  deepool::InitLogging("bench", "warn");
  const std::array<double, 3> load = deepool::bench::LoadAverage();
  std::printf(
      "nodes=%dx%d heartbeat=%.1fs report=%.1fs watchers=%d pending=%d history=%lld "
      "clients=%d phase=%.0fs cores=%u loadavg=%.1f %.1f %.1f\n\n| store | phase | measured "
      "|\n|---|---|---|\n",
      o.nodes, o.devices_per_node, o.heartbeat_s, o.report_s, o.watchers, o.pending,
      static_cast<long long>(o.history), o.clients, o.phase_s, std::thread::hardware_concurrency(),
      load[0], load[1], load[2]);
  for (const std::string& store : stores) Run(o, store).Go();
  return 0;
}
