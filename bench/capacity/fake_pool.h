// The fake side of the capacity benchmark (capacity_bench.cc): worker nodes that register,
// hold a task stream, heartbeat and report progress through the real NodeService API, and
// clients that watch jobs, all on gRPC's callback API, with the latencies they see.
// Threading: FakeNode's tasks are guarded by its mutex (stream callbacks and the ticker thread
// touch them); call completions run on gRPC's threads and touch only atomics and CallStats.
#pragma once

#include <grpcpp/create_channel.h>
#include <grpcpp/support/client_callback.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench/bench_channel.h"
#include "bench/bench_stats.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "deepool/v1/node.grpc.pb.h"
#include "tests/node_registration.h"

namespace deepool::bench::capacity {

namespace v1 = deepool::v1;
using deepool::bench::NewChannel;
using SteadyClock = std::chrono::steady_clock;

inline int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "capacity bench: %s\n", what.c_str());
  std::exit(1);
}
// Latencies and counts of one kind of call, for one phase.
class CallStats {
 public:
  void Record(double ms, bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ok) {
      ms_.push_back(ms);
    } else {
      ++errors_;
    }
  }
  struct Summary {
    size_t ok = 0;
    int errors = 0;
    double p50 = 0, p99 = 0, max = 0;
  };
  Summary TakeSummary() {
    std::lock_guard<std::mutex> lock(mu_);
    Summary s{ms_.size(), errors_, Percentile(ms_, 0.5), Percentile(ms_, 0.99),
              ms_.empty() ? 0 : *std::max_element(ms_.begin(), ms_.end())};
    ms_.clear();
    errors_ = 0;
    return s;
  }

 private:
  std::mutex mu_;
  std::vector<double> ms_;
  int errors_ = 0;
};

// The largest value seen since the last Take (atomic: many threads record).
class MaxGauge {
 public:
  void Record(double v) {
    double seen = max_.load();
    while (v > seen && !max_.compare_exchange_weak(seen, v)) {
    }
  }
  double Take() { return max_.exchange(0); }

 private:
  std::atomic<double> max_{0};
};

struct PoolStats {
  // The longest time between two heartbeats a node sent (what the coordinator's node timeout
  // sees; a slow answer delays the next, as in a real worker), and the longest pass of the
  // ticker over all nodes (the load generator's own lateness).
  MaxGauge heartbeat_gap_ms;
  MaxGauge ticker_pass_ms;
  CallStats heartbeats;
  CallStats reports;
  CallStats exits;
  std::atomic<int64_t> assignments{0};
  std::atomic<int64_t> watch_updates{0};
};

// One fake worker node: registration, a task stream, heartbeats and progress reports, all
// asynchronous. Its running tasks are guarded by mu_ (stream callbacks and the ticker touch them).
class FakeNode : public grpc::ClientReadReactor<v1::TaskCommand> {
 public:
  FakeNode(std::shared_ptr<grpc::Channel> channel, int index, int devices, PoolStats* stats)
      : stub_(v1::NodeService::NewStub(std::move(channel))),
        index_(index),
        devices_(devices),
        stats_(stats) {}

  void Register() {
    const v1::RegisterNodeRequest req = deepool::testing::CpuNodeRegistration(
        "node-" + std::to_string(index_), "127.0.0." + std::to_string(2 + index_ % 250), devices_);
    v1::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    grpc::Status status = stub_->RegisterNode(&ctx, req, &resp);
    if (!status.ok()) Die("register: " + status.error_message());
    node_id_ = resp.node_id();
    stream_req_.set_node_id(node_id_);
    stub_->async()->StreamTasks(&stream_ctx_, &stream_req_, this);
    StartRead(&command_);
    StartCall();
  }

  void Close() {
    stream_ctx_.TryCancel();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return stream_done_; });
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (command_.has_assign() && command_.assign().has_train()) {
      const v1::TaskAssignment& a = command_.assign();
      ++stats_->assignments;
      std::lock_guard<std::mutex> lock(mu_);
      Task& task = tasks_[a.task_id()];
      task.job_id = a.job_id();
      for (const v1::RankDevice& r : a.train().ranks()) task.ranks.push_back(r.rank());
      task.rank0 = std::find(task.ranks.begin(), task.ranks.end(), 0) != task.ranks.end();
      task.next_report = SteadyClock::now();
    } else if (command_.has_cancel()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (tasks_.erase(command_.cancel().task_id()) > 0) {
        SendExit(command_.cancel().task_id(), v1::TASK_OUTCOME_CANCELLED);
      }
    }
    StartRead(&command_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lock(mu_);
    stream_done_ = true;
    done_cv_.notify_all();
  }

  // Called by the ticker: sends what is due at `now`.
  void Tick(SteadyClock::time_point now, std::chrono::milliseconds heartbeat,
            std::chrono::milliseconds report, bool finish_all) {
    std::lock_guard<std::mutex> lock(mu_);
    // As a real worker's loops: one heartbeat and one report per task in flight at a time; a
    // slow answer delays the next one.
    if (now >= next_beat_ && !beat_in_flight_->load()) {
      next_beat_ = now + heartbeat;
      if (last_beat_ != SteadyClock::time_point()) {
        stats_->heartbeat_gap_ms.Record(
            std::chrono::duration<double, std::milli>(now - last_beat_).count());
      }
      last_beat_ = now;
      SendHeartbeat();
    }
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if (finish_all) {
        SendExit(it->first, v1::TASK_OUTCOME_SUCCEEDED);
        it = tasks_.erase(it);
        continue;
      }
      if (now >= it->second.next_report && !it->second.report_in_flight->load()) {
        it->second.next_report = now + report;
        SendReport(it->first, &it->second);
      }
      ++it;
    }
  }
  // Spreads the heartbeats of many nodes over the interval.
  void SetFirstBeat(SteadyClock::time_point when) {
    std::lock_guard<std::mutex> lock(mu_);
    next_beat_ = when;
  }

 private:
  struct Task {
    std::string job_id;
    std::vector<int> ranks;
    bool rank0 = false;
    int64_t iteration = 0;
    SteadyClock::time_point next_report;
    // Shared with the call's callback, which may run after the task is gone.
    std::shared_ptr<std::atomic<bool>> report_in_flight = std::make_shared<std::atomic<bool>>();
  };
  template <typename Request, typename Response>
  struct Call {
    grpc::ClientContext ctx;
    Request req;
    Response resp;
    SteadyClock::time_point start = SteadyClock::now();
  };

  void SendHeartbeat() {
    auto* call = new Call<v1::HeartbeatRequest, v1::HeartbeatResponse>();
    call->req.set_node_id(node_id_);
    for (const auto& [id, task] : tasks_) {
      v1::RunningTask* running = call->req.add_running_tasks();
      running->set_task_id(id);
      running->set_job_id(task.job_id);
      for (int r : task.ranks) running->add_ranks(r);
    }
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    *beat_in_flight_ = true;
    stub_->async()->Heartbeat(
        &call->ctx, &call->req, &call->resp,
        [call, stats = stats_, in_flight = beat_in_flight_](grpc::Status status) {
          stats->heartbeats.Record(MsSince(call->start), status.ok());
          delete call;
          *in_flight = false;
        });
  }
  void SendReport(const std::string& task_id, Task* task) {
    auto* call = new Call<v1::ReportProgressRequest, v1::ReportProgressResponse>();
    call->req.set_node_id(node_id_);
    call->req.set_task_id(task_id);
    if (task->rank0 && task->iteration == 0) call->req.set_store_ready("127.0.0.1:29500");
    ++task->iteration;
    for (int rank : task->ranks) {
      v1::IterationEvent* e = call->req.add_iterations();
      e->set_rank(rank);
      e->set_iteration(task->iteration);
      e->set_loss(2.0 / static_cast<double>(task->iteration));
      e->set_iteration_ms(120);
      e->set_samples_per_s(266);
      e->set_busy_ms(110);
      e->set_idle_ms(10);
    }
    if (task->iteration % 10 == 0) {
      v1::LogLine* line = call->req.add_logs();
      line->set_rank(0);
      line->set_line("iteration " + std::to_string(task->iteration) + " loss 0.1");
      line->set_time_ms(WallMs());
    }
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    *task->report_in_flight = true;
    stub_->async()->ReportProgress(
        &call->ctx, &call->req, &call->resp,
        [call, stats = stats_, in_flight = task->report_in_flight](grpc::Status status) {
          stats->reports.Record(MsSince(call->start), status.ok());
          delete call;
          *in_flight = false;
        });
  }
  void SendExit(const std::string& task_id, v1::TaskOutcome outcome) {
    auto* call = new Call<v1::ReportTaskExitRequest, v1::ReportTaskExitResponse>();
    call->req.set_node_id(node_id_);
    call->req.set_task_id(task_id);
    call->req.set_outcome(outcome);
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stub_->async()->ReportTaskExit(&call->ctx, &call->req, &call->resp,
                                   [call, stats = stats_](grpc::Status status) {
                                     stats->exits.Record(MsSince(call->start), status.ok());
                                     delete call;
                                   });
  }

  std::unique_ptr<v1::NodeService::Stub> stub_;
  const int index_;
  const int devices_;
  PoolStats* stats_;
  std::string node_id_;
  grpc::ClientContext stream_ctx_;
  v1::StreamTasksRequest stream_req_;
  v1::TaskCommand command_;
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool stream_done_ = false;
  std::map<std::string, Task> tasks_;
  SteadyClock::time_point next_beat_;
  SteadyClock::time_point last_beat_;
  std::shared_ptr<std::atomic<bool>> beat_in_flight_ = std::make_shared<std::atomic<bool>>();
};

// A client watching one job (WatchJob), counting the updates it receives.
class Watcher : public grpc::ClientReadReactor<v1::Job> {
 public:
  Watcher(v1::CoordinatorService::Stub* stub, const std::string& job_id, PoolStats* stats)
      : stats_(stats) {
    req_.set_job_id(job_id);
    stub->async()->WatchJob(&ctx_, &req_, this);
    StartRead(&job_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    ++stats_->watch_updates;
    StartRead(&job_);
  }
  void OnDone(const grpc::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    status_ = status;
    cv_.notify_all();
  }
  grpc::Status Close() {
    ctx_.TryCancel();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

 private:
  PoolStats* stats_;
  grpc::ClientContext ctx_;
  v1::WatchJobRequest req_;
  v1::Job job_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
};

}  // namespace deepool::bench::capacity
