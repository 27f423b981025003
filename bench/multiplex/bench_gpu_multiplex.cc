// Benchmark: the FG slowdown a BG job causes on one GPU, deepool's multiplexing against naive
// collocation, through the product's own path (deepool-executor processes started by the
// launcher, the BG job attached by the run spec's "background" field).
//
// Configurations, run round-robin `--rounds` times:
//   fg_alone        the FG job alone (one rank)
//   fg+bg deepool   BG job beside it: FG on a high-priority stream, BG on a low-priority stream,
//                   BG iterations replayed as a CUDA graph (the defaults on CUDA)
//   fg+bg naive     BG job beside it with priority_streams and cuda_graphs off: both at the
//                   same priority, BG eager (naive collocation)
//   bg_alone        the BG model trained alone as a one-rank job with the BG batch
// Reported per configuration (median round by FG iteration time): FG iteration time (mean over
// the iterations after --warmup), its ratio to fg_alone, BG samples/s (the BG runner's own
// rate, from the last iteration event) and its ratio to bg_alone.
//
// Needs a CUDA device for its purpose; `--device cpu` runs the same path on CPU (a smoke test
// of the benchmark itself; on CPU the BG job only runs in the FG rank's idle time).
//   build/bin/deepool-bench-gpu_multiplex [--fg-model vgg16] [--fg-batch 32] [--bg-model
//       resnet50] [--bg-batch 16] [--iterations 60] [--warmup 10] [--rounds 3] [--device cuda]
//       [--image-size 224] [--markdown FILE]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/build_info.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/devices/device_description.h"
#include "worker/runtime/launcher.h"
#include "worker/runtime/run_spec.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;
namespace fs = std::filesystem;

namespace {

struct Options {
  std::string fg_model = "vgg16";
  int64_t fg_batch = 32;
  std::string bg_model = "resnet50";
  int64_t bg_batch = 16;
  int64_t image_size = 224;
  int iterations = 60;
  int warmup = 10;
  int rounds = 3;
  std::string device = "cuda";
  std::string markdown;
};

struct Result {
  double fg_iteration_ms = 0;
  double bg_samples_per_s = 0;
};

enum class Config { kFgAlone, kDeepool, kNaive, kBgAlone };
const char* Name(Config c) {
  switch (c) {
    case Config::kFgAlone:
      return "fg_alone";
    case Config::kDeepool:
      return "fg+bg deepool";
    case Config::kNaive:
      return "fg+bg naive";
    case Config::kBgAlone:
      return "bg_alone";
  }
  return "?";
}

std::shared_ptr<const dp::Graph> Model(const std::string& name, int64_t image_size) {
  dp::zoo::ModelOptions options;
  if (name != "mlp") options.image_size = image_size;
  auto graph = dp::zoo::BuildModel(name, options);
  if (!graph.ok()) {
    std::fprintf(stderr, "model %s: %s\n", name.c_str(), graph.status().ToString().c_str());
    std::exit(2);
  }
  return std::make_shared<const dp::Graph>(std::move(graph).value());
}

dw::RunSpec OneRankJob(const std::string& id, std::shared_ptr<const dp::Graph> graph, int64_t batch,
                       int iterations) {
  dw::RunSpec spec;
  spec.job_id = id;
  spec.graph = std::move(graph);
  spec.plan = dp::DataParallelLayout(*spec.graph, batch, 1);
  spec.plan.num_devices = 1;
  spec.iterations = iterations;
  spec.optimizer.momentum = 0.9;
  return spec;
}

dw::RunSpec SpecFor(Config config, const Options& o) {
  if (config == Config::kBgAlone) {
    return OneRankJob("bg-alone", Model(o.bg_model, o.image_size), o.bg_batch, o.iterations);
  }
  dw::RunSpec spec = OneRankJob("fg", Model(o.fg_model, o.image_size), o.fg_batch, o.iterations);
  if (config == Config::kFgAlone) return spec;
  dw::BackgroundSpec bg;
  bg.job_id = "bg";
  bg.graph = Model(o.bg_model, o.image_size);
  bg.batch_size = o.bg_batch;
  bg.seed = 7;
  bg.optimizer.momentum = 0.9;
  bool naive = config == Config::kNaive;
  // deepool: the device's default mode (concurrent on CUDA, with an eagerly run BG job gated to
  // the FG rank's idle time; idle-only on CPU). Naive: concurrent, no gating, same priority.
  if (naive) bg.sharing.mode = dw::SharingMode::kConcurrent;
  bg.sharing.priority_streams = !naive;
  bg.sharing.cuda_graphs = !naive;
  spec.background = bg;
  return spec;
}

// Runs one configuration; exits the benchmark on a failed run (a number from a failed run
// would be meaningless).
Result Run(Config config, const Options& o, const fs::path& dir) {
  std::string path =
      (dir / (std::string("run-") + std::to_string(static_cast<int>(config)) + ".json")).string();
  if (auto written = dw::WriteRunSpecFile(SpecFor(config, o), path); !written.ok()) {
    std::fprintf(stderr, "%s\n", written.ToString().c_str());
    std::exit(1);
  }
  dw::LaunchOptions launch;
  launch.executor_path = deepool::SiblingExecutable("deepool-executor");
  launch.run_spec_path = path;
  launch.world_size = 1;
  launch.device = o.device;
  launch.timeout_s = 120;
  auto ranks = dw::RankProcesses::Start(launch);
  if (!ranks.ok()) {
    std::fprintf(stderr, "%s: %s\n", Name(config), ranks.status().ToString().c_str());
    std::exit(1);
  }
  double sum_ms = 0;
  int measured = 0;
  Result result;
  deepool::Status status = (*ranks)->Wait([&](int, const deepool::protocol::ExecutorEvent& e) {
    const auto* event = std::get_if<deepool::protocol::IterationEvent>(&e);
    if (!event) return;
    if (event->iteration >= o.warmup) {
      sum_ms += event->iteration_ms;
      ++measured;
    }
    if (config == Config::kBgAlone) {
      result.bg_samples_per_s = event->samples_per_s;
    } else if (event->sharing) {
      result.bg_samples_per_s = event->sharing->bg_samples_per_s;
    }
  });
  if (!status.ok() || measured == 0) {
    std::fprintf(stderr, "%s failed: %s\n", Name(config), status.ToString().c_str());
    std::exit(1);
  }
  result.fg_iteration_ms = sum_ms / measured;
  return result;
}

std::string Table(const std::map<Config, Result>& median, const Options& o) {
  const Result& fg = median.at(Config::kFgAlone);
  const Result& bg = median.at(Config::kBgAlone);
  std::string out =
      "| configuration | FG iteration ms | FG vs alone | BG samples/s | BG vs alone |\n"
      "|---|---|---|---|---|\n";
  char line[256];
  for (Config c : {Config::kFgAlone, Config::kDeepool, Config::kNaive, Config::kBgAlone}) {
    const Result& r = median.at(c);
    if (c == Config::kBgAlone) {
      std::snprintf(line, sizeof line, "| %s (%s, batch %lld) | | | %.1f | 1.00 |\n", Name(c),
                    o.bg_model.c_str(), static_cast<long long>(o.bg_batch), r.bg_samples_per_s);
    } else {
      double bg_ratio = bg.bg_samples_per_s > 0 ? r.bg_samples_per_s / bg.bg_samples_per_s : 0;
      std::snprintf(line, sizeof line, "| %s | %.2f | %.3f | %.1f | %.2f |\n", Name(c),
                    r.fg_iteration_ms, r.fg_iteration_ms / fg.fg_iteration_ms, r.bg_samples_per_s,
                    bg_ratio);
    }
    out += line;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "FG slowdown caused by a BG job on one device: deepool's multiplexing (priority streams, "
      "CUDA graphs) against naive collocation, through deepool-executor processes."};
  app.add_option("--fg-model", o.fg_model, "FG zoo model")->capture_default_str();
  app.add_option("--fg-batch", o.fg_batch, "FG batch")->capture_default_str();
  app.add_option("--bg-model", o.bg_model, "BG zoo model")->capture_default_str();
  app.add_option("--bg-batch", o.bg_batch, "BG batch")->capture_default_str();
  app.add_option("--image-size", o.image_size, "image size of both models")->capture_default_str();
  app.add_option("--iterations", o.iterations, "FG iterations per run")->capture_default_str();
  app.add_option("--warmup", o.warmup, "iterations left out of the mean")->capture_default_str();
  app.add_option("--rounds", o.rounds, "round-robin rounds; rows are the median round")
      ->capture_default_str();
  app.add_option("--device", o.device, "cuda (rank 0 on cuda:0) or cpu (smoke test)")
      ->capture_default_str();
  app.add_option("--markdown", o.markdown, "also write the table to this file");
  CLI11_PARSE(app, argc, argv);
  if (o.warmup >= o.iterations || o.rounds < 1) {
    std::fprintf(stderr, "need --warmup < --iterations and --rounds >= 1\n");
    return 2;
  }
  std::string pattern = (fs::temp_directory_path() / "deepool-gpu-mux-XXXXXX").string();
  if (!mkdtemp(pattern.data())) return 1;
  fs::path dir = pattern;
  std::map<Config, std::vector<Result>> runs;
  const Config order[] = {Config::kFgAlone, Config::kDeepool, Config::kNaive, Config::kBgAlone};
  for (int round = 0; round < o.rounds; ++round) {
    for (Config c : order) {
      runs[c].push_back(Run(c, o, dir));
      std::fprintf(stderr, "round %d %-14s FG %.2f ms  BG %.1f samples/s\n", round, Name(c),
                   runs[c].back().fg_iteration_ms, runs[c].back().bg_samples_per_s);
    }
  }
  std::map<Config, Result> median;
  for (auto& [c, results] : runs) {
    std::sort(results.begin(), results.end(), [](const Result& a, const Result& b) {
      return a.fg_iteration_ms < b.fg_iteration_ms;
    });
    median[c] = results[results.size() / 2];
  }
  std::string table = Table(median, o);
  // What ran, in the result file too (after the runs: it starts CUDA in this process).
  table += "\nmeasured on " +
           dp::EnvironmentSummary(dw::DescribeDevice(c10::Device(o.device), deepool::BuildCommit())) +
           "\n";
  std::printf(
      "FG %s batch %lld, BG %s batch %lld, image %lld, %d iterations (%d warm-up), "
      "%d rounds, device %s\n\n%s",
      o.fg_model.c_str(), static_cast<long long>(o.fg_batch), o.bg_model.c_str(),
      static_cast<long long>(o.bg_batch), static_cast<long long>(o.image_size), o.iterations,
      o.warmup, o.rounds, o.device.c_str(), table.c_str());
  if (!o.markdown.empty()) std::ofstream(o.markdown) << table;
  fs::remove_all(dir);
  return 0;
}
