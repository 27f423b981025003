// `deepool workload simulate` (workload_simulate.h).
#include "cli/workload_simulate.h"

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/command_support.h"
#include "planner/speedup_curve_cache.h"
#include "simulator/pool_configurations.h"
#include "simulator/pool_curves.h"
#include "simulator/pool_metrics.h"
#include "simulator/workload_file.h"

namespace deepool::cli {
namespace {

namespace sim = deepool::simulator;

struct SimulateFlags {
  std::string trace;
  std::vector<std::string> policies = {"all"};
  int devices = 0;  // 0: the trace's
  std::vector<std::string> device_types = {"a100", "h100", "v100"};
  sim::PoolOptions pool;
};

StatusOr<std::vector<sim::PoolConfiguration>> Configurations(
    const std::vector<std::string>& names) {
  std::vector<sim::PoolConfiguration> configurations;
  for (const std::string& name : names) {
    if (name == "all") {
      const auto& all = sim::PoolConfigurations();
      configurations.insert(configurations.end(), all.begin(), all.end());
      continue;
    }
    StatusOr<sim::PoolConfiguration> found = sim::FindPoolConfiguration(name);
    if (!found.ok()) return found.status().WithContext("--policy");
    configurations.push_back(std::move(*found));
  }
  return configurations;
}

std::string Pool(const std::vector<sim::PoolDeviceType>& pool) {
  std::string text;
  for (const sim::PoolDeviceType& type : pool) {
    text += (text.empty() ? "" : ", ") + std::to_string(type.devices) + " " + type.name;
  }
  return text;
}

std::vector<std::string> MetricsRow(const std::string& name, const sim::PoolMetrics& m) {
  return {name,
          Fixed(m.mean_jct_s / 3600, 2),
          Fixed(m.p99_jct_s / 3600, 1),
          Fixed(m.mean_wait_s / 3600, 2),
          Fixed(m.fg_mean_slowdown, 2),
          Fixed(m.makespan_s / 3600, 1),
          Fixed(m.window_allocated_utilisation, 2),
          Fixed(m.window_busy_utilisation, 2),
          Fixed(m.window_samples_per_s, 0),
          std::to_string(m.moves),
          std::to_string(m.preemptions)};
}

int RunSimulate(const SimulateFlags& flags) {
  StatusOr<std::vector<sim::PoolConfiguration>> configurations = Configurations(flags.policies);
  if (!configurations.ok()) return Fail(configurations.status());
  StatusOr<std::string> text = ReadTextFile(flags.trace);
  if (!text.ok()) return Fail(text.status());
  StatusOr<sim::Workload> workload = sim::ParseWorkload(*text);
  if (!workload.ok()) return Fail(workload.status().WithContext(flags.trace));
  const int devices = flags.devices > 0 ? flags.devices : workload->header.devices;
  if (devices < 1) {
    return Fail(InvalidArgumentError("--devices: the trace names no pool size; give one"));
  }
  sim::PoolCurveOptions curve_options;
  curve_options.device_types = flags.device_types;
  planner::SpeedupCurveCache cache(256);
  StatusOr<std::vector<sim::PoolJobInput>> inputs =
      sim::PlanPoolInputs(*workload, curve_options, cache);
  if (!inputs.ok()) return Fail(inputs.status().WithContext(flags.trace));
  sim::PoolOptions options = flags.pool;
  options.device_types = sim::EvenPool(flags.device_types, devices);

  std::vector<std::vector<std::string>> rows = {
      {"CONFIGURATION", "MEAN JCT (h)", "P99 JCT (h)", "MEAN WAIT (h)", "FG SLOWDOWN",
       "MAKESPAN (h)", "ALLOC UTIL", "BUSY UTIL", "SAMPLES/S", "MOVES", "PREEMPTIONS"}};
  for (const sim::PoolConfiguration& configuration : *configurations) {
    StatusOr<std::unique_ptr<sim::PoolPolicy>> policy =
        sim::MakePoolPolicy(configuration, options.device_types);
    if (!policy.ok()) return Fail(policy.status());
    StatusOr<sim::PoolRun> run = sim::SimulatePool(*inputs, options, **policy);
    if (!run.ok()) return Fail(run.status());
    rows.push_back(MetricsRow(configuration.name, sim::ComputePoolMetrics(*run)));
  }
  std::cout << workload->jobs.size() << " jobs on " << devices << " devices ("
            << Pool(options.device_types)
            << "); modelled: analytical device models, checkpoint restore "
            << Fixed(options.checkpoint_restore_s, 0) << " s, round " << Fixed(options.round_s, 0)
            << " s\n";
  PrintTable(rows, std::cout);
  std::cout << "utilisation and samples/s are over the arrival window (while jobs arrive)\n";
  return kExitOk;
}

}  // namespace

void AddWorkloadSimulate(CLI::App* workload, CommandResult& result) {
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* simulate = workload->add_subcommand(
      "simulate",
      "Replay a trace on a pool under the coordinator's scheduling policies and print the "
      "metrics");
  simulate->add_option("--trace", flags->trace, "A deepool.workload file")->required();
  simulate
      ->add_option("--policy", flags->policies,
                   "Configurations, comma-separated: fifo-dp, static-partitions, max-min, "
                   "deeppool-bp-bg, deepool, or all; the ablations fifo-bp, fifo-dp-bg, "
                   "deepool-dp")
      ->delimiter(',')
      ->capture_default_str();
  simulate->add_option("--devices", flags->devices,
                       "Pool size, split evenly over --device-types (default: the trace's)");
  simulate->add_option("--device-types", flags->device_types, "The pool's device types")
      ->delimiter(',')
      ->capture_default_str();
  simulate->add_option("--round-s", flags->pool.round_s, "Seconds between scheduling rounds")
      ->capture_default_str();
  simulate
      ->add_option("--checkpoint-restore-s", flags->pool.checkpoint_restore_s,
                   "Seconds a moved or resumed job spends restoring (an assumption)")
      ->capture_default_str();
  simulate->footer(
      "Example:\n"
      "  deepool workload generate --jobs 640 --load 8 --devices 64 -o trace.jsonl\n"
      "  deepool workload simulate --trace trace.jsonl --policy fifo-dp,deepool");
  simulate->callback([&result, flags] { result.exit_code = RunSimulate(*flags); });
}

}  // namespace deepool::cli
