// Big-graph benchmark (docs/benchmarks.md, "Jobs with large inline graphs").
//
// What one user's large submissions cost everyone else. Starts a coordinator in-process on
// 127.0.0.1:0 (real gRPC server, control loop and in-process planner) with one fake worker of one
// CPU device running another user's job (small_cnn, or a padded graph of --running-graph-mb; the
// worker heartbeats and reports an iteration every 100 ms), submits N jobs whose inline graph is
// G MB (a zoo graph padded with whitespace, within the 8 MiB limit; 2 devices each, so they stay
// PENDING and in memory), then measures:
//   1. per call, alone: wall time and bytes the process allocated (operator new, every thread)
//      for SubmitJob, ListJobs (no limit, as `deepool status`), GetJob and WatchJob's first
//      message;
//   2. while submitting, and under load (C clients calling ListJobs in a closed loop for S
//      seconds): the worker's heartbeat and progress report latency (p50, max) and failures,
//      ListJobs/s and errors;
//   3. the process's peak resident memory and thread count.
#include <grpcpp/create_channel.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_channel.h"
#include "bench/bench_stats.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "coordinator/in_process_planning.h"
#include "coordinator/server.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "deepool/v1/node.grpc.pb.h"
#include "planner/graph.h"
#include "planner/zoo/zoo.h"
#include "tests/node_registration.h"

// Every operator new of the process is counted: copies of job records and graphs show up here.
// GCC sees the replaced new and delete inlined as malloc and free pairs it does not expect.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {

using deepool::bench::NewChannel;
using deepool::bench::Percentile;
std::atomic<uint64_t> g_allocated{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocated.fetch_add(size, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  g_allocated.fetch_add(size, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept {
  return operator new(size, tag);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

namespace v1 = deepool::v1;
using deepool::coordinator::CoordinatorOptions;
using deepool::coordinator::CoordinatorServer;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

int Threads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

// A valid graph document of about `bytes` bytes: small_cnn, then whitespace.
std::string PaddedGraph(size_t bytes) {
  auto graph = deepool::planner::zoo::BuildModel("small_cnn");
  if (!graph.ok()) {
    std::fprintf(stderr, "%s\n", graph.status().ToString().c_str());
    std::exit(1);
  }
  std::string text = deepool::planner::GraphToJson(*graph, -1);
  if (text.size() < bytes) text.append(bytes - text.size(), ' ');
  return text;
}

// One node of one device that runs another user's small job: every 100 ms it heartbeats (listing
// that job's task) and reports an iteration of it, and records how long each answer took.
class Worker {
 public:
  explicit Worker(const std::string& address)
      : stub_(v1::NodeService::NewStub(NewChannel(address, 100000, /*unlimited_messages=*/true))) {
    const v1::RegisterNodeRequest req = deepool::testing::CpuNodeRegistration("w0", "127.0.0.1", 1);
    v1::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    if (grpc::Status s = stub_->RegisterNode(&ctx, req, &resp); !s.ok()) {
      std::fprintf(stderr, "register: %s\n", s.error_message().c_str());
      std::exit(1);
    }
    node_id_ = resp.node_id();
    tasks_ = std::thread([this] { ReadTasks(); });
    beats_ = std::thread([this] { Beat(); });
  }
  ~Worker() {
    stop_ = true;
    stream_ctx_.TryCancel();
    tasks_.join();
    beats_.join();
  }
  bool HasTask() {
    std::lock_guard<std::mutex> lock(mu_);
    return !task_.task_id().empty();
  }
  struct Latencies {
    std::vector<double> heartbeat_ms, report_ms;
    int failed = 0;
  };
  // What was measured since the last call.
  Latencies Take() {
    std::lock_guard<std::mutex> lock(mu_);
    Latencies out = std::move(seen_);
    seen_ = Latencies();
    return out;
  }

 private:
  void ReadTasks() {
    deepool::SetCurrentThreadName("bench-tasks");
    v1::StreamTasksRequest req;
    req.set_node_id(node_id_);
    auto reader = stub_->StreamTasks(&stream_ctx_, req);
    v1::TaskCommand command;
    while (reader->Read(&command)) {
      if (!command.has_assign()) continue;
      std::lock_guard<std::mutex> lock(mu_);
      task_.set_task_id(command.assign().task_id());
      task_.set_job_id(command.assign().job_id());
      task_.add_ranks(0);
    }
  }
  void Beat() {
    deepool::SetCurrentThreadName("bench-beats");
    int64_t iteration = 0;
    while (!stop_) {
      v1::HeartbeatRequest beat;
      beat.set_node_id(node_id_);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!task_.task_id().empty()) *beat.add_running_tasks() = task_;
      }
      Call(
          [&](grpc::ClientContext* ctx) {
            v1::HeartbeatResponse resp;
            return stub_->Heartbeat(ctx, beat, &resp);
          },
          &Latencies::heartbeat_ms);
      if (beat.running_tasks_size() > 0) {
        v1::ReportProgressRequest report;
        report.set_node_id(node_id_);
        report.set_task_id(beat.running_tasks(0).task_id());
        v1::IterationEvent* event = report.add_iterations();
        event->set_iteration(++iteration);
        event->set_iteration_ms(100);
        event->set_samples_per_s(80);
        Call(
            [&](grpc::ClientContext* ctx) {
              v1::ReportProgressResponse resp;
              return stub_->ReportProgress(ctx, report, &resp);
            },
            &Latencies::report_ms);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  template <typename F>
  void Call(F call, std::vector<double> Latencies::*into) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    const auto start = Clock::now();
    const bool ok = call(&ctx).ok();
    const double ms = Ms(start);
    std::lock_guard<std::mutex> lock(mu_);
    (seen_.*into).push_back(ms);
    seen_.failed += !ok;
  }

  std::unique_ptr<v1::NodeService::Stub> stub_;
  std::string node_id_;
  grpc::ClientContext stream_ctx_;
  std::thread tasks_;
  std::thread beats_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  v1::RunningTask task_;
  Latencies seen_;
};

std::string Summary(const Worker::Latencies& l) {
  char text[200];
  std::snprintf(text, sizeof(text),
                "heartbeats %zu (p50 %.1f ms, max %.1f ms), progress reports %zu (p50 %.1f ms, "
                "max %.1f ms), failed %d",
                l.heartbeat_ms.size(), Percentile(l.heartbeat_ms, 0.5),
                Percentile(l.heartbeat_ms, 1.0), l.report_ms.size(), Percentile(l.report_ms, 0.5),
                Percentile(l.report_ms, 1.0), l.failed);
  return text;
}

struct CallCost {
  double ms = 0;
  double mb = 0;
};

// The median wall time and allocation of `reps` calls of `call`.
template <typename F>
CallCost Measure(int reps, F call) {
  std::vector<double> ms, mb;
  for (int i = 0; i < reps; ++i) {
    const uint64_t before = g_allocated.load();
    const auto start = Clock::now();
    call();
    ms.push_back(Ms(start));
    mb.push_back(static_cast<double>(g_allocated.load() - before) / 1e6);
  }
  return {Percentile(ms, 0.5), Percentile(mb, 0.5)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"deepool big-graph benchmark"};
  int jobs = 40;
  double graph_mb = 7.9;
  int clients = 4;
  double load_seconds = 5;
  int reps = 5;
  std::string store = "memory";
  int spec_mib_per_user = -1;
  double running_graph_mb = 0;
  app.add_option("--jobs", jobs, "jobs to submit (they stay PENDING)")->capture_default_str();
  app.add_option("--graph-mb", graph_mb, "size of each job's inline graph (MB)")
      ->capture_default_str();
  app.add_option("--clients", clients, "clients calling ListJobs in the load phase")
      ->capture_default_str();
  app.add_option("--load-seconds", load_seconds, "length of the load phase")->capture_default_str();
  app.add_option("--reps", reps, "calls per measurement of one call")->capture_default_str();
  app.add_option("--store", store, "sqlite or memory")->capture_default_str();
  app.add_option("--running-graph-mb", running_graph_mb,
                 "the running job's own inline graph (MB; 0: the zoo's small_cnn)")
      ->capture_default_str();
  app.add_option("--max-spec-mib-per-user", spec_mib_per_user,
                 "the coordinator's limit (0: none; default: the coordinator's default)");
  CLI11_PARSE(app, argc, argv);
  deepool::InitLogging("bench", "warn");

  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("deepool-bench-big-" + std::to_string(::getpid()));
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.store = store;
  options.data_dir = dir.string();
  options.insecure = true;  // anonymous callers: the clients and the worker are in-process
  if (spec_mib_per_user >= 0) options.job_limits.max_spec_bytes_per_user = spec_mib_per_user << 20;
  auto opened = deepool::coordinator::OpenJobStore(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 1;
  }
  auto started =
      CoordinatorServer::Start(options, std::move(*opened),
                               std::make_unique<deepool::coordinator::InProcessPlanningBackend>(),
                               deepool::SystemClock::Get());
  if (!started.ok()) {
    std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<CoordinatorServer> server = std::move(*started);
  auto worker = std::make_unique<Worker>(server->address());
  auto client = v1::CoordinatorService::NewStub(
      NewChannel(server->address(), 0, /*unlimited_messages=*/true));
  {  // the job the worker runs throughout
    v1::SubmitJobRequest small;
    if (running_graph_mb > 0) {
      v1::JobSpec* other = small.mutable_spec();
      other->set_name("other");
      other->set_graph_json(PaddedGraph(static_cast<size_t>(running_graph_mb * 1e6)));
      other->set_global_batch(8);
      other->set_gpus(1);
      other->set_iterations(100000000);
      other->set_profile("analytical");
    } else {
      small.set_spec_json(R"({"name":"other","model":"small_cnn","global_batch":8,"gpus":1,)"
                          R"("iterations":100000000,"profile":"analytical"})");
    }
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    if (grpc::Status s = client->SubmitJob(&ctx, small, &resp); !s.ok()) {
      std::fprintf(stderr, "submit: %s\n", s.error_message().c_str());
      return 1;
    }
    const auto waiting = Clock::now();
    while (!worker->HasTask()) {
      if (Ms(waiting) > 30e3) {
        std::fprintf(stderr, "the small job was not dispatched in 30 s\n");
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (void)worker->Take();
  }

  v1::SubmitJobRequest submit;
  v1::JobSpec* spec = submit.mutable_spec();
  spec->set_name("big");
  spec->set_graph_json(PaddedGraph(static_cast<size_t>(graph_mb * 1e6)));
  spec->set_global_batch(8);
  spec->set_gpus(2);  // more than the one device: the job stays PENDING
  spec->set_iterations(1);
  spec->set_profile("analytical");
  std::string job_id;
  int refused = 0;
  std::string refusal;
  auto submit_one = [&] {
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = client->SubmitJob(&ctx, submit, &resp);
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {  // a per-user limit
      if (refused++ == 0) refusal = s.error_message();
      return;
    }
    if (!s.ok()) {
      std::fprintf(stderr, "submit: %s\n", s.error_message().c_str());
      std::exit(1);
    }
    job_id = resp.job_id();
  };
  const auto submitting = Clock::now();
  const CallCost submit_cost = Measure(jobs, submit_one);
  const double submit_s = Ms(submitting) / 1e3;
  const Worker::Latencies while_submitting = worker->Take();

  const CallCost list_cost = Measure(reps, [&] {
    v1::ListJobsResponse resp;
    grpc::ClientContext ctx;
    (void)client->ListJobs(&ctx, v1::ListJobsRequest(), &resp);
  });
  const CallCost get_cost = Measure(reps, [&] {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::Job resp;
    grpc::ClientContext ctx;
    (void)client->GetJob(&ctx, req, &resp);
  });
  const CallCost watch_cost = Measure(reps, [&] {
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    grpc::ClientContext ctx;
    auto reader = client->WatchJob(&ctx, req);
    v1::Job first;
    (void)reader->Read(&first);
    ctx.TryCancel();
    (void)reader->Finish();
  });
  (void)worker->Take();

  std::atomic<bool> stop{false};
  std::atomic<int64_t> lists{0};
  std::atomic<int> errors{0};
  std::atomic<int> peak_threads{Threads()};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      deepool::SetCurrentThreadName("bench-list-" + std::to_string(c));
      auto stub = v1::CoordinatorService::NewStub(
          NewChannel(server->address(), 1 + c, /*unlimited_messages=*/true));
      while (!stop) {
        v1::ListJobsResponse resp;
        grpc::ClientContext ctx;
        if (stub->ListJobs(&ctx, v1::ListJobsRequest(), &resp).ok()) {
          ++lists;
        } else {
          ++errors;
        }
      }
    });
  }
  const auto loading = Clock::now();
  while (Ms(loading) < load_seconds * 1e3) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    peak_threads = std::max(peak_threads.load(), Threads());
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  const double load_s = Ms(loading) / 1e3;
  const Worker::Latencies under_load = worker->Take();

  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double loadavg = deepool::bench::LoadAverage()[0];
  std::printf(
      "jobs=%d graph=%.1f MB running job's graph=%.1f MB store=%s clients=%d load=%.1fs reps=%d "
      "loadavg=%.1f\n",
      jobs, graph_mb, running_graph_mb, store.c_str(), clients, load_seconds, reps, loadavg);
  std::printf("| call (alone, median) | ms | MB allocated |\n|---|---|---|\n");
  std::printf("| SubmitJob (%d in %.1f s, %d refused) | %.1f | %.1f |\n", jobs, submit_s, refused,
              submit_cost.ms, submit_cost.mb);
  std::printf("| ListJobs | %.1f | %.1f |\n| GetJob | %.1f | %.1f |\n", list_cost.ms, list_cost.mb,
              get_cost.ms, get_cost.mb);
  std::printf("| WatchJob, first message | %.1f | %.1f |\n", watch_cost.ms, watch_cost.mb);
  if (refused > 0) std::printf("first refusal: %s\n", refusal.c_str());
  std::printf("while submitting: %s\n", Summary(while_submitting).c_str());
  std::printf("under load: ListJobs/s %.1f, errors %d; %s\n", lists / load_s, errors.load(),
              Summary(under_load).c_str());
  std::printf("peak RSS %.0f MB, peak threads %d\n", usage.ru_maxrss / 1024.0, peak_threads.load());
  worker.reset();
  server->Shutdown();
  server.reset();
  fs::remove_all(dir);
  return 0;
}
