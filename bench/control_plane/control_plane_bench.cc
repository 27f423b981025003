// Control-plane benchmark (docs/benchmarks.md, "Control plane").
//
// Starts a coordinator in-process on 127.0.0.1:0 (real gRPC server, real control loop, the real
// in-process planner, the chosen job store), registers fake workers through the real NodeService
// API (each reads its StreamTasks stream and reports every TRAIN task SUCCEEDED as soon as it
// arrives, so devices free up at once), then measures with N concurrent clients, each on its own
// gRPC channel:
//   1. submit->running latency: SubmitJob, then WatchJob until the job is RUNNING (the stream's
//      first RUNNING update), per job; includes admission, planning (small_cnn, analytical CPU
//      profile) and dispatch, plus any queueing behind other clients' jobs for devices;
//   2. status queries per second: GetJob on a random finished job, and ListJobs(limit 20),
//      each for a fixed time.
#include <grpcpp/create_channel.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "bench/bench_channel.h"
#include "bench/bench_stats.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "coordinator/in_process_planning.h"
#include "coordinator/job_store.h"
#include "coordinator/server.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "deepool/v1/node.grpc.pb.h"
#include "tests/node_registration.h"

namespace {

using deepool::bench::NewChannel;
using deepool::bench::Percentile;

using deepool::coordinator::CoordinatorOptions;
using deepool::coordinator::CoordinatorServer;
namespace v1 = deepool::v1;
using Clock = std::chrono::steady_clock;

// A worker that registers, heartbeats, and finishes every task the moment it gets it.
class FakeWorker {
 public:
  FakeWorker(const std::string& address, int index, int devices)
      : stub_(v1::NodeService::NewStub(NewChannel(address, 100000 + index))) {
    const v1::RegisterNodeRequest req =
        deepool::testing::CpuNodeRegistration("w" + std::to_string(index), "127.0.0.1", devices);
    v1::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    grpc::Status status = stub_->RegisterNode(&ctx, req, &resp);
    if (!status.ok()) {
      std::fprintf(stderr, "register failed: %s\n", status.error_message().c_str());
      std::exit(1);
    }
    node_id_ = resp.node_id();
    tasks_ = std::thread([this] { ServeTasks(); });
    beats_ = std::thread([this] { Heartbeat(); });
  }
  ~FakeWorker() {
    stop_ = true;
    stream_ctx_.TryCancel();
    tasks_.join();
    beats_.join();
  }

 private:
  void ServeTasks() {
    deepool::SetCurrentThreadName("bench-tasks");
    v1::StreamTasksRequest req;
    req.set_node_id(node_id_);
    auto reader = stub_->StreamTasks(&stream_ctx_, req);
    v1::TaskCommand command;
    while (reader->Read(&command)) {
      if (!command.has_assign()) continue;
      v1::ReportTaskExitRequest exit;
      exit.set_node_id(node_id_);
      exit.set_task_id(command.assign().task_id());
      exit.set_outcome(v1::TASK_OUTCOME_SUCCEEDED);
      v1::ReportTaskExitResponse resp;
      grpc::ClientContext ctx;
      (void)stub_->ReportTaskExit(&ctx, exit, &resp);
    }
  }
  void Heartbeat() {
    deepool::SetCurrentThreadName("bench-beats");
    while (!stop_) {
      v1::HeartbeatRequest req;
      req.set_node_id(node_id_);
      v1::HeartbeatResponse resp;
      grpc::ClientContext ctx;
      (void)stub_->Heartbeat(&ctx, req, &resp);
      for (int i = 0; i < 10 && !stop_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  std::unique_ptr<v1::NodeService::Stub> stub_;
  std::string node_id_;
  grpc::ClientContext stream_ctx_;
  std::thread tasks_;
  std::thread beats_;
  std::atomic<bool> stop_{false};
};

struct Result {
  std::vector<double> latency_ms;
  double get_qps = 0;
  double list_qps = 0;
  int errors = 0;
};

Result Run(const std::string& store, int clients, int jobs_per_client, double query_seconds,
           int nodes, int devices_per_node) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("deepool-bench-cp-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.store = store;
  options.data_dir = dir.string();
  // Anonymous calls, as the numbers in docs/benchmarks.md were measured (no token to check).
  options.insecure = true;
  auto opened = deepool::coordinator::OpenJobStore(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    std::exit(1);
  }
  auto started =
      CoordinatorServer::Start(options, std::move(*opened),
                               std::make_unique<deepool::coordinator::InProcessPlanningBackend>(),
                               deepool::SystemClock::Get());
  if (!started.ok()) {
    std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
    std::exit(1);
  }
  std::unique_ptr<CoordinatorServer> server = std::move(*started);
  std::vector<std::unique_ptr<FakeWorker>> workers;
  for (int n = 0; n < nodes; ++n) {
    workers.push_back(std::make_unique<FakeWorker>(server->address(), n, devices_per_node));
  }

  Result result;
  std::mutex mu;
  std::vector<std::string> job_ids;
  std::atomic<int> errors{0};
  // 1. submit -> running.
  {
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        deepool::SetCurrentThreadName("bench-submit-" + std::to_string(c));
        auto stub = v1::CoordinatorService::NewStub(NewChannel(server->address(), c));
        for (int j = 0; j < jobs_per_client; ++j) {
          v1::SubmitJobRequest req;
          req.set_spec_json(R"({"name":"bench","model":"small_cnn","global_batch":8,"gpus":1,)"
                            R"("iterations":1,"profile":"analytical"})");
          const auto start = Clock::now();
          v1::SubmitJobResponse resp;
          grpc::ClientContext ctx;
          if (!stub->SubmitJob(&ctx, req, &resp).ok()) {
            ++errors;
            continue;
          }
          grpc::ClientContext watch_ctx;
          v1::WatchJobRequest watch;
          watch.set_job_id(resp.job_id());
          auto reader = stub->WatchJob(&watch_ctx, watch);
          v1::Job job;
          bool running = false;
          while (reader->Read(&job)) {
            if (job.state() == v1::JOB_STATE_RUNNING || job.state() == v1::JOB_STATE_SUCCEEDED) {
              running = true;
              break;
            }
            if (job.state() == v1::JOB_STATE_FAILED || job.state() == v1::JOB_STATE_CANCELLED) {
              break;
            }
          }
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
          watch_ctx.TryCancel();
          (void)reader->Finish();
          std::lock_guard<std::mutex> lock(mu);
          if (running) {
            result.latency_ms.push_back(ms);
          } else {
            ++errors;
          }
          job_ids.push_back(resp.job_id());
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  // 2. status queries.
  auto queries = [&](bool list) {
    std::atomic<int64_t> done{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, c] {
        deepool::SetCurrentThreadName("bench-query-" + std::to_string(c));
        auto stub = v1::CoordinatorService::NewStub(NewChannel(server->address(), 1000 + c));
        std::mt19937 rng(static_cast<unsigned>(c));
        while (!stop) {
          grpc::ClientContext ctx;
          grpc::Status status;
          if (list) {
            v1::ListJobsRequest req;
            req.set_limit(20);
            v1::ListJobsResponse resp;
            status = stub->ListJobs(&ctx, req, &resp);
          } else {
            v1::GetJobRequest req;
            req.set_job_id(job_ids[rng() % job_ids.size()]);
            v1::Job resp;
            status = stub->GetJob(&ctx, req, &resp);
          }
          if (status.ok()) {
            ++done;
          } else {
            ++errors;
          }
        }
      });
    }
    const auto start = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(query_seconds));
    stop = true;
    for (auto& t : threads) t.join();
    return done / std::chrono::duration<double>(Clock::now() - start).count();
  };
  if (!job_ids.empty()) {
    result.get_qps = queries(false);
    result.list_qps = queries(true);
  }
  result.errors = errors;
  workers.clear();
  server->Shutdown();
  server.reset();
  fs::remove_all(dir);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"deepool control-plane benchmark"};
  int clients = 50;
  int jobs_per_client = 4;
  double query_seconds = 5;
  int nodes = 4;
  int devices_per_node = 4;
  std::vector<std::string> stores = {"sqlite", "memory"};
  app.add_option("--clients", clients, "concurrent clients")->capture_default_str();
  app.add_option("--jobs-per-client", jobs_per_client, "jobs each client submits")
      ->capture_default_str();
  app.add_option("--query-seconds", query_seconds, "seconds per status-query phase")
      ->capture_default_str();
  app.add_option("--nodes", nodes, "fake workers")->capture_default_str();
  app.add_option("--devices-per-node", devices_per_node, "CPU devices per fake worker")
      ->capture_default_str();
  app.add_option("--stores", stores,
                 "job stores to compare: sqlite, memory, a postgresql:// URI (with-postgres.sh "
                 "starts a server and adds one)");
  CLI11_PARSE(app, argc, argv);
  deepool::InitLogging("bench", "warn");

  const std::array<double, 3> load = deepool::bench::LoadAverage();
  std::printf("clients=%d jobs/client=%d nodes=%dx%d query_seconds=%.1f loadavg=%.1f %.1f %.1f\n",
              clients, jobs_per_client, nodes, devices_per_node, query_seconds, load[0], load[1],
              load[2]);
  std::printf(
      "| store | jobs | submit->running p50 ms | p95 ms | p99 ms | max ms | "
      "GetJob/s | ListJobs(20)/s | errors |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& store : stores) {
    Result r = Run(store, clients, jobs_per_client, query_seconds, nodes, devices_per_node);
    std::printf(
        "| %s | %zu | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %d |\n",
        deepool::coordinator::IsPostgresUri(store) ? "postgresql" : store.c_str(),
        r.latency_ms.size(), Percentile(r.latency_ms, 0.5), Percentile(r.latency_ms, 0.95),
        Percentile(r.latency_ms, 0.99),
        r.latency_ms.empty() ? 0.0 : *std::max_element(r.latency_ms.begin(), r.latency_ms.end()),
        r.get_qps, r.list_qps, r.errors);
    std::fflush(stdout);
  }
  return 0;
}
