// The simulator's configurations (simulator.h) over the engine (sim_engine.h).
#include "planner/simulator.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "planner/cost_model.h"
#include "planner/plan.h"
#include "planner/search.h"

namespace deepool::planner {
namespace {

Status CheckRequest(const SimRequest& request) {
  const SimFgJob& fg = request.fg;
  if (fg.graph == nullptr || fg.profile == nullptr) {
    return InvalidArgumentError("the FG job needs a graph and a profile");
  }
  if (fg.global_batch < 1) {
    return InvalidArgumentError("FG global batch must be >= 1, got " +
                                std::to_string(fg.global_batch));
  }
  if (fg.devices < 1) {
    return InvalidArgumentError("FG device count must be >= 1, got " + std::to_string(fg.devices));
  }
  for (size_t i = 0; i < request.bg.size(); ++i) {
    const SimBgJob& bg = request.bg[i];
    if (bg.graph == nullptr || bg.profile == nullptr) {
      return InvalidArgumentError("BG job " + std::to_string(i) + " needs a graph and a profile");
    }
    if (bg.batch < 1) {
      return InvalidArgumentError("BG job " + bg.graph->name() + ": batch must be >= 1, got " +
                                  std::to_string(bg.batch));
    }
  }
  for (int k : request.partitions) {
    if (k < 1 || k > fg.devices) {
      return InvalidArgumentError("static partition with " + std::to_string(k) +
                                  " FG devices is outside [1, " + std::to_string(fg.devices) + "]");
    }
  }
  return Status::Ok();
}

std::vector<int> DefaultPartitions(int devices) {
  std::vector<int> partitions;
  for (int k = 1; k < devices; k *= 2) partitions.push_back(k);
  partitions.push_back(devices);
  return partitions;
}

struct FgRun {
  Plan plan;
  FgTimeline timeline;
};

// Plans the FG job on `devices` devices, data- or burst-parallel, and builds its timeline.
StatusOr<FgRun> PlanFg(const SimRequest& request, int devices, bool burst) {
  const SimFgJob& fg = request.fg;
  const Cluster cluster = ResizeCluster(request.cluster, devices);
  PlanOptions options;
  options.global_batch = fg.global_batch;
  options.devices = devices;
  options.amplification_limit = fg.amplification_limit;
  options.pareto_tolerance = request.pareto_tolerance;
  options.concurrent_branches = request.concurrent_branches;
  options.gradient_sync = request.gradient_sync;
  options.sync_batch_norm = request.sync_batch_norm;
  FgRun run;
  ASSIGN_OR_RETURN(run.plan, burst ? PlanBurstParallel(*fg.graph, *fg.profile, cluster, options)
                                   : PlanDataParallel(*fg.graph, *fg.profile, cluster, options));
  // DP is the baseline a user would run (batch norm statistics per device, as DDP without
  // SyncBatchNorm: plan.data_parallel); BP is deepool's plan, exact unless the request keeps
  // statistics per device too.
  CostModelOptions cost_options = PlanCostModelOptions(options);
  cost_options.sync_batch_norm = burst && request.sync_batch_norm;
  if (!burst) run.plan.totals = run.plan.data_parallel;
  const CostModel model(*fg.graph, *fg.profile, cluster, fg.global_batch, cost_options);
  ASSIGN_OR_RETURN(run.timeline, BuildFgTimeline(run.plan, model));
  return run;
}

SimConfigResult FromMultiplex(std::string name, SimConfigKind kind, const FgRun& run,
                              const MultiplexResult& result) {
  SimConfigResult config;
  config.name = std::move(name);
  config.kind = kind;
  config.fg_devices = run.plan.num_devices;
  config.fg_devices_used = run.plan.totals.devices_used;
  config.fg_iteration_ms = result.fg_iteration_ms;
  config.fg_samples_per_s = result.fg_samples_per_s;
  config.bg_samples_per_s = result.bg_samples_per_s;
  config.fg_amplification = run.plan.totals.amplification;
  config.fg_delay_ms = result.fg_delay_ms;
  config.devices = result.devices;
  for (const DeviceUsage& usage : result.devices) config.bg_devices += !usage.bg_model.empty();
  return config;
}

std::string PartitionName(int fg_devices, int total, bool burst) {
  return "static " + std::to_string(fg_devices) + "/" + std::to_string(total - fg_devices) +
         (burst ? " BP" : " DP");
}

nlohmann::ordered_json DeviceJson(const DeviceUsage& usage) {
  nlohmann::ordered_json doc;
  doc["device"] = usage.device;
  doc["bg_model"] =
      usage.bg_model.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(usage.bg_model);
  doc["fg_busy_ms"] = usage.fg_busy_ms;
  doc["bg_busy_ms"] = usage.bg_busy_ms;
  doc["idle_ms"] = usage.idle_ms;
  doc["bg_samples_per_s"] = usage.bg_samples_per_s;
  return doc;
}

const char* KindName(SimConfigKind kind) {
  switch (kind) {
    case SimConfigKind::kDataParallel:
      return "dp";
    case SimConfigKind::kBurstParallel:
      return "bp";
    case SimConfigKind::kBurstParallelWithBg:
      return "bp+bg";
    case SimConfigKind::kStaticPartition:
      return "static";
  }
  return "?";
}

// BG iterations, as the engine sees them (split into kernels) and alone on a device; each
// job's summary goes into the report.
StatusOr<std::vector<BgIteration>> BuildBgIterations(const SimRequest& request,
                                                     SimReport* report) {
  std::vector<BgIteration> bg_iterations;
  for (const SimBgJob& job : request.bg) {
    ASSIGN_OR_RETURN(BgIteration iteration,
                     BuildBgIteration(*job.graph, *job.profile, job.batch,
                                      request.engine.interference.max_bg_kernel_ms));
    SimBgSummary summary;
    summary.model = iteration.model;
    summary.batch = iteration.batch;
    summary.iteration_ms = iteration.iteration_ms();
    summary.samples_per_s = static_cast<double>(job.batch) * 1000.0 / summary.iteration_ms;
    summary.kernels = static_cast<int>(iteration.kernels.size());
    report->bg.push_back(summary);
    bg_iterations.push_back(std::move(iteration));
  }
  return bg_iterations;
}

// A device of a static partition outside the FG job: its BG job (`job`, or none) runs alone
// there for the whole FG iteration.
void AddBgAloneDevice(int device, const BgIteration* job, SimConfigResult* config) {
  DeviceUsage usage;
  usage.device = device;
  if (job) {
    usage.bg_model = job->model;
    usage.bg_busy_ms = config->fg_iteration_ms;
    usage.bg_samples_per_s = static_cast<double>(job->batch) * 1000.0 / job->iteration_ms();
    config->bg_samples_per_s += usage.bg_samples_per_s;
    ++config->bg_devices;
  } else {
    usage.idle_ms = config->fg_iteration_ms;
  }
  config->devices.push_back(std::move(usage));
}

// The report's description of the request, before any configuration is run.
SimReport ReportHeader(const SimRequest& request) {
  SimReport report;
  report.fg_model = request.fg.graph->name();
  report.profile_source = request.fg.profile->source();
  report.global_batch = request.fg.global_batch;
  report.devices = request.fg.devices;
  report.amplification_limit = request.fg.amplification_limit;
  report.cluster_name = request.cluster.name;
  report.engine = request.engine;
  return report;
}

// Runs FG timelines through the engine, with or without the BG jobs on their devices.
class FgRunner {
 public:
  FgRunner(const EngineOptions& engine, const std::vector<BgIteration>& bg_iterations)
      : engine_(engine), bg_iterations_(bg_iterations) {}

  // Device d hosts BG job d % (number of BG jobs), or none when there are none.
  const BgIteration* BgOn(int device) const {
    if (bg_iterations_.empty()) return nullptr;
    return &bg_iterations_[static_cast<size_t>(device) % bg_iterations_.size()];
  }

  bool HasBg() const { return !bg_iterations_.empty(); }

  StatusOr<MultiplexResult> Run(const FgRun& run, bool with_bg) const {
    std::vector<const BgIteration*> bg(static_cast<size_t>(run.timeline.num_devices), nullptr);
    if (with_bg) {
      for (int d = 0; d < run.timeline.num_devices; ++d) bg[static_cast<size_t>(d)] = BgOn(d);
    }
    return SimulateMultiplexing(run.timeline, bg, engine_);
  }

 private:
  const EngineOptions& engine_;
  const std::vector<BgIteration>& bg_iterations_;
};

SimConfigResult WithParallelism(SimConfigResult config, const char* fg_parallelism) {
  config.fg_parallelism = fg_parallelism;
  return config;
}

// DP and BP on all devices; BP+BG collocates a BG job on every device (only when there are BG
// jobs).
Status AddWholeClusterConfigs(const SimRequest& request, const FgRunner& runner,
                              SimReport* report) {
  const int total = request.fg.devices;
  ASSIGN_OR_RETURN(const FgRun dp, PlanFg(request, total, /*burst=*/false));
  report->single_device_ms = dp.plan.single_device_ms;
  ASSIGN_OR_RETURN(MultiplexResult dp_result, runner.Run(dp, false));
  report->configs.push_back(
      WithParallelism(FromMultiplex("DP", SimConfigKind::kDataParallel, dp, dp_result), "dp"));

  ASSIGN_OR_RETURN(const FgRun bp, PlanFg(request, total, /*burst=*/true));
  ASSIGN_OR_RETURN(MultiplexResult bp_result, runner.Run(bp, false));
  report->configs.push_back(
      WithParallelism(FromMultiplex("BP", SimConfigKind::kBurstParallel, bp, bp_result), "bp"));
  if (runner.HasBg()) {
    ASSIGN_OR_RETURN(MultiplexResult collocated, runner.Run(bp, true));
    report->configs.push_back(WithParallelism(
        FromMultiplex("BP+BG", SimConfigKind::kBurstParallelWithBg, bp, collocated), "bp"));
  }
  return Status::Ok();
}

// Static partitions: FG alone on ranks 0..k-1, a BG job alone on each of ranks k..G-1.
Status AddStaticPartitionConfigs(const SimRequest& request, const FgRunner& runner,
                                 SimReport* report) {
  const int total = request.fg.devices;
  const std::vector<int> partitions =
      request.partitions.empty() ? DefaultPartitions(total) : request.partitions;
  for (bool burst : {false, true}) {
    for (int k : partitions) {
      ASSIGN_OR_RETURN(const FgRun run, PlanFg(request, k, burst));
      ASSIGN_OR_RETURN(const MultiplexResult fg_alone, runner.Run(run, false));
      SimConfigResult config = FromMultiplex(PartitionName(k, total, burst),
                                             SimConfigKind::kStaticPartition, run, fg_alone);
      config.fg_parallelism = burst ? "bp" : "dp";
      for (int d = k; d < total; ++d) AddBgAloneDevice(d, runner.BgOn(d), &config);
      report->configs.push_back(std::move(config));
    }
  }
  return Status::Ok();
}

// The totals and the ratios against one device and against DP (the first configuration).
void AddTotals(SimReport* report) {
  const double dp_total = report->configs.front().fg_samples_per_s;
  for (SimConfigResult& config : report->configs) {
    config.total_samples_per_s = config.fg_samples_per_s + config.bg_samples_per_s;
    config.fg_speedup = report->single_device_ms / config.fg_iteration_ms;
    config.ratio_to_dp = config.total_samples_per_s / dp_total;
  }
}

}  // namespace

StatusOr<SimReport> SimulateCluster(const SimRequest& request) {
  RETURN_IF_ERROR(CheckRequest(request));
  SimReport report = ReportHeader(request);
  ASSIGN_OR_RETURN(const std::vector<BgIteration> bg_iterations,
                   BuildBgIterations(request, &report));
  const FgRunner runner(request.engine, bg_iterations);
  RETURN_IF_ERROR(AddWholeClusterConfigs(request, runner, &report));
  RETURN_IF_ERROR(AddStaticPartitionConfigs(request, runner, &report));
  AddTotals(&report);
  return report;
}

std::string SimReportToJson(const SimReport& report, int indent) {
  nlohmann::ordered_json doc;
  doc["format"] = "deepool.simulation";
  doc["version"] = kSimReportFormatVersion;
  doc["fg_model"] = report.fg_model;
  doc["profile_source"] = report.profile_source;
  doc["global_batch"] = report.global_batch;
  doc["devices"] = report.devices;
  doc["amplification_limit"] = report.amplification_limit;
  doc["cluster"] = report.cluster_name;
  doc["single_device_ms"] = report.single_device_ms;
  nlohmann::ordered_json bg = nlohmann::ordered_json::array();
  for (const SimBgSummary& job : report.bg) {
    bg.push_back({{"model", job.model},
                  {"batch", job.batch},
                  {"iteration_ms", job.iteration_ms},
                  {"samples_per_s", job.samples_per_s},
                  {"kernels", job.kernels}});
  }
  doc["bg_jobs"] = std::move(bg);
  const InterferenceModel& interference = report.engine.interference;
  doc["interference"] = {{"policy", BgPolicyName(interference.policy)},
                         {"fg_slowdown", interference.fg_slowdown},
                         {"max_bg_kernel_ms", interference.max_bg_kernel_ms}};
  doc["iterations"] = {{"warmup", report.engine.warmup_iterations},
                       {"measured", report.engine.iterations}};
  nlohmann::ordered_json configs = nlohmann::ordered_json::array();
  for (const SimConfigResult& config : report.configs) {
    nlohmann::ordered_json entry;
    entry["name"] = config.name;
    entry["kind"] = KindName(config.kind);
    entry["fg_parallelism"] = config.fg_parallelism;
    entry["fg_devices"] = config.fg_devices;
    entry["fg_devices_used"] = config.fg_devices_used;
    entry["bg_devices"] = config.bg_devices;
    entry["fg_iteration_ms"] = config.fg_iteration_ms;
    entry["fg_samples_per_s"] = config.fg_samples_per_s;
    entry["bg_samples_per_s"] = config.bg_samples_per_s;
    entry["total_samples_per_s"] = config.total_samples_per_s;
    entry["ratio_to_dp"] = config.ratio_to_dp;
    entry["fg_speedup"] = config.fg_speedup;
    entry["fg_amplification"] = config.fg_amplification;
    entry["fg_delay_ms"] = config.fg_delay_ms;
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const DeviceUsage& usage : config.devices) devices.push_back(DeviceJson(usage));
    entry["devices"] = std::move(devices);
    configs.push_back(std::move(entry));
  }
  doc["configs"] = std::move(configs);
  return doc.dump(indent);
}

}  // namespace deepool::planner
