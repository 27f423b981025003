// Benchmark (d): data parallelism in the executor vs the loop a PyTorch user would run instead:
// a plain libtorch loop with DistributedDataParallel's gradient sync (parameters in buckets of
// 25 MiB in reverse order, the first 1 MiB, each bucket's all-reduce started from autograd hooks
// as soon as its last gradient is ready, overlapping the rest of backward, waited on before the
// step). Both run on the same ranks (threads of this process; on CPU one Gloo communicator each
// over loopback and one intra-op thread, with --device cuda rank R on cuda:R with an NCCL
// communicator, each iteration ended by waiting for the rank's stream, as the executor's
// synchronize does), the same modules, data, optimizer and global batch. Trials
// alternate between the two (each goes first in every other trial); a trial's time per
// iteration is its slowest rank's. Prints ms per iteration (medians of trials) and the
// throughput ratio executor / DDP loop (median of the trials' paired ratios).
//
// The executor runs with per-rank batch norm statistics (as DDP without SyncBatchNorm) and, as
// a second executor row, with the synchronised batch norm it uses in production.
//   build-*/bin/deepool-bench-dp_vs_ddp [--model M] [--ranks N] [--batch B] [--device cuda] ...
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/runtime/runtime_bench_util.h"
#include "common/clock.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/communication/communicator_gloo.h"
#include "worker/runtime/communication/communicator_nccl.h"
#include "worker/runtime/data/data.h"
#include "worker/runtime/devices/device.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/layers/layer_module.h"
#include "worker/runtime/layers/loss.h"
#include "worker/runtime/layers/optimizer.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;
using Clock = std::chrono::steady_clock;

namespace {

using deepool::bench::Check;
using deepool::bench::Median;
const auto Sgd = deepool::bench::BenchSgd;

// A reusable barrier for the rank threads (C++17 has none).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t generation = generation_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  int waiting_ = 0;
  int64_t generation_ = 0;
};

// The DDP-style loop of one rank.
class DdpLoop {
 public:
  DdpLoop(const dp::Graph& graph, int64_t global_batch, dw::Communicator* comm,
          int64_t bucket_bytes, dw::DeviceContext* device)
      : graph_(graph), global_batch_(global_batch), comm_(comm), device_(device) {
    modules_ = Check(dw::BuildAllLayerModules(graph, 1));
    std::vector<torch::Tensor> params;
    for (auto& module : modules_) {
      module->to(device->device());
      module->train();
      for (auto& p : module->parameters()) params.push_back(p);
    }
    optimizer_ = Check(dw::MakeOptimizer(Sgd(), params));
    data_ = Check(dw::MakeDataSource(dw::DataSpec{}, graph, global_batch));
    const int world = comm->world_size();
    first_ = global_batch * comm->rank() / world;
    last_ = global_batch * (comm->rank() + 1) / world;
    for (int r = 0; r < world; ++r) world_.push_back(r);
    // Buckets over the parameters in reverse order, as DDP assigns them (gradients of the last
    // layers are ready first).
    int64_t cap = std::min(bucket_bytes, deepool::planner::kFirstGradientBucketBytes);
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      if (buckets_.empty() || buckets_.back().bytes >= cap) {
        if (!buckets_.empty()) cap = bucket_bytes;
        buckets_.emplace_back();
      }
      Bucket& bucket = buckets_.back();
      bucket.params.push_back(*it);
      bucket.offsets.push_back(bucket.numel);
      bucket.numel += it->numel();
      bucket.bytes += it->numel() * static_cast<int64_t>(it->element_size());
    }
    for (size_t b = 0; b < buckets_.size(); ++b) {
      Bucket& bucket = buckets_[b];
      bucket.flat = torch::zeros({bucket.numel}, torch::TensorOptions().device(device->device()));
      for (size_t i = 0; i < bucket.params.size(); ++i) {
        const int64_t offset = bucket.offsets[i];
        const int64_t n = bucket.params[i].numel();
        bucket.params[i].register_hook([this, b, offset, n](torch::Tensor grad) {
          buckets_[b].flat.narrow(0, offset, n).copy_(grad.reshape({-1}));
          ++buckets_[b].ready;
          LaunchReadyBuckets();
          return grad;
        });
      }
    }
  }

  void Step(int64_t i) {
    for (Bucket& bucket : buckets_) bucket.ready = 0;
    next_launch_ = 0;
    works_.clear();
    dw::Batch batch = Check(data_->Samples(i, first_, last_));
    batch.inputs = batch.inputs.to(device_->device());
    batch.labels = batch.labels.to(device_->device());
    auto outputs =
        Check(dw::ForwardGraph(graph_, modules_, batch.inputs, dw::StepContext{i, first_}));
    torch::Tensor loss = dw::LossPart(outputs[0], batch.labels, 1.0, global_batch_);
    optimizer_->zero_grad();
    loss.backward();
    LaunchReadyBuckets();
    for (size_t b = 0; b < works_.size(); ++b) {
      // As DDP's reducer: on CUDA the stream waits, not the host (on CPU the two are one).
      Check(works_[b]->Wait(comm_->timeout()));
      Bucket& bucket = buckets_[b];
      for (size_t p = 0; p < bucket.params.size(); ++p) {
        torch::Tensor& param = bucket.params[p];
        param.mutable_grad().copy_(
            bucket.flat.narrow(0, bucket.offsets[p], param.numel()).view_as(param));
      }
    }
    if (works_.size() != buckets_.size()) {
      std::fprintf(stderr, "error: %zu of %zu buckets were summed\n", works_.size(),
                   buckets_.size());
      std::exit(1);
    }
    optimizer_->step();
    device_->Synchronize();
  }

 private:
  struct Bucket {
    std::vector<torch::Tensor> params;
    std::vector<int64_t> offsets;
    int64_t numel = 0;
    int64_t bytes = 0;
    size_t ready = 0;
    torch::Tensor flat;
  };

  // Buckets start in order, each once all its gradients are in, as DDP's reducer does, so that
  // every rank starts the same all-reduces in the same order.
  void LaunchReadyBuckets() {
    while (next_launch_ < buckets_.size() &&
           buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
      works_.push_back(Check(comm_->AllReduceSum(buckets_[next_launch_].flat, world_)));
      ++next_launch_;
    }
  }

  const dp::Graph& graph_;
  int64_t global_batch_;
  dw::Communicator* comm_;
  dw::DeviceContext* device_;
  dw::RankGroup world_;
  int64_t first_ = 0, last_ = 0;
  std::vector<std::shared_ptr<dw::LayerModule>> modules_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<dw::DataSource> data_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  std::vector<std::unique_ptr<dw::CommWork>> works_;
};

// The executor on a data-parallel plan over the world.
class ExecutorLoop {
 public:
  ExecutorLoop(const dp::Graph& graph, int64_t global_batch, dw::Communicator* comm,
               bool sync_batch_norm, int64_t bucket_bytes, dw::DeviceContext* device) {
    plan_ = dp::DataParallelLayout(graph, global_batch, comm->world_size());
    data_ = Check(dw::MakeDataSource(dw::DataSpec{}, graph, global_batch));
    dw::ExecutorOptions options;
    options.seed = 1;
    options.optimizer = Sgd();
    options.sync_batch_norm = sync_batch_norm;
    options.gradient_bucket_bytes = bucket_bytes;
    options.device = device->device();
    if (options.device.is_cuda()) options.synchronize = [device] { device->Synchronize(); };
    executor_ = Check(dw::Executor::Create(graph, plan_, comm, data_.get(), dw::BuildLayerModule,
                                           options, deepool::SystemClock::Get()));
  }
  void Step(int64_t i) { Check(executor_->Step(i)); }

 private:
  dp::Plan plan_;
  std::unique_ptr<dw::DataSource> data_;
  std::unique_ptr<dw::Executor> executor_;
};

struct Args {
  std::string model = "small_cnn";
  int ranks = 2;
  int64_t batch = 32;
  int64_t image_size = 0;
  int64_t classes = 10;
  int iterations = 10;
  int trials = 7;
  double bucket_mb = 25;
  bool per_layer_row = true;
  bool cuda = false;  // rank R on cuda:R, NCCL
};

constexpr int kSides = 4;  // DDP loop; executor: per-rank BN, synced BN, one sum per layer
const char* kSideNames[kSides] = {"DDP-style loop (bucketed, overlapped)",
                                  "executor, per-rank batch norm (as DDP)",
                                  "executor, synchronised batch norm (production)",
                                  "executor, one all-reduce per layer (bucket 0)"};

// Runs one rank: builds all sides, warms them up, then runs the trials. times[side][trial].
void RunRank(const Args& args, const dp::Graph& graph, int rank, std::shared_future<int> port,
             std::promise<int>* port_out, Barrier* barrier,
             std::vector<std::vector<std::vector<double>>>* times) {
  dw::CommOptions options;
  options.rank = rank;
  options.world_size = args.ranks;
  options.timeout = std::chrono::seconds(300);
  // Selects this thread's CUDA device first: the NCCL communicator takes the current one.
  const std::unique_ptr<dw::DeviceContext> device =
      Check(dw::MakeDeviceContext(dw::DeviceSpec{args.cuda, args.cuda ? rank : 0}));
  const auto connect = args.cuda ? dw::ConnectNccl : dw::ConnectGloo;
  std::unique_ptr<dw::Communicator> comm;
  if (rank == 0) {
    comm = Check(connect(options, [port_out](int p) { port_out->set_value(p); }));
  } else {
    options.store_port = port.get();
    comm = Check(connect(options, {}));
  }
  const auto bucket = static_cast<int64_t>(args.bucket_mb * (1 << 20));
  DdpLoop ddp(graph, args.batch, comm.get(), bucket, device.get());
  ExecutorLoop plain(graph, args.batch, comm.get(), /*sync_batch_norm=*/false, bucket,
                     device.get());
  ExecutorLoop synced(graph, args.batch, comm.get(), /*sync_batch_norm=*/true, bucket,
                      device.get());
  ExecutorLoop per_layer(graph, args.batch, comm.get(), /*sync_batch_norm=*/false, 0, device.get());
  auto step = [&](int side, int64_t i) {
    switch (side) {
      case 0:
        ddp.Step(i);
        break;
      case 1:
        plain.Step(i);
        break;
      case 2:
        synced.Step(i);
        break;
      default:
        per_layer.Step(i);
        break;
    }
  };
  const int sides = args.per_layer_row ? kSides : kSides - 1;
  for (int side = 0; side < sides; ++side) {
    for (int i = 0; i < 2; ++i) step(side, i);  // warm-up
  }
  for (int trial = 0; trial < args.trials; ++trial) {
    for (int k = 0; k < sides; ++k) {
      // Rotate the order each trial, so no side always follows the same one.
      const int side = (k + trial) % sides;
      barrier->Wait();
      const auto start = Clock::now();
      for (int i = 0; i < args.iterations; ++i) step(side, 2 + trial * args.iterations + i);
      const double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - start).count() / args.iterations;
      (*times)[static_cast<size_t>(side)][static_cast<size_t>(trial)][static_cast<size_t>(rank)] =
          ms;
    }
  }
  barrier->Wait();
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Data parallelism in the executor vs a DDP-style libtorch loop on the same ranks"};
  app.add_option("--model", args.model, "zoo model")->capture_default_str();
  app.add_option("--ranks", args.ranks,
                 "ranks (threads; Gloo on loopback, or NCCL with --device cuda)")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  app.add_option("--batch", args.batch, "global batch")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--image-size", args.image_size, "image side (0: the model's default)")
      ->capture_default_str();
  app.add_option("--classes", args.classes, "classes")->capture_default_str();
  app.add_option("--iterations", args.iterations, "iterations per trial")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--trials", args.trials, "trials")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--bucket-mb", args.bucket_mb, "gradient bucket size of both")
      ->check(CLI::Range(0.0, 4096.0))
      ->capture_default_str();
  app.add_flag("!--no-per-layer", args.per_layer_row,
               "skip the row with one all-reduce per layer (gradient_bucket_mb 0)");
  std::string device = "cpu";
  app.add_option("--device", device, "cpu, or cuda: rank R on cuda:R, NCCL between them")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  args.cuda = device == "cuda";

  torch::set_num_threads(1);
  dp::zoo::ModelOptions model_options;
  model_options.num_classes = args.classes;
  model_options.image_size = args.image_size;
  const dp::Graph graph = Check(dp::zoo::BuildModel(args.model, model_options));

  std::vector<std::vector<std::vector<double>>> times(
      kSides, std::vector<std::vector<double>>(static_cast<size_t>(args.trials),
                                               std::vector<double>(args.ranks, 0)));
  std::promise<int> port;
  std::shared_future<int> port_future = port.get_future().share();
  Barrier barrier(args.ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < args.ranks; ++rank) {
    threads.emplace_back(RunRank, std::cref(args), std::cref(graph), rank, port_future, &port,
                         &barrier, &times);
  }
  for (auto& t : threads) t.join();

  const int sides = args.per_layer_row ? kSides : kSides - 1;
  std::vector<std::vector<double>> slowest(kSides);  // per side, per trial
  for (int side = 0; side < sides; ++side) {
    for (const auto& trial : times[static_cast<size_t>(side)]) {
      slowest[static_cast<size_t>(side)].push_back(*std::max_element(trial.begin(), trial.end()));
    }
  }
  std::printf(
      "%s, global batch %lld over %d ranks (%s), buckets %.3g MiB, %d trials x %d iterations\n",
      args.model.c_str(), static_cast<long long>(args.batch), args.ranks,
      args.cuda ? "CUDA, NCCL" : "CPU, Gloo", args.bucket_mb, args.trials, args.iterations);
  std::printf("%-50s %10s %22s\n", "side", "ms/iter", "throughput vs DDP loop");
  for (int side = 0; side < sides; ++side) {
    std::vector<double> ratios;
    for (int t = 0; t < args.trials; ++t) {
      ratios.push_back(slowest[0][static_cast<size_t>(t)] /
                       slowest[static_cast<size_t>(side)][static_cast<size_t>(t)]);
    }
    std::printf("%-50s %10.2f %21.3fx\n", kSideNames[side],
                Median(slowest[static_cast<size_t>(side)]), Median(ratios));
  }
  return 0;
}
