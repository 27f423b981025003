// Benchmark: does the planner predict what the runtime measures? On this host's CPU ranks it
// calibrates the links (deepool-calibrate), profiles each model (deepool-profile, one intra-op
// thread as each rank has, with the iteration overhead), builds plans (one device, data
// parallel, the classifier on one device, one device with parallel branches side by side on
// the ranks, and the planner's burst plans at several amplification limits), predicts each
// plan's iteration with the cost model, runs it (one deepool-executor process per rank, Gloo on
// loopback; --rounds times, the plans in turn, the median of the runs counting, each run's figure
// the slowest rank's mean iteration) and compares. The links are
// calibrated three times: with every rank doing about --calibration-busy-ms of the same work
// before each timed all-reduce and the sender alone before each message, as ranks do in
// training (collective_timing.h), each size's runs counted by their
// trimmed mean (the prediction; deepool-calibrate's defaults), and, printed beside it, the same
// with medians and back to back. Beside those it prints what the model
// predicted before calibration and overhead (the cpu-N preset's link, no overhead). Output: a
// Markdown table, the median and worst error, and whether the predicted order of plans matches the
// measured order for plans more than 20% apart.
//   build-*/bin/deepool-bench-prediction [--models mlp,small_cnn,resnet50,inception_v3]
//       [--ranks 2] [--iterations 6] [--rounds 3] [--calibration-busy-ms 5] [--keep DIR]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/runtime/runtime_bench_util.h"
#include "common/subprocess.h"
#include "planner/branch_packing.h"
#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/profile_table.h"
#include "planner/search.h"
#include "planner/zoo/zoo.h"
#include "worker/runtime/profiling/profiler.h"
#include "worker/runtime/run_spec.h"

namespace dw = deepool::worker;
namespace dp = deepool::planner;
namespace fs = std::filesystem;

namespace {

struct ModelCase {
  std::string model;
  int64_t image_size = 0;  // 0: the model's default
  int64_t batch = 0;       // global
  bool aux_logits = true;  // inception_v3
};

struct Options {
  std::vector<std::string> models{"mlp", "small_cnn", "resnet50", "inception_v3"};
  std::vector<int> ranks{2};
  int iterations = 6;
  int warmup = 2;
  int rounds = 3;  // each plan is run once per round, the plans in turn
  std::vector<double> limits{1.1, 1.3, 1.6, 0};  // 0: no limit
  double calibration_busy_ms = 5;
  std::string dir;
};

// The image sizes and batches: reduced so a CPU rank trains an iteration in about a second at
// most; the small models at two batches.
std::vector<ModelCase> CasesFor(const std::string& model) {
  if (model == "mlp") return {{model, 0, 64}, {model, 0, 512}};
  if (model == "small_cnn") return {{model, 0, 32}, {model, 0, 128}};
  if (model == "resnet50") return {{model, 32, 16}};
  if (model == "inception_v3") return {{model, 75, 8, false}};  // 75 needs no aux classifier
  return {{model, 0, 32}};
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "deepool-bench-prediction: %s\n", what.c_str());
  std::exit(1);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) Die("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs a sibling tool to completion; its output goes to DIR/tools.log.
void RunTool(const std::string& tool, std::vector<std::string> args, const std::string& dir) {
  deepool::ProcessSpec spec;
  spec.executable = deepool::SiblingExecutable(tool);
  spec.args = std::move(args);
  spec.stdout_to = deepool::ProcessOutput::AppendTo(dir + "/tools.log");
  spec.stderr_to = deepool::ProcessOutput::AppendTo(dir + "/tools.log");
  auto child = deepool::ChildProcess::Start(spec);
  if (!child.ok()) Die(child.status().ToString());
  const deepool::ProcessExit exit = (*child)->Wait();
  if (!exit.ok()) Die(tool + " " + exit.Describe() + " (see " + dir + "/tools.log)");
}

// Every per-device batch a layer can get on 1..max_ranks devices.
std::string Shares(int64_t batch, int max_ranks) {
  std::set<int64_t> shares;
  for (int g = 1; g <= max_ranks; ++g) shares.insert(dp::LargestShare(batch, g));
  std::string list;
  for (int64_t s : shares) list += (list.empty() ? "" : ",") + std::to_string(s);
  return list;
}

// The mean over iterations >= warmup of each rank's iteration time, the slowest rank's: what a
// run pays per iteration. Not the per-iteration maximum over the ranks: a rank that waits for
// another measures its iterations from other moments (one idle rank timed 11.3 and 4.5 ms for
// two iterations its busy peer timed 8.6 and 7.4), so per-iteration maxima overstate the time.
double MeasureMs(const dw::RunSpec& spec, const Options& options) {
  std::map<int, std::pair<double, int>> by_rank;  // the sum and count of its iteration times
  const deepool::Status status = deepool::bench::RunExecutorRanks(
      spec, options.dir + "/run.json", 600,
      [&](int rank, const deepool::protocol::ExecutorEvent& e) {
        const auto* event = std::get_if<deepool::protocol::IterationEvent>(&e);
        if (event == nullptr || event->iteration < options.warmup) return;
        by_rank[rank].first += event->iteration_ms;
        ++by_rank[rank].second;
      });
  if (!status.ok()) Die(status.ToString());
  double slowest = 0;
  for (const auto& [rank, sum] : by_rank) slowest = std::max(slowest, sum.first / sum.second);
  return slowest;
}

struct Row {
  std::string model;
  int64_t batch = 0;
  int ranks = 0;
  std::string plan;
  double predicted_ms = 0;
  std::vector<double> alternative_ms;  // with each of the alternative calibrations
  double uncalibrated_ms = 0;  // the cpu-N preset's link, no iteration overhead
  double measured_ms = 0;
  bool split_batch_norm = false;  // a batch norm layer on several devices (blocking all-reduces)
  double error() const { return predicted_ms / measured_ms - 1; }
};

bool SplitsBatchNorm(const dp::Graph& graph, const std::vector<dp::DeviceRange>& ranges) {
  for (int id = 0; id < graph.num_layers(); ++id) {
    if (graph.layer(id).op == dp::Op::kBatchNorm2d && ranges[static_cast<size_t>(id)].count > 1) {
      return true;
    }
  }
  return false;
}

struct PlanChoice {
  std::string label;
  std::vector<dp::DeviceRange> ranges;
};

// Data parallel but the classifier on one device: the layers after the last one with a spatial
// output (a [C, H, W] shape), or the last layer when there is none.
std::vector<int> TailOnOneDevice(const dp::Graph& graph, int ranks) {
  std::vector<int> counts(static_cast<size_t>(graph.num_layers()), ranks);
  int first = graph.num_layers() - 1;
  for (int id = 0; id < graph.num_layers(); ++id) {
    if (graph.layer(id).output_shape.size() == 3) first = id + 1;
  }
  for (int id = std::min(first, graph.num_layers() - 1); id < graph.num_layers(); ++id) {
    counts[static_cast<size_t>(id)] = 1;
  }
  return counts;
}

// Every layer on one device but the branches of each branch block (dp::FindBranchBlocks), which
// go round the ranks one device each, heaviest first: concurrent branches, measured.
std::vector<dp::DeviceRange> BranchesSideBySide(const dp::Graph& graph, const dp::Profile& profile,
                                                int ranks) {
  std::vector<dp::DeviceRange> ranges(static_cast<size_t>(graph.num_layers()),
                                      dp::DeviceRange{0, 1});
  for (const dp::BranchBlock& block : dp::FindBranchBlocks(graph)) {
    std::vector<std::pair<double, size_t>> by_work;
    for (size_t b = 0; b < block.branches.size(); ++b) {
      double ms = 0;
      for (int id : block.branches[b]) {
        auto time = profile.Time(graph, id, 1);
        if (time.ok()) ms += time->total_ms();
      }
      by_work.emplace_back(-ms, b);
    }
    std::sort(by_work.begin(), by_work.end());
    for (size_t i = 0; i < by_work.size(); ++i) {
      for (int id : block.branches[by_work[i].second]) {
        ranges[static_cast<size_t>(id)] = dp::DeviceRange{static_cast<int>(i) % ranks, 1};
      }
    }
  }
  return ranges;
}

// One device, data parallel, the classifier on one device, one device with the branches side by
// side (when the graph has branch blocks), and the planner's plans at the limits; distinct
// layouts only.
std::vector<PlanChoice> Plans(const dp::Graph& graph, const dp::Profile& profile,
                              const dp::Cluster& cluster, int64_t batch, int ranks,
                              const Options& options) {
  const size_t layers = static_cast<size_t>(graph.num_layers());
  std::vector<PlanChoice> plans{
      {"one device", dp::PrefixRanges(std::vector<int>(layers, 1))},
      {"data parallel", dp::PrefixRanges(std::vector<int>(layers, ranks))},
      {"classifier on one device", dp::PrefixRanges(TailOnOneDevice(graph, ranks))}};
  if (!dp::FindBranchBlocks(graph).empty()) {
    plans.push_back(
        {"one device, branches side by side", BranchesSideBySide(graph, profile, ranks)});
  }
  for (double limit : options.limits) {
    dp::PlanOptions plan_options;
    plan_options.global_batch = batch;
    plan_options.devices = ranks;
    plan_options.amplification_limit = limit;
    auto plan = dp::PlanBurstParallel(graph, profile, cluster, plan_options);
    if (!plan.ok()) Die(plan.status().ToString());
    std::vector<dp::DeviceRange> ranges = dp::RangesOf(*plan);
    const bool seen = std::any_of(plans.begin(), plans.end(),
                                  [&](const PlanChoice& p) { return p.ranges == ranges; });
    if (seen) continue;
    char label[64];
    if (limit > 0) {
      std::snprintf(label, sizeof label, "planner, limit %.1f", limit);
    } else {
      std::snprintf(label, sizeof label, "planner, no limit");
    }
    plans.push_back({label, std::move(ranges)});
  }
  return plans;
}

double PredictMs(const dp::Graph& graph, const dp::Profile& profile, const dp::Cluster& cluster,
                 int64_t batch, const std::vector<dp::DeviceRange>& ranges, int ranks) {
  dp::CostModel model(graph, profile, cluster, batch);
  auto totals = model.Totals(ranges, ranks);
  if (!totals.ok()) Die(totals.status().ToString());
  return totals->iteration_ms;
}

// A calibration other than the one the predictions use, printed beside them.
struct AlternativeCluster {
  std::string label;
  std::string file_tag;                     // the cluster file is cluster-<ranks>-<tag>.json
  std::vector<std::string> calibrate_args;  // deepool-calibrate's, beyond --ranks and -o
  dp::Cluster cluster;
};

// `environment` receives what measured the model's profile (the last model's, in the end).
void RunModel(const ModelCase& c, int ranks, const dp::Cluster& calibrated,
              const std::vector<AlternativeCluster>& alternatives, const Options& options,
              std::vector<Row>* rows, dp::ProfileEnvironment* environment) {
  dp::zoo::ModelOptions model_options;
  model_options.num_classes = 10;
  model_options.image_size = c.image_size;
  model_options.aux_logits = c.aux_logits;
  auto graph = dp::zoo::BuildModel(c.model, model_options);
  if (!graph.ok()) Die(graph.status().ToString());
  const std::string profile_path = options.dir + "/" + c.model + "-" + std::to_string(c.batch) +
                                   "-" + std::to_string(ranks) + ".json";
  std::vector<std::string> args{
      "--model", c.model,         "--device", "cpu",           "--threads",
      "1",       "--num-classes", "10",       "--batch-sizes", Shares(c.batch, ranks),
      "-o",      profile_path, "--no-links"};  // the links are calibrated above
  if (c.image_size > 0) {
    args.insert(args.end(), {"--image-size", std::to_string(c.image_size)});
  }
  if (!c.aux_logits) args.push_back("--no-aux-logits");
  RunTool("deepool-profile", args, options.dir);
  const std::string text = ReadFile(profile_path);
  auto profile = dp::ParseProfile(text, *graph, {});
  if (!profile.ok()) Die(profile.status().ToString());
  auto data = dp::ParseProfileJson(text);
  if (!data.ok()) Die(data.status().ToString());
  *environment = data->environment;
  data->iteration_overhead.clear();
  auto bare = dp::TableProfile::Create(*data, *graph, {}, "no overhead");
  if (!bare.ok()) Die(bare.status().ToString());
  auto preset = dp::ClusterPreset("cpu-" + std::to_string(ranks));
  if (!preset.ok()) Die(preset.status().ToString());

  dw::RunSpec spec;
  spec.job_id = "bench-prediction";
  spec.graph = std::make_shared<const dp::Graph>(*graph);
  spec.iterations = options.warmup + options.iterations;
  spec.optimizer.momentum = 0.9;  // as the profiler's iteration overhead was measured
  const std::vector<PlanChoice> plans =
      Plans(*graph, **profile, calibrated, c.batch, ranks, options);
  std::vector<dw::RunSpec> specs;
  std::vector<Row> model_rows;
  for (const PlanChoice& choice : plans) {
    dp::CostModel model(*graph, **profile, calibrated, c.batch);
    auto plan = model.Evaluate(choice.ranges, ranks);
    if (!plan.ok()) Die(plan.status().ToString());
    spec.plan = *plan;
    Row row;
    row.model = c.model;
    row.batch = c.batch;
    row.ranks = ranks;
    row.plan = choice.label;
    row.predicted_ms = plan->totals.iteration_ms;
    for (const AlternativeCluster& alternative : alternatives) {
      row.alternative_ms.push_back(
          PredictMs(*graph, **profile, alternative.cluster, c.batch, choice.ranges, ranks));
    }
    row.uncalibrated_ms = PredictMs(*graph, **bare, *preset, c.batch, choice.ranges, ranks);
    row.split_batch_norm = SplitsBatchNorm(*graph, choice.ranges);
    specs.push_back(spec);
    model_rows.push_back(row);
  }
  // The plans in turn, round after round, so that a slow spell of the machine falls on every plan
  // about alike; each plan's figure is the median of its rounds.
  std::vector<std::vector<double>> rounds(plans.size());
  for (int round = 0; round < options.rounds; ++round) {
    for (size_t i = 0; i < plans.size(); ++i) rounds[i].push_back(MeasureMs(specs[i], options));
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    Row& row = model_rows[i];
    row.measured_ms = dw::Median(rounds[i]);
    std::fprintf(stderr, "%s batch %lld, %d ranks, %s: predicted %.2f ms, measured %.2f ms\n",
                 c.model.c_str(), static_cast<long long>(c.batch), ranks, row.plan.c_str(),
                 row.predicted_ms, row.measured_ms);
    rows->push_back(row);
  }
}

// Pairs of plans of one (model, batch, ranks) whose measured times differ by more than 20%:
// how many the prediction orders the same way.
std::pair<int, int> OrderedPairs(const std::vector<Row>& rows) {
  int right = 0, total = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = i + 1; j < rows.size(); ++j) {
      const Row& a = rows[i];
      const Row& b = rows[j];
      if (a.model != b.model || a.batch != b.batch || a.ranks != b.ranks) continue;
      const double ratio =
          std::max(a.measured_ms, b.measured_ms) / std::min(a.measured_ms, b.measured_ms);
      if (ratio <= 1.2) continue;
      ++total;
      if ((a.measured_ms < b.measured_ms) == (a.predicted_ms < b.predicted_ms)) ++right;
    }
  }
  return {right, total};
}

void Report(const std::vector<Row>& rows, const std::vector<std::string>& alternatives) {
  std::printf("| model | batch | ranks | plan | predicted ms | measured ms | error |");
  for (const std::string& label : alternatives) std::printf(" calibrated %s |", label.c_str());
  std::printf(" before (preset link, no overhead) |\n|---|---|---|---|---|---|---|");
  for (size_t i = 0; i < alternatives.size(); ++i) std::printf("---|");
  std::printf("---|\n");
  std::vector<double> errors, before, with_bn, without_bn;
  std::vector<std::vector<double>> alternative_errors(alternatives.size());
  auto cell = [](double predicted, double measured) {
    std::printf(" %.2f (%+.0f%%) |", predicted, 100 * (predicted / measured - 1));
  };
  for (const Row& r : rows) {
    (r.split_batch_norm ? with_bn : without_bn).push_back(std::fabs(r.error()));
    std::printf("| %s | %lld | %d | %s | %.2f | %.2f | %+.0f%% |", r.model.c_str(),
                static_cast<long long>(r.batch), r.ranks, r.plan.c_str(), r.predicted_ms,
                r.measured_ms, 100 * r.error());
    for (size_t i = 0; i < alternatives.size(); ++i) {
      cell(r.alternative_ms[i], r.measured_ms);
      alternative_errors[i].push_back(std::fabs(r.alternative_ms[i] / r.measured_ms - 1));
    }
    cell(r.uncalibrated_ms, r.measured_ms);
    std::printf("\n");
    errors.push_back(std::fabs(r.error()));
    before.push_back(std::fabs(r.uncalibrated_ms / r.measured_ms - 1));
  }
  const auto [right, total] = OrderedPairs(rows);
  std::printf(
      "\n%zu plans: |error| median %.1f%%, worst %.1f%% (before: median %.1f%%, worst %.1f%%); "
      "ordering right for %d of %d pairs of plans more than 20%% apart\n",
      rows.size(), 100 * dw::Median(errors), 100 * *std::max_element(errors.begin(), errors.end()),
      100 * dw::Median(before), 100 * *std::max_element(before.begin(), before.end()), right,
      total);
  for (size_t i = 0; i < alternatives.size(); ++i) {
    const std::vector<double>& e = alternative_errors[i];
    std::printf("calibrated %s instead: |error| median %.1f%%, worst %.1f%%\n",
                alternatives[i].c_str(), 100 * dw::Median(e),
                100 * *std::max_element(e.begin(), e.end()));
  }
  auto median_of = [](const std::vector<double>& errors) {
    if (errors.empty()) return std::string("-");  // a median of nothing
    char text[32];
    std::snprintf(text, sizeof text, "%.1f%%", 100 * dw::Median(errors));
    return std::string(text);
  };
  std::printf(
      "|error| median %s over the %zu plans with batch norm on several devices, %s over the other "
      "%zu; %zu of %zu predictions are below the measurement\n",
      median_of(with_bn).c_str(), with_bn.size(), median_of(without_bn).c_str(), without_bn.size(),
      static_cast<size_t>(std::count_if(
          rows.begin(), rows.end(), [](const Row& r) { return r.predicted_ms < r.measured_ms; })),
      rows.size());
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  std::string keep;
  CLI::App app{
      "Predicted vs measured iteration times of plans on CPU ranks: calibrates this host's "
      "links, profiles each model, plans, runs every plan with deepool-executor processes"};
  app.add_option("--models", options.models, "zoo models (reduced image sizes)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--ranks", options.ranks, "rank counts")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--iterations", options.iterations, "measured iterations per plan")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--rounds", options.rounds,
                 "runs of each plan, the plans in turn (the median counts)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--calibration-busy-ms", options.calibration_busy_ms,
                 "ranks do about this long of the same work before each timed collective of "
                 "the calibration, as in training")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option("--keep", keep, "keep profiles, cluster files and the tools' log in this folder");
  CLI11_PARSE(app, argc, argv);
  setenv("OMP_NUM_THREADS", "1", 1);  // one intra-op thread per rank process
  if (keep.empty()) {
    std::string pattern = (fs::temp_directory_path() / "deepool-bench-XXXXXX").string();
    if (!mkdtemp(pattern.data())) Die("cannot make a temporary folder");
    options.dir = pattern;
  } else {
    fs::create_directories(keep);
    options.dir = keep;
  }
  std::vector<Row> rows;
  std::vector<std::string> alternative_labels;
  dp::ProfileEnvironment environment;
  for (int ranks : options.ranks) {
    const std::string cluster_path = options.dir + "/cluster-" + std::to_string(ranks) + ".json";
    RunTool("deepool-calibrate",
            {"--ranks", std::to_string(ranks), "--busy-ms",
             std::to_string(options.calibration_busy_ms), "-o", cluster_path},
            options.dir);
    auto cluster = dp::ParseClusterJson(ReadFile(cluster_path));
    if (!cluster.ok()) Die(cluster.status().ToString());
    std::vector<AlternativeCluster> alternatives{
        {"with medians",
         "median",
         {"--busy-ms", std::to_string(options.calibration_busy_ms), "--statistic", "median"},
         {}},
        {"back to back", "back-to-back", {"--busy-ms", "0"}, {}}};
    alternative_labels.clear();
    for (AlternativeCluster& alternative : alternatives) {
      const std::string path =
          options.dir + "/cluster-" + std::to_string(ranks) + "-" + alternative.file_tag + ".json";
      std::vector<std::string> args{"--ranks", std::to_string(ranks), "-o", path};
      args.insert(args.end(), alternative.calibrate_args.begin(), alternative.calibrate_args.end());
      RunTool("deepool-calibrate", args, options.dir);
      auto parsed = dp::ParseClusterJson(ReadFile(path));
      if (!parsed.ok()) Die(parsed.status().ToString());
      alternative.cluster = *parsed;
      alternative_labels.push_back(alternative.label);
    }
    for (const std::string& model : options.models) {
      for (const ModelCase& c : CasesFor(model)) {
        RunModel(c, ranks, *cluster, alternatives, options, &rows, &environment);
      }
    }
  }
  Report(rows, alternative_labels);
  // What ran, so a result can be traced to its machine and code (docs/benchmarks.md).
  std::printf("measured on %s\n", dp::EnvironmentSummary(environment).c_str());
  if (keep.empty()) fs::remove_all(options.dir);
  return 0;
}
