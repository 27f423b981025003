// Reproduces the published DeepPool cluster experiment in simulation: 8 A100s (dgx-a100),
// VGG-16 at global batch 32, WideResNet-101-2 at 16, Inception-v3 at 32, each with a BG job of
// the same model at a per-device batch equal to the FG global batch. Timing: the reference
// A100 profiles, with the analytical a100 model for the layers they lack.
//
//   deepool-bench-simulator [--profiles ../shared/profiles/deeppool-a100] [--out docs]
//
// Writes <out>/simulator-a100.md (tables: the configurations, the interference variants of
// BP+BG, an amplification-limit sweep) and <out>/simulator-a100.svg (total cluster throughput
// relative to DP against FG speed-up), and prints the Markdown.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/simulator/svg_plot.h"
#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/profile_table.h"
#include "planner/simulator.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

struct Experiment {
  std::string model;
  std::string title;
  std::string file;
  int64_t global_batch = 0;
};

const std::vector<Experiment> kExperiments = {
    {"vgg16", "VGG-16, b=32", "A100_vgg.prof", 32},
    {"wide_resnet101_2", "WideResNet-101-2, b=16", "A100_wrn.prof", 16},
    {"inception_v3", "Inception-v3, b=32", "A100_inception.prof", 32},
};
constexpr int kDevices = 8;
constexpr double kAmplificationLimit = 2.0;
// Block-level preemption stand-in: CUDA stream priorities let FG thread blocks overtake queued
// BG blocks, so an FG kernel waits about one BG thread block, not a whole BG kernel.
constexpr double kBlockMs = 0.05;

struct Variant {
  std::string name;
  InterferenceModel interference;
};

const std::vector<Variant> kVariants = {
    {"greedy, whole-layer kernels (default)", {BgPolicy::kGreedy, 1.0, 0}},
    {"greedy, 0.05 ms pieces", {BgPolicy::kGreedy, 1.0, kBlockMs}},
    {"fit-gaps, whole-layer kernels", {BgPolicy::kFitGaps, 1.0, 0}},
    {"fit-gaps, 0.05 ms pieces", {BgPolicy::kFitGaps, 1.0, kBlockMs}},
    {"greedy, 0.05 ms pieces, FG slowdown x1.05", {BgPolicy::kGreedy, 1.05, kBlockMs}},
    {"greedy, 0.05 ms pieces, FG slowdown x1.10", {BgPolicy::kGreedy, 1.10, kBlockMs}},
};
const std::vector<double> kSweepLimits = {1.1, 1.25, 1.5, 2.0, 3.0, 0.0};
const std::vector<int64_t> kBgBatches = {4, 8, 16, 32};

std::string Fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string LimitName(double limit) { return limit > 0 ? Fixed(limit, 2) : "none"; }

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const SimConfigResult* Find(const SimReport& report, const std::string& name) {
  for (const SimConfigResult& config : report.configs) {
    if (config.name == name) return &config;
  }
  return nullptr;
}

struct ModelRun {
  Experiment experiment;
  SimReport main;
  std::vector<SimReport> variants;    // parallel to kVariants
  std::vector<SimReport> sweep;       // parallel to kSweepLimits
  std::vector<SimReport> bg_batches;  // parallel to kBgBatches, default interference
  std::vector<std::string> fallback_layers;
  int num_layers = 0;
};

StatusOr<ModelRun> RunModel(const Experiment& experiment, const std::string& profiles_dir,
                            const Profile& analytical, const Cluster& cluster) {
  ModelRun run;
  run.experiment = experiment;
  ASSIGN_OR_RETURN(Graph graph, zoo::BuildModel(experiment.model));
  ASSIGN_OR_RETURN(std::string text, ReadFile(profiles_dir + "/" + experiment.file));
  ProfileOptions options;
  options.fallback = &analytical;  // explicit: layers the file lacks are timed analytically
  ASSIGN_OR_RETURN(std::unique_ptr<TableProfile> profile, ParseProfileTable(text, graph, options));
  run.fallback_layers = profile->fallback_layers();
  run.num_layers = graph.num_layers();

  SimRequest request;
  request.cluster = cluster;
  request.fg = {&graph, profile.get(), experiment.global_batch, kDevices, kAmplificationLimit};
  request.bg = {{&graph, profile.get(), experiment.global_batch}};
  ASSIGN_OR_RETURN(run.main, SimulateCluster(request));
  SimRequest only_bp = request;
  only_bp.partitions = {kDevices};
  for (const Variant& variant : kVariants) {
    only_bp.engine.interference = variant.interference;
    ASSIGN_OR_RETURN(SimReport report, SimulateCluster(only_bp));
    run.variants.push_back(std::move(report));
  }
  only_bp.engine.interference = kVariants[0].interference;
  for (int64_t batch : kBgBatches) {
    only_bp.bg[0].batch = batch;
    ASSIGN_OR_RETURN(SimReport report, SimulateCluster(only_bp));
    run.bg_batches.push_back(std::move(report));
  }
  only_bp.bg[0].batch = experiment.global_batch;
  only_bp.engine.interference = kVariants[1].interference;
  for (double limit : kSweepLimits) {
    only_bp.fg.amplification_limit = limit;
    ASSIGN_OR_RETURN(SimReport report, SimulateCluster(only_bp));
    run.sweep.push_back(std::move(report));
  }
  return run;
}

void WriteMarkdown(const std::vector<ModelRun>& runs, std::ostream& out) {
  out << "Configurations at amplification limit " << LimitName(kAmplificationLimit)
      << ", default interference model (greedy BG, whole-layer BG kernels, no FG slowdown "
         "factor). FG DEV: devices the FG plan uses / devices given to it. VS DP: total "
         "samples/s over DP's. FG SPEEDUP: single-device iteration time / FG iteration time.\n\n";
  for (const ModelRun& run : runs) {
    const SimReport& report = run.main;
    out << "**" << run.experiment.title << "** (single device " << Fixed(report.single_device_ms, 2)
        << " ms; BG: " << report.bg[0].model << " at batch " << report.bg[0].batch << ", "
        << Fixed(report.bg[0].iteration_ms, 2) << " ms per iteration alone, "
        << Fixed(report.bg[0].samples_per_s, 1)
        << " samples/s; profile: " << run.num_layers - static_cast<int>(run.fallback_layers.size())
        << " of " << run.num_layers << " layers from " << run.experiment.file << ", "
        << run.fallback_layers.size() << " from analytical:a100)\n\n";
    out << "| config | FG dev | BG dev | FG iter ms | FG samples/s | BG samples/s | total "
           "samples/s "
           "| vs DP | FG speed-up |\n|---|---|---|---|---|---|---|---|---|\n";
    for (const SimConfigResult& config : report.configs) {
      out << "| " << config.name << " | " << config.fg_devices_used << "/" << config.fg_devices
          << " | " << config.bg_devices << " | " << Fixed(config.fg_iteration_ms, 2) << " | "
          << Fixed(config.fg_samples_per_s, 1) << " | " << Fixed(config.bg_samples_per_s, 1)
          << " | " << Fixed(config.total_samples_per_s, 1) << " | " << Fixed(config.ratio_to_dp, 2)
          << "x | " << Fixed(config.fg_speedup, 2) << "x |\n";
    }
    out << "\n";
  }

  out << "BP+BG under each interference model (limit " << LimitName(kAmplificationLimit)
      << "). FG vs BP: FG iteration time over BP alone's.\n\n";
  out << "| model | interference | FG iter ms | FG vs BP | BG samples/s | total samples/s | vs DP "
         "|\n|---|---|---|---|---|---|---|\n";
  for (const ModelRun& run : runs) {
    for (size_t v = 0; v < kVariants.size(); ++v) {
      const SimConfigResult* collocated = Find(run.variants[v], "BP+BG");
      const SimConfigResult* bp = Find(run.variants[v], "BP");
      out << "| " << run.experiment.model << " | " << kVariants[v].name << " | "
          << Fixed(collocated->fg_iteration_ms, 2) << " | "
          << Fixed(collocated->fg_iteration_ms / bp->fg_iteration_ms, 3) << "x | "
          << Fixed(collocated->bg_samples_per_s, 1) << " | "
          << Fixed(collocated->total_samples_per_s, 1) << " | " << Fixed(collocated->ratio_to_dp, 2)
          << "x |\n";
    }
  }
  out << "\nBP+BG across amplification limits (" << kVariants[1].name << ").\n\n";
  out << "| model | limit | FG amplification | FG dev | FG iter ms | FG speed-up | BG samples/s "
         "| total samples/s | vs DP |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const ModelRun& run : runs) {
    for (size_t i = 0; i < kSweepLimits.size(); ++i) {
      const SimConfigResult* collocated = Find(run.sweep[i], "BP+BG");
      out << "| " << run.experiment.model << " | " << LimitName(kSweepLimits[i]) << " | "
          << Fixed(collocated->fg_amplification, 2) << " | " << collocated->fg_devices_used << "/"
          << collocated->fg_devices << " | " << Fixed(collocated->fg_iteration_ms, 2) << " | "
          << Fixed(collocated->fg_speedup, 2) << "x | " << Fixed(collocated->bg_samples_per_s, 1)
          << " | " << Fixed(collocated->total_samples_per_s, 1) << " | "
          << Fixed(collocated->ratio_to_dp, 2) << "x |\n";
    }
  }
  out << "\nBP+BG with other BG batches (limit " << LimitName(kAmplificationLimit) << ", "
      << kVariants[0].name << ").\n\n";
  out << "| model | BG batch | BG alone samples/s | FG iter ms | FG vs BP | BG samples/s | total "
         "samples/s | vs DP |\n|---|---|---|---|---|---|---|---|\n";
  for (const ModelRun& run : runs) {
    for (size_t i = 0; i < kBgBatches.size(); ++i) {
      const SimConfigResult* collocated = Find(run.bg_batches[i], "BP+BG");
      const SimConfigResult* bp = Find(run.bg_batches[i], "BP");
      out << "| " << run.experiment.model << " | " << kBgBatches[i] << " | "
          << Fixed(run.bg_batches[i].bg[0].samples_per_s, 1) << " | "
          << Fixed(collocated->fg_iteration_ms, 2) << " | "
          << Fixed(collocated->fg_iteration_ms / bp->fg_iteration_ms, 3) << "x | "
          << Fixed(collocated->bg_samples_per_s, 1) << " | "
          << Fixed(collocated->total_samples_per_s, 1) << " | " << Fixed(collocated->ratio_to_dp, 2)
          << "x |\n";
    }
  }
  out << "\nLayers timed by analytical:a100 because the reference file has no row for them:\n\n";
  for (const ModelRun& run : runs) {
    out << "- " << run.experiment.model << ": " << run.fallback_layers.size();
    if (!run.fallback_layers.empty() && run.fallback_layers.size() <= 6) {
      out << " (";
      for (size_t i = 0; i < run.fallback_layers.size(); ++i) {
        out << (i ? ", " : "") << run.fallback_layers[i];
      }
      out << ")";
    } else if (!run.fallback_layers.empty()) {
      out << " (batch norms, ReLUs, concats, the classifiers and other layers the file "
             "does not time)";
    }
    out << "\n";
  }
}

std::string Plot(const std::vector<ModelRun>& runs) {
  std::vector<bench::PlotPanel> panels;
  for (const ModelRun& run : runs) {
    bench::PlotPanel panel;
    panel.title = run.experiment.title;
    auto point = [](const SimConfigResult& config, std::string label) {
      return bench::PlotPoint{config.fg_speedup, config.ratio_to_dp, std::move(label)};
    };
    bench::PlotSeries static_dp{
        "static k/8-k, FG DP", "#9e9e9e", bench::Marker::kTriangle, false, {}};
    bench::PlotSeries static_bp{
        "static k/8-k, FG BP", "#4caf50", bench::Marker::kDownTriangle, false, {}};
    for (const SimConfigResult& config : run.main.configs) {
      if (config.kind != SimConfigKind::kStaticPartition) continue;
      const std::string split = config.name.substr(7, config.name.size() - 10);  // "k/m"
      if (config.fg_parallelism == "dp") {
        static_dp.points.push_back(point(config, split));
      } else {
        static_bp.points.push_back(point(config, ""));
      }
    }
    bench::PlotSeries sweep{
        "BP+BG, 0.05 ms pieces, limits 1.1..none", "#ff9800", bench::Marker::kCircle, true, {}};
    for (size_t i = 0; i < kSweepLimits.size(); ++i) {
      sweep.points.push_back(point(*Find(run.sweep[i], "BP+BG"), ""));
    }
    panel.series.push_back(
        {"DP", "#000000", bench::Marker::kSquare, false, {point(*Find(run.main, "DP"), "")}});
    panel.series.push_back(
        {"BP", "#2196f3", bench::Marker::kCircle, false, {point(*Find(run.main, "BP"), "")}});
    panel.series.push_back({"BP+BG (default model)",
                            "#e53935",
                            bench::Marker::kDiamond,
                            false,
                            {point(*Find(run.main, "BP+BG"), "")}});
    panel.series.push_back(std::move(sweep));
    panel.series.push_back(std::move(static_dp));
    panel.series.push_back(std::move(static_bp));
    panels.push_back(std::move(panel));
  }
  return bench::RenderSvg("Simulated 8x A100: total cluster throughput vs FG speed-up",
                          "FG speed-up over one GPU", "total samples/s relative to DP", panels);
}

int Main(int argc, char** argv) {
  std::string profiles_dir = "../shared/profiles/deeppool-a100";
  std::string out_dir = "docs";
  CLI::App app{
      "The published DeepPool experiment simulated on 8 A100s (VGG-16, WideResNet-101-2, "
      "Inception-v3: DP, DP+BG, BP, BP+BG and the GPU partitions); writes "
      "simulator-a100.md and simulator-a100.svg into --out and prints the tables"};
  app.add_option("--profiles", profiles_dir, "directory of the measured A100 profiles")
      ->capture_default_str();
  app.add_option("--out", out_dir, "directory the table and the plot are written to")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  StatusOr<DeviceModel> a100 = DevicePreset("a100");
  StatusOr<Cluster> cluster = ClusterPreset("dgx-a100");
  if (!a100.ok() || !cluster.ok()) {
    std::cerr << "error: a100 presets are missing\n";
    return 1;
  }
  const std::unique_ptr<Profile> analytical = MakeAnalyticalProfile(*a100);
  std::vector<ModelRun> runs;
  for (const Experiment& experiment : kExperiments) {
    StatusOr<ModelRun> run = RunModel(experiment, profiles_dir, *analytical, *cluster);
    if (!run.ok()) {
      std::cerr << "error: " << experiment.model << ": " << run.status().message() << '\n';
      return 1;
    }
    runs.push_back(std::move(*run));
  }
  std::ostringstream markdown;
  WriteMarkdown(runs, markdown);
  const std::string md_path = out_dir + "/simulator-a100.md";
  const std::string svg_path = out_dir + "/simulator-a100.svg";
  std::ofstream(md_path) << "# Simulated DeepPool experiment on 8 A100s\n\n"
                         << "Generated by `deepool-bench-simulator`; see docs/benchmarks.md, "
                            "\"Cluster simulation\", and docs/simulator.md.\n\n"
                         << markdown.str();
  std::ofstream(svg_path) << Plot(runs);
  std::cout << markdown.str();
  std::cerr << "wrote " << md_path << " and " << svg_path << '\n';
  return 0;
}

}  // namespace
}  // namespace deepool::planner

int main(int argc, char** argv) { return deepool::planner::Main(argc, argv); }
