// Validates an analytical device preset against measured reference profiles.
//
//   deepool-bench-profile-validation [--device a100] [--fit] [--fit-models N] [--skip-ops OPS]
//       [--batches 64,16,1] vgg16=PATH/A100_vgg.prof [wide_resnet101_2=PATH/A100_wrn.prof ...]
//
// A profile is DeepPool's .prof text (the A100 reference files) or a deepool.profile JSON file
// (`deepool profile`'s output, e.g. docs/results/profiles-h200-2026-11-28/), named by extension.
// For the first model it prints a per-layer table (measured vs predicted forward and backward
// at the chosen batches) and, for every model, the whole-model error at every measured batch
// (sum over the layers the file times). --fit searches a grid of the preset's five global
// factors (compute efficiency, memory efficiency, launch cost, GEMM half depth, GEMM half
// outputs) for the least mean absolute log error over the layers of the first N models
// (--fit-models, default 1; the others are out-of-sample checks), and reports the result beside
// the preset's own. --skip-ops leaves ops out of the fit and every table.
// Output is Markdown for docs/benchmarks.md.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "planner/a100_import.h"
#include "planner/device_model.h"
#include "planner/profile_table.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

struct ModelCase {
  std::string model;
  std::string path;
  Graph graph;
  ProfileData data;                           // the measured layers, named by graph layer
  std::vector<std::string> unmatched_layers;  // graph layers the file does not time
  std::set<std::string> skipped_ops;          // left out of every comparison (--skip-ops)
};

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A deepool.profile JSON file's layers must all be the graph's (it was measured on that model).
StatusOr<ModelCase> LoadJsonCase(ModelCase c, const std::string& text) {
  ASSIGN_OR_RETURN(c.data, ParseProfileJson(text));
  std::vector<bool> timed(static_cast<size_t>(c.graph.num_layers()), false);
  for (const LayerProfileData& layer : c.data.layers) {
    const std::optional<int> id = c.graph.FindLayer(layer.name);
    if (!id) {
      return InvalidArgumentError(c.path + ": layer '" + layer.name + "' is not in model " +
                                  c.model + " at its default options");
    }
    timed[static_cast<size_t>(*id)] = true;
  }
  for (int id = 0; id < c.graph.num_layers(); ++id) {
    if (!timed[static_cast<size_t>(id)]) c.unmatched_layers.push_back(c.graph.layer(id).name);
  }
  return c;
}

StatusOr<ModelCase> LoadCase(const std::string& model, const std::string& path) {
  std::ifstream file(path);
  if (!file) return NotFoundError("cannot read " + path);
  std::stringstream text;
  text << file.rdbuf();
  ASSIGN_OR_RETURN(Graph graph, zoo::BuildModel(model));
  ModelCase c{model, path, std::move(graph), {}, {}, {}};
  if (EndsWith(path, ".json")) return LoadJsonCase(std::move(c), text.str());
  ASSIGN_OR_RETURN(A100Import imported, ImportA100Profile(text.str(), c.graph));
  c.data = std::move(imported.data);
  c.unmatched_layers = std::move(imported.unmatched_layers);
  return c;
}

struct Sample {
  int layer_id;
  int64_t batch;
  BatchTime measured;
};

std::vector<Sample> Samples(const ModelCase& c) {
  std::vector<Sample> samples;
  for (const LayerProfileData& layer : c.data.layers) {
    const int id = *c.graph.FindLayer(layer.name);
    if (c.skipped_ops.count(OpName(c.graph.layer(id).op)) != 0) continue;
    for (const BatchTime& point : layer.batches) samples.push_back({id, point.batch, point});
  }
  return samples;
}

// Sum and count of |log(predicted / measured)| over forward and backward times of at least
// 5 us (smaller ones are timer noise in the files).
std::pair<double, int> AbsLogErrors(const DeviceModel& device, const ModelCase& c,
                                    const std::vector<Sample>& samples) {
  double sum = 0;
  int count = 0;
  for (const Sample& s : samples) {
    LayerTime predicted = RooflineTime(device, EstimateLayerWork(c.graph, s.layer_id, s.batch));
    const double pairs[2][2] = {{predicted.forward_ms, s.measured.forward_ms},
                                {predicted.backward_ms, s.measured.backward_ms}};
    for (const auto& pair : pairs) {
      if (pair[1] < 0.005) continue;
      sum += std::fabs(std::log(pair[0] / pair[1]));
      ++count;
    }
  }
  return {sum, count};
}

// The mean over every time compared of the given models (each with its samples).
double MeanAbsLogError(const DeviceModel& device, const std::vector<const ModelCase*>& cases,
                       const std::vector<std::vector<Sample>>& samples) {
  double sum = 0;
  int count = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto [case_sum, case_count] = AbsLogErrors(device, *cases[i], samples[i]);
    sum += case_sum;
    count += case_count;
  }
  return count ? sum / count : 0;
}

// Whole-model (matched layers) predicted and measured time per batch.
std::map<int64_t, std::pair<double, double>> ModelTotals(const DeviceModel& device,
                                                         const ModelCase& c) {
  std::map<int64_t, std::pair<double, double>> totals;
  for (const Sample& s : Samples(c)) {
    LayerTime predicted = RooflineTime(device, EstimateLayerWork(c.graph, s.layer_id, s.batch));
    totals[s.batch].first += predicted.total_ms();
    totals[s.batch].second += s.measured.forward_ms + s.measured.backward_ms;
  }
  return totals;
}

double Percent(double predicted, double measured) {
  return measured > 0 ? 100.0 * (predicted - measured) / measured : 0.0;
}

// "0.87" (predicted / measured), or "-" where nothing was measured.
std::string Ratio(double predicted, double measured) {
  if (measured <= 0) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", predicted / measured);
  return text;
}

DeviceModel Fit(const DeviceModel& start, const std::vector<const ModelCase*>& cases) {
  std::vector<std::vector<Sample>> samples;
  for (const ModelCase* c : cases) samples.push_back(Samples(*c));
  DeviceModel best = start;
  double best_error = MeanAbsLogError(start, cases, samples);
  for (double half_outputs : {0.0, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7}) {
    for (double half_depth : {0.0, 250.0, 500.0, 750.0, 1000.0, 1500.0, 2000.0}) {
      for (double compute = 0.10; compute <= 1.0001; compute += 0.02) {
        for (double memory = 0.50; memory <= 1.0001; memory += 0.05) {
          for (double launch = 0; launch <= 20.0001; launch += 1.0) {
            DeviceModel trial = start;
            trial.compute_efficiency = compute;
            trial.memory_efficiency = memory;
            trial.launch_us = launch;
            trial.gemm_half_depth = half_depth;
            trial.gemm_half_outputs = half_outputs;
            const double error = MeanAbsLogError(trial, cases, samples);
            if (error < best_error) {
              best_error = error;
              best = trial;
            }
          }
        }
      }
    }
  }
  return best;
}

void PrintFactors(const char* label, const DeviceModel& device,
                  const std::vector<const ModelCase*>& cases) {
  std::vector<std::vector<Sample>> samples;
  for (const ModelCase* c : cases) samples.push_back(Samples(*c));
  std::printf("| %s | %.2f | %.2f | %.1f | %.0f | %.0f | %.3f |\n", label,
              device.compute_efficiency, device.memory_efficiency, device.launch_us,
              device.gemm_half_depth, device.gemm_half_outputs,
              MeanAbsLogError(device, cases, samples));
}

void PrintLayerTable(const DeviceModel& device, const ModelCase& c, int64_t batch) {
  std::printf("\nPer layer, %s at per-device batch %lld (ms; ratio = predicted / measured):\n\n",
              c.model.c_str(), static_cast<long long>(batch));
  std::printf(
      "| layer | op | measured fw | predicted fw | ratio fw | measured bw | predicted bw "
      "| ratio bw |\n|---|---|---|---|---|---|---|---|\n");
  double measured_sum = 0, predicted_sum = 0;
  for (const LayerProfileData& layer : c.data.layers) {
    const BatchTime* point = nullptr;
    for (const BatchTime& p : layer.batches) {
      if (p.batch == batch) point = &p;
    }
    const int id = *c.graph.FindLayer(layer.name);
    if (point == nullptr || c.skipped_ops.count(OpName(c.graph.layer(id).op)) != 0) continue;
    LayerTime predicted = RooflineTime(device, EstimateLayerWork(c.graph, id, batch));
    measured_sum += point->forward_ms + point->backward_ms;
    predicted_sum += predicted.total_ms();
    std::printf("| %s | %s | %.3f | %.3f | %s | %.3f | %.3f | %s |\n", layer.name.c_str(),
                layer.op.c_str(), point->forward_ms, predicted.forward_ms,
                Ratio(predicted.forward_ms, point->forward_ms).c_str(), point->backward_ms,
                predicted.backward_ms, Ratio(predicted.backward_ms, point->backward_ms).c_str());
  }
  std::printf("| **total fw+bw** | | %.3f | %.3f | **%s** | | | |\n", measured_sum, predicted_sum,
              Ratio(predicted_sum, measured_sum).c_str());
}

// Per op, over every layer and batch: geometric mean and range of predicted / measured (times of
// at least 5 us), and the op's share of the measured time.
void PrintPerOpSummary(const DeviceModel& device, const ModelCase& c) {
  struct Stats {
    double log_sum = 0, min = 1e300, max = 0, measured_ms = 0;
    int count = 0;
  };
  std::map<std::string, Stats> by_op;
  double measured_total = 0;
  for (const Sample& s : Samples(c)) {
    const std::string op = OpName(c.graph.layer(s.layer_id).op);
    LayerTime predicted = RooflineTime(device, EstimateLayerWork(c.graph, s.layer_id, s.batch));
    Stats& stats = by_op[op];
    const double measured_pair[2] = {s.measured.forward_ms, s.measured.backward_ms};
    const double predicted_pair[2] = {predicted.forward_ms, predicted.backward_ms};
    for (int i = 0; i < 2; ++i) {
      stats.measured_ms += measured_pair[i];
      measured_total += measured_pair[i];
      if (measured_pair[i] < 0.005) continue;
      const double ratio = predicted_pair[i] / measured_pair[i];
      stats.log_sum += std::log(ratio);
      stats.min = std::min(stats.min, ratio);
      stats.max = std::max(stats.max, ratio);
      ++stats.count;
    }
  }
  std::printf("\nPer op, %s, all batches, forward and backward (times >= 5 us):\n\n",
              c.model.c_str());
  std::printf(
      "| op | share of measured time | times compared | geometric mean predicted / measured "
      "| range |\n|---|---|---|---|---|\n");
  for (const auto& [op, stats] : by_op) {
    if (stats.count == 0) continue;
    std::printf("| %s | %.1f%% | %d | %.2f | %.2f - %.2f |\n", op.c_str(),
                100.0 * stats.measured_ms / measured_total, stats.count,
                std::exp(stats.log_sum / stats.count), stats.min, stats.max);
  }
}

void PrintModelTotals(const DeviceModel& device, const ModelCase& c) {
  std::printf("\nWhole model, %s (%zu of %d layers timed by the file; unmatched: %zu):\n\n",
              c.model.c_str(), c.data.layers.size(), c.graph.num_layers(),
              c.unmatched_layers.size());
  std::printf(
      "| batch | measured ms | predicted ms | predicted / measured | error |\n"
      "|---|---|---|---|---|\n");
  double abs_sum = 0;
  int count = 0;
  for (const auto& [batch, total] : ModelTotals(device, c)) {
    std::printf("| %lld | %.3f | %.3f | %s | %+.1f%% |\n", static_cast<long long>(batch),
                total.second, total.first, Ratio(total.first, total.second).c_str(),
                Percent(total.first, total.second));
    abs_sum += std::fabs(Percent(total.first, total.second));
    ++count;
  }
  std::printf("| mean abs error | | | | %.1f%% |\n", count ? abs_sum / count : 0.0);
}

int Run(int argc, char** argv) {
  std::string device_name = "a100";
  bool fit = false;
  std::vector<std::string> model_files;
  size_t fit_models = 1;
  CLI::App app{
      "The analytical device model against measured per-layer profiles: per-op and per-layer "
      "errors, model totals, and with --fit the best global factors on a grid"};
  app.add_option("--device", device_name, "device preset to validate")->capture_default_str();
  app.add_flag("--fit", fit, "also search the preset's global factors on a grid");
  app.add_option("--fit-models", fit_models,
                 "fit on the first N profiles together (the rest are out-of-sample checks)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // One token, split here: a vector option would also take the profiles after it for batches.
  std::string batch_list = "64,8,1";
  std::string skip_list;
  app.add_option("--skip-ops", skip_list,
                 "ops left out of the fit and every table, comma-separated (e.g. dropout, where a "
                 "profile timed something other than the op's kernels)");
  app.add_option("--batches", batch_list, "batch sizes of the per-layer tables, comma-separated")
      ->capture_default_str();
  app.add_option("profiles", model_files,
                 "MODEL=FILE, one or more: DeepPool's .prof text or a deepool.profile .json "
                 "(the first is the one tabled per layer)")
      ->required();
  CLI11_PARSE(app, argc, argv);
  std::vector<int64_t> batches;
  std::stringstream batch_items(batch_list);
  for (std::string item; std::getline(batch_items, item, ',');) {
    char* end = nullptr;
    const long long batch = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || batch < 1) {
      std::cerr << "--batches: expected positive integers separated by commas, got '" << batch_list
                << "'\n";
      return 2;
    }
    batches.push_back(batch);
  }
  std::set<std::string> skipped_ops;
  std::stringstream skip_items(skip_list);
  for (std::string op; std::getline(skip_items, op, ',');) {
    if (op.empty()) continue;
    if (!OpFromName(op)) {
      std::cerr << "--skip-ops: unknown op '" << op << "' (ops as `deepool model show` names them, "
                << "e.g. dropout)\n";
      return 2;
    }
    skipped_ops.insert(op);
  }
  std::vector<ModelCase> cases;
  for (const std::string& arg : model_files) {
    const size_t equals = arg.find('=');
    if (equals == std::string::npos) {
      std::cerr << "expected MODEL=FILE, got '" << arg << "'\n";
      return 2;
    }
    StatusOr<ModelCase> loaded = LoadCase(arg.substr(0, equals), arg.substr(equals + 1));
    if (!loaded.ok()) {
      std::cerr << loaded.status() << "\n";
      return 2;
    }
    loaded->skipped_ops = skipped_ops;
    cases.push_back(std::move(loaded).value());
  }
  if (fit_models > cases.size()) {
    std::cerr << "--fit-models " << fit_models << " exceeds the " << cases.size()
              << " profiles given\n";
    return 2;
  }
  std::vector<const ModelCase*> fitted;
  std::string fitted_names;
  for (size_t i = 0; i < fit_models; ++i) {
    fitted.push_back(&cases[i]);
    fitted_names += (i ? ", " : "") + cases[i].model;
  }
  auto device = DevicePreset(device_name);
  if (!device.ok()) {
    std::cerr << device.status() << "\n";
    return 2;
  }
  std::printf(
      "Device preset `%s`: peak %.1f TFLOPS, %.0f GB/s, compute efficiency %.2f, memory "
      "efficiency %.2f, launch %.1f us, GEMM half depth %.0f, GEMM half outputs %.0f.\n",
      device->name.c_str(), device->peak_tflops, device->memory_bandwidth_gbps,
      device->compute_efficiency, device->memory_efficiency, device->launch_us,
      device->gemm_half_depth, device->gemm_half_outputs);
  if (!skipped_ops.empty()) {
    std::printf("Left out of every comparison (--skip-ops): %s.\n", skip_list.c_str());
  }
  if (fit) {
    std::printf(
        "\nGlobal factors (mean |ln(predicted/measured)| over the fw and bw times >= 5 us of "
        "%s, all batches):\n\n| factors | compute eff | memory eff | launch us | "
        "GEMM half depth | GEMM half outputs | mean abs log error "
        "|\n|---|---|---|---|---|---|---|\n",
        fitted_names.c_str());
    PrintFactors("preset", *device, fitted);
    PrintFactors("best on grid", Fit(*device, fitted), fitted);
  }
  PrintPerOpSummary(*device, cases[0]);
  for (int64_t batch : batches) PrintLayerTable(*device, cases[0], batch);
  for (const ModelCase& c : cases) PrintModelTotals(*device, c);
  return 0;
}

}  // namespace
}  // namespace deepool::planner

int main(int argc, char** argv) { return deepool::planner::Run(argc, argv); }
