// `deepool plan`: the burst-parallel plan of a model for a global batch, a number of devices and
// an amplification limit, printed as a per-layer table with a summary against data
// parallelism, or as plan JSON; --svg draws it, --trace and --trace-svg write the predicted
// timeline of one iteration (docs/planner.md); --curve prints the speed-up curve over 1..G.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "cli/command_support.h"
#include "cli/plan_memory.h"
#include "common/timeline.h"
#include "planner/cluster.h"
#include "planner/cost_model.h"
#include "planner/device_model.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "planner/plan_explain.h"
#include "planner/plan_svg.h"
#include "planner/plan_trace.h"
#include "planner/profile_table.h"
#include "planner/search.h"
#include "planner/speedup_curve.h"
#include "planner/zoo/zoo.h"

namespace deepool::cli {
namespace {

namespace planner = deepool::planner;

struct PlanFlags {
  std::string model;
  std::string graph_path;
  int64_t global_batch = 0;
  int gpus = 0;
  double amplification_limit = 2.0;
  std::string profile_path;
  std::string device;
  std::string fallback_device;
  std::string cluster;
  bool json = false;
  bool explain = false;
  bool curve = false;  // the speed-up curve over 1..G instead of one plan
  std::string svg_path;
  std::string trace_path;      // Chrome trace JSON of the predicted iteration
  std::string trace_svg_path;  // the same timeline drawn
  bool exhaustive = false;
  std::string granularity = "mixed";
  bool allow_extrapolation = false;
  SearchFlags search;  // gradient all-reduces as the cost model charges them; the search's epsilon
  PrecisionFlag precision;
  double device_memory_gb = -1;  // < 0: the cluster's or the device preset's
  std::string optimizer = "sgd";
};

// --cluster and --gpus: the cluster, resized to --gpus devices in nodes of its shape. Without
// --cluster, the preset of `device`: the profile file's device when there is one (a profile
// measured on CPU devices plans on cpu-G), else --device's.
StatusOr<planner::Cluster> LoadPlanCluster(const PlanFlags& flags, const std::string& device) {
  ASSIGN_OR_RETURN(planner::Cluster cluster, LoadCluster(flags.cluster, device, flags.gpus));
  if (flags.gpus >= 1 && cluster.total_devices() < flags.gpus) {
    cluster = planner::ResizeCluster(cluster, flags.gpus);
  }
  return cluster;
}

StatusOr<planner::Graph> LoadGraph(const PlanFlags& flags) {
  if (!flags.graph_path.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadTextFile(flags.graph_path));
    StatusOr<planner::Graph> graph = planner::ParseGraphJson(text);
    if (!graph.ok()) return graph.status().WithContext(flags.graph_path);
    return graph;
  }
  return planner::zoo::BuildModel(flags.model);
}

// --trace and --trace-svg: the predicted timeline of one iteration of the plan, which the
// search evaluated with a cost model over the same graph, profile, cluster and batch.
Status WritePredictedTimeline(const PlanFlags& flags, const planner::PlanOptions& options,
                              const planner::Plan& plan, const planner::Graph& graph,
                              const planner::Profile& profile, const planner::Cluster& cluster) {
  if (flags.trace_path.empty() && flags.trace_svg_path.empty()) return Status::Ok();
  const planner::CostModel model(graph, profile, cluster, plan.global_batch,
                                 planner::PlanCostModelOptions(options));
  ASSIGN_OR_RETURN(const Timeline timeline, planner::PredictedTimeline(plan, model));
  if (!flags.trace_path.empty()) {
    RETURN_IF_ERROR(WriteTextFile(flags.trace_path, TimelineToChromeTrace(timeline)));
  }
  if (!flags.trace_svg_path.empty()) {
    RETURN_IF_ERROR(WriteTextFile(flags.trace_svg_path, TimelineToSvg(timeline)));
  }
  return Status::Ok();
}

// "4" for even shares, "5/4" (largest/smallest) for uneven ones.
std::string SamplesPerDevice(const planner::LayerPlacement& placement) {
  const auto [low, high] = std::minmax_element(placement.samples.begin(), placement.samples.end());
  if (low == placement.samples.end()) return "-";
  return *low == *high ? std::to_string(*high) : std::to_string(*high) + "/" + std::to_string(*low);
}

// The layer's device count, and its ranks when they do not start at 0 (a branch run beside
// others, --concurrent-branches): "2 (ranks 2-3)".
std::string DevicesCell(const planner::LayerPlacement& placement) {
  std::string cell = std::to_string(placement.devices.size());
  if (!placement.devices.empty() && placement.devices.front() > 0) {
    cell += " (rank" + std::string(placement.devices.size() > 1 ? "s " : " ") +
            std::to_string(placement.devices.front());
    if (placement.devices.size() > 1) cell += "-" + std::to_string(placement.devices.back());
    cell += ")";
  }
  return cell;
}

void PrintPlan(const planner::Plan& plan, const planner::Graph& graph,
               const std::vector<std::string>& fallback_layers,
               std::optional<planner::Precision> precision, std::ostream& out) {
  out << "model " << plan.model << ", global batch " << plan.global_batch << ", "
      << plan.num_devices << " devices, amplification limit "
      << (plan.amplification_limit > 0 ? Fixed(plan.amplification_limit, 2) : "none")
      << "\nprofile: " << plan.profile_source;
  if (!plan.profile_environment.empty()) {
    out << " (measured on " << planner::EnvironmentSummary(plan.profile_environment) << ")";
  }
  out << "\n" << DescribePrecision(precision) << "\n";
  if (!fallback_layers.empty()) {
    out << fallback_layers.size() << " of " << graph.num_layers()
        << " layers are not in the profile file and are timed by the fallback device:";
    const size_t shown = std::min<size_t>(fallback_layers.size(), 8);
    for (size_t i = 0; i < shown; ++i) out << (i ? ", " : " ") << fallback_layers[i];
    out << (shown < fallback_layers.size() ? ", ...\n" : "\n");
  }
  out << '\n';
  std::vector<std::vector<std::string>> rows = {
      {"LAYER", "OP", "DEVICES", "SAMPLES/DEV", "FW MS", "BW MS", "COMM MS"}};
  for (size_t id = 0; id < plan.layers.size(); ++id) {
    const planner::LayerPlacement& p = plan.layers[id];
    const auto layer_id = graph.FindLayer(p.layer);
    rows.push_back({p.layer, layer_id ? planner::OpName(graph.layer(*layer_id).op) : "?",
                    DevicesCell(p), SamplesPerDevice(p), Fixed(p.forward_ms, 3),
                    Fixed(p.backward_ms, 3), Fixed(p.comm_ms, 3)});
  }
  PrintTable(rows, out);
  const planner::PlanTotals& bp = plan.totals;
  const planner::PlanTotals& dp = plan.data_parallel;
  out << "\nburst-parallel: " << Fixed(bp.iteration_ms, 2) << " ms/iteration, "
      << Fixed(dp.iteration_ms / bp.iteration_ms, 2) << "x the speed of data parallelism ("
      << Fixed(dp.iteration_ms, 2) << " ms); GPU-seconds " << Fixed(bp.gpu_seconds, 4) << " vs "
      << Fixed(dp.gpu_seconds, 4) << "; amplification " << Fixed(bp.amplification, 2) << " vs "
      << Fixed(dp.amplification, 2) << "; devices used " << bp.devices_used << " vs "
      << dp.devices_used << "; single device " << Fixed(plan.single_device_ms, 2) << " ms\n";
}

// The profile's work outside the layers, which the cost model adds to the last output layer's
// forward (docs/planner.md, "Iteration overhead"); nothing when the profile has none.
void PrintIterationOverhead(const planner::Plan& plan, const planner::Graph& graph,
                            const planner::Profile& profile, std::ostream& out) {
  int output = -1;
  for (int id : graph.output_ids()) output = std::max(output, id);
  if (output < 0 || static_cast<size_t>(output) >= plan.layers.size()) return;
  const planner::LayerPlacement& placement = plan.layers[static_cast<size_t>(output)];
  const int64_t share = planner::LargestShare(
      plan.global_batch, static_cast<int>(std::max<size_t>(1, placement.devices.size())));
  const double overhead_ms = profile.IterationOverheadMs(share);
  if (overhead_ms <= 0) return;
  out << "iteration overhead: " << Fixed(overhead_ms, 3) << " ms at " << share
      << " samples per device (loss, data, autograd, optimizer step; measured with the profile), "
         "included in "
      << placement.layer << "'s FW MS\n";
}

// A plan slower than the baseline may be so only because it synchronises batch norm, which the
// baseline (DDP without SyncBatchNorm) does not: then says so, and what the same search finds
// with statistics kept per device, so the user sees the price of training as one device does.
void PrintBatchNormTradeOff(const planner::Plan& plan, const planner::Graph& graph,
                            const planner::Profile& profile, const planner::Cluster& cluster,
                            planner::PlanOptions options, std::ostream& out) {
  const bool has_batch_norm = std::any_of(
      graph.layers().begin(), graph.layers().end(),
      [](const planner::Layer& layer) { return layer.op == planner::Op::kBatchNorm2d; });
  if (!options.sync_batch_norm || !has_batch_norm ||
      plan.totals.iteration_ms <= plan.data_parallel.iteration_ms) {
    return;
  }
  options.sync_batch_norm = false;
  StatusOr<planner::Plan> per_device = planner::PlanBurstParallel(graph, profile, cluster, options);
  out << "batch norm: this plan synchronises its statistics over each layer's devices, so "
         "training equals one device's; the data-parallel baseline keeps them per device (DDP "
         "without SyncBatchNorm)";
  if (!per_device.ok()) {
    out << "; with --batch-norm per_device no plan: " << per_device.status().message() << '\n';
    return;
  }
  out << ". With --batch-norm per_device: " << Fixed(per_device->totals.iteration_ms, 2)
      << " ms/iteration, "
      << Fixed(plan.data_parallel.iteration_ms / per_device->totals.iteration_ms, 2)
      << "x the speed of data parallelism, and training no longer equal to one device's\n";
}

// --curve: the plan's iteration time at every device count 1..G, as a table or JSON.
int PrintSpeedupCurve(const planner::Graph& graph, const planner::Profile& profile,
                      const planner::Cluster& cluster, const planner::PlanOptions& options,
                      bool json) {
  StatusOr<planner::SpeedupCurve> curve = planner::PlanSpeedupCurve(
      graph, profile, cluster, options, planner::DeviceCountsUpTo(options.devices));
  if (!curve.ok()) return Fail(curve.status(), ExitCodeFor(curve.status()));
  if (json) {
    nlohmann::ordered_json points = nlohmann::ordered_json::array();
    for (const planner::SpeedupPoint& point : curve->points) {
      const planner::PlanTotals& totals = point.plan.totals;
      points.push_back({{"devices", point.devices},
                        {"iteration_ms", totals.iteration_ms},
                        {"speedup", point.speedup()},
                        {"amplification", totals.amplification},
                        {"devices_used", totals.devices_used},
                        {"data_parallel_iteration_ms", point.plan.data_parallel.iteration_ms}});
    }
    nlohmann::ordered_json doc = {{"model", graph.name()},
                                  {"global_batch", options.global_batch},
                                  {"amplification_limit", options.amplification_limit},
                                  {"single_device_ms", curve->points.front().plan.single_device_ms},
                                  {"points", points}};
    std::cout << doc.dump(2) << '\n';
    return kExitOk;
  }
  std::cout << "speed-up curve of " << graph.name() << ", global batch " << options.global_batch
            << ", amplification limit "
            << (options.amplification_limit > 0 ? Fixed(options.amplification_limit, 2) : "none")
            << " (single device " << Fixed(curve->points.front().plan.single_device_ms, 2)
            << " ms)\n";
  std::cout << "devices  iteration ms  speed-up  amplification  devices used  DP iteration ms\n";
  for (const planner::SpeedupPoint& point : curve->points) {
    char line[160];
    std::snprintf(line, sizeof line, "%7d  %12.2f  %7.2fx  %13.2f  %12d  %15.2f\n", point.devices,
                  point.plan.totals.iteration_ms, point.speedup(), point.plan.totals.amplification,
                  point.plan.totals.devices_used, point.plan.data_parallel.iteration_ms);
    std::cout << line;
  }
  return kExitOk;
}

// The search line's note on granularity: none for layer by layer, and for a graph with no block
// to search whole (a chain) that every solve was layer by layer anyway.
std::string GranularityNote(const planner::Graph& graph, const planner::PlanOptions& options) {
  if (options.granularity == planner::SearchGranularity::kLayers) return "";
  const std::string name(planner::SearchGranularityName(options.granularity));
  if (!planner::SearchesBlocks(graph, options)) {
    return "granularity " + name + " (the graph has no block to search whole: layer by layer), ";
  }
  return "granularity " + name + " (blocks searched whole in some solves), ";
}

int RunPlan(const PlanFlags& flags) {
  if (flags.model.empty() == flags.graph_path.empty()) {
    std::cerr << "error: give exactly one of --model NAME or --graph FILE\n";
    return kExitUsage;
  }
  if (flags.profile_path.empty() == flags.device.empty()) {
    std::string presets;
    for (const std::string& name : planner::DevicePresetNames()) {
      presets += (presets.empty() ? "" : ", ") + name;
    }
    std::cerr << "error: give exactly one of --profile FILE (measured times, from `deepool "
                 "profile`) or --device NAME (the analytical model of a preset: "
              << presets << ")\n";
    return kExitUsage;
  }
  if (flags.explain && flags.json) {
    std::cerr << "error: --explain prints sentences; it goes without --json\n";
    return kExitUsage;
  }
  if (flags.curve && (flags.explain || !flags.svg_path.empty() || !flags.trace_path.empty() ||
                      !flags.trace_svg_path.empty())) {
    std::cerr << "error: --curve prints one line per device count; it goes without --explain, "
                 "--svg, --trace and --trace-svg\n";
    return kExitUsage;
  }
  if (!flags.fallback_device.empty() && flags.profile_path.empty()) {
    std::cerr << "error: --fallback-device only applies with --profile\n";
    return kExitUsage;
  }
  const StatusOr<std::optional<planner::Precision>> precision = flags.precision.Parse();
  if (!precision.ok()) return Fail(precision.status(), kExitUsage);
  const StatusOr<planner::OptimizerMemory> optimizer = OptimizerMemoryFlag(flags.optimizer);
  if (!optimizer.ok()) return Fail(optimizer.status(), kExitUsage);
  StatusOr<planner::Graph> graph = LoadGraph(flags);
  if (!graph.ok()) return Fail(graph.status(), ExitCodeFor(graph.status()));
  StatusOr<std::string> text = std::string();
  std::optional<planner::Precision> recorded;  // the profile file's precision
  if (!flags.profile_path.empty()) {
    text = ReadTextFile(flags.profile_path);
    if (!text.ok()) return Fail(text.status(), kExitInvalidInput);
    StatusOr<std::optional<planner::Precision>> in_file = planner::RecordedProfilePrecision(*text);
    if (!in_file.ok())
      return Fail(in_file.status().WithContext(flags.profile_path), kExitInvalidInput);
    recorded = *in_file;
  }
  std::unique_ptr<planner::Profile> analytical;
  const std::string device = flags.device.empty() ? flags.fallback_device : flags.device;
  if (!device.empty()) {
    StatusOr<planner::DeviceModel> model =
        AnalyticalDeviceAt(device, *precision, !flags.profile_path.empty(), recorded);
    if (!model.ok()) return Fail(model.status(), kExitUsage);
    analytical = planner::MakeAnalyticalProfile(*model);
  }
  std::unique_ptr<planner::TableProfile> table;
  std::vector<std::string> fallback_layers;
  const planner::Profile* profile = analytical.get();
  if (!flags.profile_path.empty()) {
    planner::ProfileOptions options;
    options.allow_extrapolation = flags.allow_extrapolation;
    options.fallback = analytical.get();
    StatusOr<std::unique_ptr<planner::TableProfile>> parsed =
        planner::ParseProfileTable(*text, *graph, options);
    if (!parsed.ok()) {
      Status status = parsed.status().WithContext(flags.profile_path);
      if (status.code() == StatusCode::kNotFound) {
        std::cerr << "error: " << status.message()
                  << " (add --fallback-device NAME to time them with an analytical model)\n";
        return kExitInvalidInput;
      }
      return Fail(status, kExitInvalidInput);
    }
    table = std::move(*parsed);
    fallback_layers = table->fallback_layers();
    profile = table.get();
  }
  const std::string profile_device = table ? table->data().device : "";
  StatusOr<planner::Cluster> cluster =
      LoadPlanCluster(flags, profile_device.empty() ? device : profile_device);
  if (!cluster.ok()) return Fail(cluster.status(), kExitInvalidInput);
  WarnOnProfileClusterMismatch(profile_device, *cluster, std::cerr);
  // Without --cluster, the links the profile measured (as the coordinator plans).
  if (flags.cluster.empty() && table && table->data().links) {
    *cluster = planner::WithMeasuredLink(*cluster, *table->data().links);
  }

  planner::PlanOptions options;
  options.global_batch = flags.global_batch;
  options.devices = flags.gpus;
  options.amplification_limit = flags.amplification_limit;
  options.exhaustive_counts = flags.exhaustive;
  const StatusOr<planner::SearchGranularity> granularity =
      planner::ParseSearchGranularity(flags.granularity);
  if (!granularity.ok()) return Fail(granularity.status(), kExitInvalidInput);
  options.granularity = *granularity;
  options.gradient_sync = flags.search.GradientSync();
  options.pareto_tolerance = flags.search.pareto_tolerance;
  options.concurrent_branches = flags.search.concurrent_branches;
  options.sync_batch_norm = flags.search.SyncBatchNorm();
  options.precision = *precision;
  const double memory_gb = DeviceMemoryGb(flags.device_memory_gb, *cluster);
  options.device_memory_bytes = planner::DeviceCapacityBytes(memory_gb);
  options.optimizer_memory = *optimizer;
  if (flags.curve) return PrintSpeedupCurve(*graph, *profile, *cluster, options, flags.json);
  StatusOr<planner::Plan> plan = planner::PlanBurstParallel(*graph, *profile, *cluster, options);
  if (!plan.ok()) {
    std::string hint;
    if (plan.status().code() == StatusCode::kOutOfRange) {
      hint = "; --allow-extrapolation extends the profile beyond its measured batches";
    }
    std::cerr << "error: " << plan.status().message() << hint << '\n';
    return ExitCodeFor(plan.status());
  }
  if (!flags.svg_path.empty()) {
    const Status written = WriteTextFile(flags.svg_path, planner::PlanToSvg(*plan));
    if (!written.ok()) return Fail(written, kExitFailure);
  }
  const Status traced = WritePredictedTimeline(flags, options, *plan, *graph, *profile, *cluster);
  if (!traced.ok()) return Fail(traced, kExitFailure);
  if (flags.json) {
    std::cout << planner::PlanToJson(*plan) << '\n';
    return kExitOk;
  }
  PrintPlan(*plan, *graph, fallback_layers,
            options.precision ? options.precision : profile->precision(), std::cout);
  PrintIterationOverhead(*plan, *graph, *profile, std::cout);
  PrintDeviceMemory(*plan, *graph, *profile, options, memory_gb, std::cout);
  // What the search promises, in its own terms (docs/planner.md, "The search").
  std::cout << "search: " << GranularityNote(*graph, options) << "Pareto frontiers "
            << (flags.search.pareto_tolerance == 0
                    ? std::string("exact")
                    : "epsilon-optimal, epsilon " + Fixed(flags.search.pareto_tolerance, 4) +
                          " x the least device time")
            << "; then local moves by the full model, whose optimum is not guaranteed\n";
  PrintBatchNormTradeOff(*plan, *graph, *profile, *cluster, options, std::cout);
  if (!options.sync_batch_norm) {
    std::cout << "batch norm: statistics per device (as DDP without SyncBatchNorm), so training "
                 "differs from one device's; submit and train with the same --batch-norm\n";
  }
  if (flags.explain) {
    StatusOr<planner::PlanExplanation> why =
        planner::ExplainPlan(*graph, *profile, *cluster, options, *plan);
    if (!why.ok()) return Fail(why.status(), ExitCodeFor(why.status()));
    std::cout << '\n' << planner::ExplanationText(*why, *plan);
  }
  return kExitOk;
}

void RegisterPlanCommand(CLI::App& app, CommandResult& result) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Plan burst-parallel training: how many devices every layer runs on, within an "
      "amplification limit, against data parallelism");
  plan->add_option("--model", flags->model, "Zoo model (see `deepool model list`)");
  plan->add_option("--graph", flags->graph_path, "Layer graph JSON file instead of a zoo model");
  plan->add_option("--global-batch", flags->global_batch, "Global batch (B)")->required();
  plan->add_option("--gpus", flags->gpus, "Devices available (G)")->required();
  plan->add_option("--amplification-limit", flags->amplification_limit,
                   "Most GPU-seconds per iteration, as a multiple of the least device time "
                   "(one device's iteration time, or less where a layer runs cheaper in pieces "
                   "of the batch: docs/planner.md, \"Totals\"; >= 1; 0: no limit)")
      ->capture_default_str();
  plan->add_option("--profile", flags->profile_path,
                   "Layer profile: deepool profile JSON or reference A100 .prof file");
  plan->add_option("--device", flags->device,
                   "Analytical device model (a100, h100, h200, v100, cpu)");
  plan->add_option("--fallback-device", flags->fallback_device,
                   "With --profile: analytical device for the layers the file lacks");
  plan->add_option("--cluster", flags->cluster,
                   "Cluster JSON file or preset (default: by the profile file's device, else "
                   "--device's: dgx-a100; dgx-h100 for h100, dgx-h200 for h200, cpu-G for cpu), "
                   "resized to --gpus "
                   "devices; a profile of other devices than the cluster's is warned about");
  plan->add_flag("--json", flags->json, "Print the plan JSON (docs/formats.md, \"Plans\")");
  plan->add_flag("--explain", flags->explain,
                 "Per group of layers, why its device count: time saved against GPU-time spent "
                 "and the amplification limit, moving the group alone to the next count");
  plan->add_flag("--curve", flags->curve,
                 "Instead of one plan: the speed-up curve, the plan's iteration time and speed-up "
                 "over one device at every device count 1..G (with --json as JSON)");
  plan->add_option("--svg", flags->svg_path, "Also draw the plan into this SVG file");
  plan->add_option("--trace", flags->trace_path,
                   "Also write the predicted timeline of one iteration into this file, in the "
                   "Chrome trace format (open it in ui.perfetto.dev or chrome://tracing)");
  plan->add_option("--trace-svg", flags->trace_svg_path,
                   "Also draw the predicted timeline of one iteration into this SVG file");
  plan->add_flag("--exhaustive", flags->exhaustive,
                 "Consider every device count 1..min(G, B), not only the candidate set");
  plan->add_option("--granularity", flags->granularity,
                   "Which additive solves of the search plan whole blocks (residual blocks, "
                   "Inception modules) as one group: layers (none), mixed (two of three: as good "
                   "on the zoo models, a third faster on the ResNets) or blocks (all: fastest, "
                   "plans up to a few per cent slower); docs/planner.md, \"Blocks\"")
      ->check(CLI::IsMember({"layers", "mixed", "blocks"}))
      ->capture_default_str();
  AddSearchFlags(plan, &flags->search);
  AddPrecisionFlag(plan, &flags->precision);
  plan->add_option("--device-memory-gb", flags->device_memory_gb,
                   "GiB of memory per device the plan must fit in, by the memory model "
                   "(default: the cluster file's device_memory_gb, else the device preset's; 0: "
                   "unchecked)")
      ->check(CLI::NonNegativeNumber);
  plan->add_option("--optimizer", flags->optimizer,
                   "Optimizer whose state the memory model counts: sgd (momentum 0.9, one copy "
                   "of the weights), adam or adamw (two)")
      ->capture_default_str();
  plan->add_flag("--allow-extrapolation", flags->allow_extrapolation,
                 "Extrapolate profile files beyond their measured batches");
  plan->footer(
      "Examples:\n"
      "  deepool plan --model vgg16 --global-batch 32 --gpus 8 --amplification-limit 2.0 "
      "--device a100\n"
      "  deepool plan --model vgg16 --global-batch 32 --gpus 8 --profile A100_vgg.prof \\\n"
      "      --fallback-device a100 --svg vgg16.svg\n"
      "  deepool plan --model resnet50 --global-batch 64 --gpus 8 --device a100 \\\n"
      "      --trace resnet50.trace.json --trace-svg resnet50.trace.svg\n"
      "  deepool plan --model resnet50 --global-batch 64 --gpus 8 --device h100 --precision bf16");
  plan->callback([&result, flags] { result.exit_code = RunPlan(*flags); });
}

const RegisterCommand kRegisterPlanCommand(RegisterPlanCommand);

}  // namespace
}  // namespace deepool::cli
