// The pool simulator's results (issue 44, point 5): scheduling configurations side by side on
// generated traces (Gavel-style, simulator/workload_generator.h) at several loads and pool sizes,
// each replayed by SimulatePool with the coordinator's own policies (PolicyAdapter). Prints a
// Markdown table for docs/benchmarks.md and writes SVG bar charts.
//
//   deepool-bench-pool [--devices 64,512,4096] [--loads 1,2,4] [--jobs-per-device 2.5]
//                      [--seed 1] [--svg-dir docs] [--configurations fifo-dp,deepool]
//                      [--min-growth-saving-s 72000] [--min-bg-idle 0.05] [--by-role]
//
// Configurations: simulator/pool_configurations.h (fifo-dp, static-partitions, max-min,
// deeppool-bp-bg, deepool).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/pool/pool_svg.h"
#include "simulator/pool_configurations.h"
#include "simulator/pool_curves.h"
#include "simulator/pool_metrics.h"
#include "simulator/workload_generator.h"

namespace deepool::simulator {
namespace {

struct Row {
  int devices = 0;
  double load = 0;
  int64_t jobs = 0;
  std::string configuration;
  std::string error;  // not run: why
  PoolMetrics metrics;
  double wall_s = 0;
  double cpu_s = 0;
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Row RunOne(const PoolConfiguration& configuration, const std::vector<PoolJobInput>& inputs,
           const PoolOptions& options, const coordinator::policy::PolicyOptions& policy_options) {
  Row row;
  row.configuration = configuration.name;
  StatusOr<std::unique_ptr<PoolPolicy>> policy =
      MakePoolPolicy(configuration, options.device_types, policy_options);
  if (!policy.ok()) {
    row.error = policy.status().message();
    return row;
  }
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = bench::ProcessCpuMs();
  StatusOr<PoolRun> run = SimulatePool(inputs, options, **policy);
  row.wall_s = SecondsSince(start);
  row.cpu_s = (bench::ProcessCpuMs() - cpu_start) / 1000;
  if (!run.ok()) {
    row.error = run.status().ToString();
    return row;
  }
  row.metrics = ComputePoolMetrics(*run);
  return row;
}

void PrintRow(const Row& row) {
  if (!row.error.empty()) {
    std::printf("| %d | %.1f | %lld | %s | not run: %s ||||||||||\n", row.devices, row.load,
                static_cast<long long>(row.jobs), row.configuration.c_str(), row.error.c_str());
    return;
  }
  const PoolMetrics& m = row.metrics;
  std::printf(
      "| %d | %.1f | %lld | %s | %.2f | %.1f | %.2f | %.2f | %.1f | %.2f | %.2f | %.0f | %lld | "
      "%lld | %.1f |\n",
      row.devices, row.load, static_cast<long long>(row.jobs), row.configuration.c_str(),
      m.mean_jct_s / 3600, m.p99_jct_s / 3600, m.mean_wait_s / 3600, m.fg_mean_slowdown,
      m.makespan_s / 3600, m.window_allocated_utilisation, m.window_busy_utilisation,
      m.window_samples_per_s, static_cast<long long>(m.moves),
      static_cast<long long>(m.preemptions), row.wall_s);
  std::fflush(stdout);
}

// The mean completion time of FG and BG jobs apart (--by-role), after the main table.
void PrintByRole(const std::vector<Row>& rows) {
  std::printf(
      "\n| devices | load | configuration | FG jobs | FG mean JCT (h) | BG jobs | BG mean JCT (h) "
      "|\n|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    if (!row.error.empty()) continue;
    const PoolMetrics& m = row.metrics;
    std::printf("| %d | %.1f | %s | %lld | %.2f | %lld | %.2f |\n", row.devices, row.load,
                row.configuration.c_str(), static_cast<long long>(m.fg_jobs),
                m.fg_mean_jct_s / 3600, static_cast<long long>(m.jobs - m.fg_jobs),
                m.bg_mean_jct_s / 3600);
  }
}

void WriteCharts(const std::vector<Row>& rows, const std::vector<PoolConfiguration>& configurations,
                 const std::string& dir) {
  std::vector<std::string> series;
  for (const PoolConfiguration& configuration : configurations) {
    series.push_back(configuration.name);
  }
  struct Chart {
    std::string file, title;
    double (*value)(const PoolMetrics&);
  };
  const std::vector<Chart> charts = {
      {"pool-mean-jct.svg", "Mean job completion time (relative to the worst per group)",
       [](const PoolMetrics& m) { return m.mean_jct_s; }},
      {"pool-throughput.svg",
       "Cluster throughput while jobs arrive, samples/s (relative to the best per group)",
       [](const PoolMetrics& m) { return m.window_samples_per_s; }},
      {"pool-busy-utilisation.svg", "Busy utilisation while jobs arrive (computing / devices)",
       [](const PoolMetrics& m) { return m.window_busy_utilisation; }},
  };
  for (const Chart& chart : charts) {
    std::vector<bench::BarGroup> groups;
    for (size_t i = 0; i < rows.size(); i += series.size()) {
      bench::BarGroup group;
      char label[64];
      std::snprintf(label, sizeof label, "%d dev, load %.1f", rows[i].devices, rows[i].load);
      group.label = label;
      for (size_t s = 0; s < series.size() && i + s < rows.size(); ++s) {
        const Row& row = rows[i + s];
        group.values.push_back(row.error.empty() ? chart.value(row.metrics) : -1);
      }
      groups.push_back(group);
    }
    const bool normalise = chart.file != "pool-busy-utilisation.svg";
    std::ofstream(dir + "/" + chart.file)
        << bench::BarChartSvg(chart.title, series, groups, normalise);
  }
}

int Main(int argc, char** argv) {
  CLI::App app("Pool simulation: scheduling configurations side by side on generated traces");
  std::vector<int> device_counts = {64, 512, 4096};
  std::vector<double> loads = {1, 2, 4};
  double jobs_per_device = 2.5;
  uint64_t seed = 1;
  std::string svg_dir;
  app.add_option("--devices", device_counts, "Pool sizes")->delimiter(',');
  app.add_option("--loads", loads, "Offered loads")->delimiter(',');
  app.add_option("--jobs-per-device", jobs_per_device, "Trace length per pool device");
  app.add_option("--seed", seed, "Trace seed");
  app.add_option("--svg-dir", svg_dir, "Where to write the SVG charts (none when empty)");
  std::vector<std::string> names;
  app.add_option("--configurations", names, "Only these configurations (default: all)")
      ->delimiter(',');
  coordinator::policy::PolicyOptions policy_options;
  app.add_option("--min-growth-saving-s", policy_options.min_growth_saving_s,
                 "deepool policy: seconds a running job's growth must save per added device")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--min-bg-idle", policy_options.min_bg_idle_fraction,
                 "every policy: the least predicted idle fraction of a FG rank a BG job runs in")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  bool by_role = false;
  app.add_flag("--by-role", by_role,
               "Also print the mean completion time of FG and BG jobs apart, after the table");
  CLI11_PARSE(app, argc, argv);

  std::vector<PoolConfiguration> configurations = PoolConfigurations();
  if (!names.empty()) {
    configurations.clear();
    for (const std::string& name : names) {
      configurations.push_back(bench::Check(FindPoolConfiguration(name)));
    }
  }
  planner::SpeedupCurveCache cache(256);
  std::vector<Row> rows;
  std::printf(
      "| devices | load | jobs | configuration | mean JCT (h) | p99 JCT (h) | mean wait (h) | "
      "FG slowdown | makespan (h) | alloc util | busy util | samples/s | moves | preemptions | "
      "sim wall (s) |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const int devices : device_counts) {
    for (const double load : loads) {
      WorkloadOptions workload_options;
      workload_options.seed = seed;
      workload_options.devices = devices;
      workload_options.load = load;
      workload_options.jobs = static_cast<int64_t>(jobs_per_device * devices);
      const Workload workload = bench::Check(GenerateWorkload(workload_options));
      PoolCurveOptions curve_options;
      const std::vector<PoolJobInput> inputs =
          bench::Check(PlanPoolInputs(workload, curve_options, cache));
      PoolOptions options;
      options.device_types = EvenPool(curve_options.device_types, devices);
      for (const PoolConfiguration& configuration : configurations) {
        Row row = RunOne(configuration, inputs, options, policy_options);
        row.devices = devices;
        row.load = load;
        row.jobs = workload_options.jobs;
        PrintRow(row);
        rows.push_back(std::move(row));
      }
    }
  }
  if (by_role) PrintByRole(rows);
  if (!svg_dir.empty()) WriteCharts(rows, configurations, svg_dir);
  return 0;
}

}  // namespace
}  // namespace deepool::simulator

int main(int argc, char** argv) { return deepool::simulator::Main(argc, argv); }
