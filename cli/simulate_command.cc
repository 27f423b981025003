// `deepool simulate`: predicts FG iteration time, BG throughput and total cluster throughput of
// DP, BP, BP+BG and static partitions for one FG job and a BG job (planner/simulator.h).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "cli/command_support.h"
#include "planner/cluster.h"
#include "planner/device_model.h"
#include "planner/graph.h"
#include "planner/profile_table.h"
#include "planner/simulator.h"
#include "planner/zoo/zoo.h"

namespace deepool::cli {
namespace {

namespace planner = deepool::planner;

struct SimulateFlags {
  std::string fg_model;
  int64_t global_batch = 0;
  int gpus = 0;
  double amplification_limit = 2.0;
  std::string bg_model;  // empty: the FG model
  int64_t bg_batch = 0;  // 0: the FG global batch
  bool no_bg = false;
  std::string profile_path;
  std::string bg_profile_path;
  std::string device;
  std::string cluster;
  bool allow_extrapolation = false;
  std::string bg_policy = "greedy";
  double fg_slowdown = 1.0;
  double bg_kernel_max_ms = 0;
  int iterations = 40;
  int warmup = 3;
  std::vector<int> partitions;
  bool json = false;
  SearchFlags search;  // gradient all-reduces as the cost model charges them; the search's epsilon
  PrecisionFlag precision;
};

// A loaded model with the profile that times it (and what the profile could not time).
struct TimedModel {
  planner::Graph graph;
  std::unique_ptr<planner::TableProfile> table;  // when timed by a profile file
  const planner::Profile* profile = nullptr;     // table, or the shared analytical profile
  std::vector<std::string> fallback_layers;
};

// Times the model by the profile file when given (with the analytical device, when given, for
// the layers the file lacks), else by the analytical device alone.
StatusOr<TimedModel> LoadTimedModel(std::string_view name, const std::string& profile_path,
                                    const planner::Profile* analytical, bool allow_extrapolation) {
  ASSIGN_OR_RETURN(planner::Graph graph, planner::zoo::BuildModel(name));
  TimedModel model{std::move(graph), nullptr, analytical, {}};
  if (profile_path.empty()) {
    if (analytical == nullptr) {
      return InvalidArgumentError("no profile for " + std::string(name) +
                                  ": give --profile FILE or --device NAME");
    }
    return model;
  }
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(profile_path));
  planner::ProfileOptions options;
  options.allow_extrapolation = allow_extrapolation;
  options.fallback = analytical;
  StatusOr<std::unique_ptr<planner::TableProfile>> table =
      planner::ParseProfileTable(text, model.graph, options);
  if (!table.ok()) {
    Status status = table.status().WithContext(profile_path);
    if (status.code() == StatusCode::kNotFound && analytical == nullptr) {
      return NotFoundError(status.message() +
                           " (add --device NAME to time them with the analytical model)");
    }
    return status;
  }
  model.table = std::move(*table);
  model.fallback_layers = model.table->fallback_layers();
  model.profile = model.table.get();
  return model;
}

void PrintFallback(const std::string& what, const TimedModel& model, std::ostream& out) {
  if (model.fallback_layers.empty()) return;
  out << what << ": " << model.fallback_layers.size() << " of " << model.graph.num_layers()
      << " layers are not in the profile file and are timed by the analytical model:";
  const size_t shown = std::min<size_t>(model.fallback_layers.size(), 8);
  for (size_t i = 0; i < shown; ++i) out << (i ? ", " : " ") << model.fallback_layers[i];
  if (shown < model.fallback_layers.size()) out << ", ...";
  out << '\n';
}

void PrintReport(const planner::SimReport& report, const TimedModel& fg, const TimedModel* bg,
                 const SearchFlags& search, std::ostream& out) {
  out << "FG job: " << report.fg_model << ", global batch " << report.global_batch << ", "
      << report.devices << " devices (" << report.cluster_name << "), amplification limit "
      << (report.amplification_limit > 0 ? Fixed(report.amplification_limit, 2) : "none")
      << "\nprofile: " << report.profile_source << "\n"
      << DescribePrecision(fg.profile->precision()) << "\n";
  PrintFallback("FG profile", fg, out);
  out << "single-device iteration: " << Fixed(report.single_device_ms, 2) << " ms\n";
  out << "cost model: " << search.Describe() << '\n';
  for (const planner::SimBgSummary& job : report.bg) {
    out << "BG job: " << job.model << ", batch " << job.batch << " per device, "
        << Fixed(job.iteration_ms, 2) << " ms per iteration alone (" << Fixed(job.samples_per_s, 1)
        << " samples/s), " << job.kernels << " kernels\n";
  }
  if (bg != nullptr && bg != &fg) PrintFallback("BG profile", *bg, out);
  const planner::InterferenceModel& interference = report.engine.interference;
  out << "interference: BG " << planner::BgPolicyName(interference.policy) << ", kernels "
      << (interference.max_bg_kernel_ms > 0
              ? "of at most " + Fixed(interference.max_bg_kernel_ms, 3) + " ms"
              : std::string("= layers"))
      << ", FG slowdown x" << Fixed(interference.fg_slowdown, 2) << "; " << report.engine.iterations
      << " FG iterations measured\n\n";

  std::vector<std::vector<std::string>> rows = {{"CONFIG", "FG DEV", "BG DEV", "FG ITER MS",
                                                 "FG SAMPLES/S", "BG SAMPLES/S", "TOTAL SAMPLES/S",
                                                 "VS DP", "FG SPEEDUP"}};
  for (const planner::SimConfigResult& config : report.configs) {
    rows.push_back(
        {config.name,
         std::to_string(config.fg_devices_used) + "/" + std::to_string(config.fg_devices),
         std::to_string(config.bg_devices), Fixed(config.fg_iteration_ms, 2),
         Fixed(config.fg_samples_per_s, 1), Fixed(config.bg_samples_per_s, 1),
         Fixed(config.total_samples_per_s, 1), Fixed(config.ratio_to_dp, 2) + "x",
         Fixed(config.fg_speedup, 2) + "x"});
  }
  PrintTable(rows, out);
  out << "\nFG DEV: devices the FG plan uses / devices given to it. FG SPEEDUP: single-device "
         "iteration time / FG iteration time.\n";
  for (const planner::SimConfigResult& config : report.configs) {
    if (config.kind != planner::SimConfigKind::kBurstParallelWithBg) continue;
    out << "\n"
        << config.name << " per device, ms per FG iteration (FG waits "
        << Fixed(config.fg_delay_ms, 2) << " ms per iteration for running BG kernels):\n\n";
    std::vector<std::vector<std::string>> devices = {
        {"DEVICE", "FG BUSY", "BG BUSY", "IDLE", "BG SAMPLES/S"}};
    for (const planner::DeviceUsage& usage : config.devices) {
      devices.push_back({std::to_string(usage.device), Fixed(usage.fg_busy_ms, 2),
                         Fixed(usage.bg_busy_ms, 2), Fixed(usage.idle_ms, 2),
                         Fixed(usage.bg_samples_per_s, 1)});
    }
    PrintTable(devices, out);
  }
}

int RunSimulate(const SimulateFlags& flags) {
  if (flags.profile_path.empty() && flags.device.empty()) {
    std::cerr << "error: give --profile FILE or --device NAME (or both: the device times the "
                 "layers the file lacks)\n";
    return kExitUsage;
  }
  planner::BgPolicy policy;
  if (flags.bg_policy == "greedy") {
    policy = planner::BgPolicy::kGreedy;
  } else if (flags.bg_policy == "fit-gaps") {
    policy = planner::BgPolicy::kFitGaps;
  } else {
    std::cerr << "error: --bg-policy must be greedy or fit-gaps, got " << flags.bg_policy << '\n';
    return kExitUsage;
  }
  const StatusOr<std::optional<planner::Precision>> precision = flags.precision.Parse();
  if (!precision.ok()) return Fail(precision.status(), kExitUsage);
  // The analytical device at --precision, else at the FG profile file's, else its default.
  std::optional<planner::Precision> recorded;
  if (!flags.profile_path.empty()) {
    StatusOr<std::string> text = ReadTextFile(flags.profile_path);
    if (!text.ok()) return Fail(text.status(), kExitInvalidInput);
    StatusOr<std::optional<planner::Precision>> in_file = planner::RecordedProfilePrecision(*text);
    if (!in_file.ok()) {
      return Fail(in_file.status().WithContext(flags.profile_path), kExitInvalidInput);
    }
    recorded = *in_file;
  }
  std::unique_ptr<planner::Profile> analytical;
  if (!flags.device.empty()) {
    StatusOr<planner::DeviceModel> device =
        AnalyticalDeviceAt(flags.device, *precision, !flags.profile_path.empty(), recorded);
    if (!device.ok()) return Fail(device.status(), kExitUsage);
    analytical = planner::MakeAnalyticalProfile(*device);
  }
  StatusOr<TimedModel> fg = LoadTimedModel(flags.fg_model, flags.profile_path, analytical.get(),
                                           flags.allow_extrapolation);
  if (!fg.ok()) return Fail(fg.status(), ExitCodeFor(fg.status()));
  // Without --cluster, the preset of the FG profile file's device, else of --device.
  const std::string profile_device = fg->table ? fg->table->data().device : "";
  StatusOr<planner::Cluster> cluster = LoadCluster(
      flags.cluster, profile_device.empty() ? flags.device : profile_device, flags.gpus);
  if (!cluster.ok()) return Fail(cluster.status(), ExitCodeFor(cluster.status()));
  WarnOnProfileClusterMismatch(profile_device, *cluster, std::cerr);
  // The BG model: the FG model (and its profile) unless another is named; another model is
  // timed by --bg-profile, else by the analytical device.
  const std::string bg_name = flags.bg_model.empty() ? flags.fg_model : flags.bg_model;
  StatusOr<TimedModel> other_bg = InternalError("unused");
  const TimedModel* bg = nullptr;
  if (!flags.no_bg) {
    if (bg_name == flags.fg_model && flags.bg_profile_path.empty()) {
      bg = &*fg;
    } else {
      other_bg = LoadTimedModel(bg_name, flags.bg_profile_path, analytical.get(),
                                flags.allow_extrapolation);
      if (!other_bg.ok()) return Fail(other_bg.status(), ExitCodeFor(other_bg.status()));
      bg = &*other_bg;
    }
  }

  // Every profile at one precision: --precision's when given, else the FG profile's.
  const std::optional<planner::Precision> wanted =
      *precision ? *precision : fg->profile->precision();
  for (const TimedModel* model : {static_cast<const TimedModel*>(&*fg), bg}) {
    if (model == nullptr || !wanted) continue;
    const Status same = planner::CheckProfilePrecision(*model->profile, *wanted);
    if (!same.ok()) return Fail(same, ExitCodeFor(same));
  }

  planner::SimRequest request;
  request.cluster = *cluster;
  request.fg = {&fg->graph, fg->profile, flags.global_batch, flags.gpus, flags.amplification_limit};
  if (bg != nullptr) {
    request.bg = {
        {&bg->graph, bg->profile, flags.bg_batch > 0 ? flags.bg_batch : flags.global_batch}};
  }
  request.partitions = flags.partitions;
  request.gradient_sync = flags.search.GradientSync();
  request.pareto_tolerance = flags.search.pareto_tolerance;
  request.concurrent_branches = flags.search.concurrent_branches;
  request.sync_batch_norm = flags.search.SyncBatchNorm();
  request.engine.iterations = flags.iterations;
  request.engine.warmup_iterations = flags.warmup;
  request.engine.interference = {policy, flags.fg_slowdown, flags.bg_kernel_max_ms};
  StatusOr<planner::SimReport> report = planner::SimulateCluster(request);
  if (!report.ok()) return Fail(report.status(), ExitCodeFor(report.status()));
  if (flags.json) {
    std::cout << planner::SimReportToJson(*report) << '\n';
  } else {
    PrintReport(*report, *fg, bg, flags.search, std::cout);
  }
  return kExitOk;
}

void RegisterSimulateCommand(CLI::App& app, CommandResult& result) {
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* simulate = app.add_subcommand(
      "simulate",
      "Predict FG iteration time, BG throughput and total cluster throughput of data "
      "parallelism, burst parallelism, burst parallelism with collocated BG jobs, and static "
      "FG/BG partitions of the cluster");
  simulate->add_option("--fg-model", flags->fg_model, "FG model (see `deepool model list`)")
      ->required();
  simulate->add_option("--global-batch", flags->global_batch, "FG global batch")->required();
  simulate->add_option("--gpus", flags->gpus, "Devices in the cluster (G)")->required();
  simulate
      ->add_option("--amplification-limit", flags->amplification_limit,
                   "GPU-seconds limit of the BP plans, as a multiple of the least device time "
                   "(one device's iteration time, or less: docs/planner.md, \"Totals\"; 0: none)")
      ->capture_default_str();
  simulate->add_option("--bg-model", flags->bg_model, "BG model (default: the FG model)");
  simulate->add_option("--bg-batch", flags->bg_batch,
                       "BG per-device batch (default: the FG global batch)");
  simulate->add_flag("--no-bg", flags->no_bg, "No BG job: BP+BG is left out, BG devices idle");
  simulate->add_option("--profile", flags->profile_path,
                       "FG layer profile: deepool profile JSON or reference A100 .prof file");
  simulate->add_option("--bg-profile", flags->bg_profile_path,
                       "BG layer profile (default: the FG profile for the same model, else "
                       "--device)");
  simulate->add_option(
      "--device", flags->device,
      "Analytical device model (a100, h100, h200, v100, cpu); with --profile it times "
      "the layers the file lacks");
  simulate->add_option(
      "--cluster", flags->cluster,
      "Cluster preset or cluster JSON file (default: by the FG profile file's "
      "device, else --device's: dgx-a100; dgx-h100 for h100, dgx-h200 for h200, cpu-G for cpu); a "
      "profile of other devices than the cluster's is warned about");
  AddSearchFlags(simulate, &flags->search);
  AddPrecisionFlag(simulate, &flags->precision);
  simulate->add_flag("--allow-extrapolation", flags->allow_extrapolation,
                     "Extrapolate profile files beyond their measured batches");
  simulate
      ->add_option("--bg-policy", flags->bg_policy,
                   "Greedy: a BG kernel starts whenever the device is FG-idle; fit-gaps: "
                   "only if it ends before the device's next FG step")
      ->capture_default_str();
  simulate
      ->add_option("--fg-slowdown", flags->fg_slowdown,
                   "Factor (>= 1) on FG steps of devices that host a BG job")
      ->capture_default_str();
  simulate
      ->add_option("--bg-kernel-max-ms", flags->bg_kernel_max_ms,
                   "Split BG layers into non-preemptible pieces of at most this length "
                   "(0: one kernel per layer and direction)")
      ->capture_default_str();
  simulate->add_option("--iterations", flags->iterations, "FG iterations measured")
      ->capture_default_str();
  simulate->add_option("--warmup", flags->warmup, "FG iterations simulated before measuring")
      ->capture_default_str();
  simulate
      ->add_option("--partitions", flags->partitions,
                   "FG device counts of the static partitions (default: powers of two "
                   "below G, and G)")
      ->delimiter(',');
  simulate->add_flag("--json", flags->json,
                     "Print a deepool.simulation JSON document (docs/simulator.md)");
  simulate->footer(
      "Examples:\n"
      "  deepool simulate --fg-model vgg16 --global-batch 32 --gpus 8 --device a100\n"
      "  deepool simulate --fg-model vgg16 --global-batch 32 --gpus 8 \\\n"
      "      --profile A100_vgg.prof --device a100 --bg-batch 32 --bg-policy fit-gaps");
  simulate->callback([&result, flags] { result.exit_code = RunSimulate(*flags); });
}

const RegisterCommand kRegisterSimulateCommand(RegisterSimulateCommand);

}  // namespace
}  // namespace deepool::cli
