// Benchmark (f): what periodic checkpoints cost, over real executor processes (Gloo on
// loopback, data parallelism). Trials alternate a run without checkpoints and one with a
// checkpoint every --every iterations (each goes first in every other trial), on the same spec.
// Times come from rank 0's event lines, between its first and last iteration, so process
// start-up is left out; the checkpoint after the last iteration lies outside that window.
// A checkpoint's cost is the difference of the two windows over the checkpoints inside it;
// the table gives it in ms, as a ratio to one iteration, and amortised over --every iterations.
// Resume: the time from launch to the first iteration event, of a run that loads a checkpoint
// against a fresh one.
//   build-*/bin/deepool-bench-checkpoint_cost [--models small_cnn,resnet50] [--ranks 2] ...
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/runtime/runtime_bench_util.h"
#include "common/logging.h"
#include "common/subprocess.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/checkpoints/checkpoint_dir.h"
#include "worker/runtime/run_spec.h"

namespace dw = deepool::worker;
namespace fs = std::filesystem;
using deepool::bench::Check;
using deepool::bench::Median;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::vector<std::string> models = {"small_cnn", "resnet50"};
  int ranks = 2;
  int64_t batch = 8;
  int64_t image_size = 64;
  int64_t iterations = 21;
  int64_t every = 5;
  int trials = 3;
};

struct RunTiming {
  double first_iteration_s = 0;  // launch to rank 0's first iteration event
  double window_ms = 0;          // rank 0's first to last iteration event
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

RunTiming Launch(const dw::RunSpec& spec, const fs::path& dir) {
  const auto start = Clock::now();
  std::optional<Clock::time_point> first, last;
  Check(deepool::bench::RunExecutorRanks(
      spec, (dir / "run.json").string(), 300,
      [&](int rank, const deepool::protocol::ExecutorEvent& event) {
        if (rank != 0 || !std::holds_alternative<deepool::protocol::IterationEvent>(event)) return;
        last = Clock::now();
        if (!first) first = last;
      }));
  RunTiming timing;
  timing.first_iteration_s = Seconds(*first - start);
  timing.window_ms = Seconds(*last - *first) * 1e3;
  return timing;
}

dw::RunSpec Spec(const Options& o, const std::string& model, int64_t iterations) {
  deepool::planner::zoo::ModelOptions model_options;
  model_options.num_classes = 10;
  model_options.image_size = o.image_size;
  auto graph = deepool::planner::zoo::BuildModel(model, model_options);
  Check(graph.status());
  dw::RunSpec spec;
  spec.job_id = "bench-checkpoint";
  spec.graph = std::make_shared<const deepool::planner::Graph>(std::move(graph).value());
  spec.plan = deepool::planner::DataParallelLayout(*spec.graph, o.batch, o.ranks);
  spec.plan.num_devices = o.ranks;
  spec.iterations = iterations;
  spec.optimizer.lr = 0.01;
  spec.optimizer.momentum = 0.9;  // the momentum buffers double what a checkpoint holds
  return spec;
}

int64_t CheckpointBytes(const std::string& dir, int64_t iteration) {
  int64_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(dw::CheckpointPath(dir, iteration))) {
    if (entry.path().extension() == ".pt") bytes += static_cast<int64_t>(entry.file_size());
  }
  return bytes;
}

void RunModel(const Options& o, const std::string& model) {
  const fs::path dir = fs::temp_directory_path() / ("deepool-bench-ckpt-" + model);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string checkpoints = (dir / "ckpt").string();
  std::vector<double> plain_ms, checkpointed_ms, fresh_s, resumed_s;
  int64_t bytes = 0;
  for (int trial = 0; trial < o.trials; ++trial) {
    auto plain = [&] {
      RunTiming t = Launch(Spec(o, model, o.iterations), dir);
      plain_ms.push_back(t.window_ms);
      fresh_s.push_back(t.first_iteration_s);
    };
    auto checkpointed = [&] {
      fs::remove_all(checkpoints);
      dw::RunSpec spec = Spec(o, model, o.iterations);
      spec.checkpoints = dw::PeriodicCheckpoints{checkpoints, o.every, 2};
      checkpointed_ms.push_back(Launch(spec, dir).window_ms);
      bytes = CheckpointBytes(checkpoints, o.iterations);
      // The same directory, more iterations: this run loads the final checkpoint.
      spec.iterations = o.iterations + 2;
      resumed_s.push_back(Launch(spec, dir).first_iteration_s);
    };
    if (trial % 2 == 0) {
      plain();
      checkpointed();
    } else {
      checkpointed();
      plain();
    }
  }
  const double inside = static_cast<double>((o.iterations - 1) / o.every);
  const double iteration_ms = Median(plain_ms) / static_cast<double>(o.iterations - 1);
  const double checkpoint_ms = (Median(checkpointed_ms) - Median(plain_ms)) / inside;
  std::printf("%-10s %9.1f %8.1f %9.1f %9.2f %10.1f%% %9.2f %9.2f\n", model.c_str(),
              static_cast<double>(bytes) / (1 << 20), iteration_ms, checkpoint_ms,
              checkpoint_ms / iteration_ms,
              100.0 * checkpoint_ms / (iteration_ms * static_cast<double>(o.every)),
              Median(fresh_s), Median(resumed_s));
  fs::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"deepool-bench-checkpoint_cost: the cost of periodic checkpoints and of resuming"};
  app.add_option("--models", o.models, "zoo models")->delimiter(',');
  app.add_option("--ranks", o.ranks, "executor processes (data parallel)");
  app.add_option("--batch", o.batch, "global batch");
  app.add_option("--image-size", o.image_size, "input image side of the zoo models");
  app.add_option("--iterations", o.iterations, "iterations per run");
  app.add_option("--every", o.every, "iterations between checkpoints");
  app.add_option("--trials", o.trials, "trials (each runs both variants)");
  CLI11_PARSE(app, argc, argv);
  deepool::InitLogging("bench", "warn");
  std::printf(
      "%d ranks, global batch %lld, image %lld, %lld iterations, a checkpoint every %lld, "
      "%d trials (medians)\n",
      o.ranks, static_cast<long long>(o.batch), static_cast<long long>(o.image_size),
      static_cast<long long>(o.iterations), static_cast<long long>(o.every), o.trials);
  std::printf("%-10s %9s %8s %9s %9s %11s %9s %9s\n", "model", "ckpt MiB", "iter ms", "ckpt ms",
              "ckpt/iter", "amortised", "start s", "resume s");
  for (const std::string& model : o.models) RunModel(o, model);
  return 0;
}
