#include "worker/runtime/train_launch.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>
#include <sstream>

#include "planner/zoo/zoo.h"
#include "weights/state_dict_check.h"
#include "worker/runtime/launcher.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {
namespace {

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A --data or --eval-data flag (protocol::ParseDataFlag), its path made absolute for the ranks.
StatusOr<DataSpec> ParseDataFlag(const std::string& text, const char* flag, uint64_t seed) {
  ASSIGN_OR_RETURN(DataSpec data, protocol::ParseDataFlag(text, flag));
  data.seed = seed;
  if (!data.path.empty()) data.path = std::filesystem::absolute(data.path).string();
  return data;
}

// --eval-data, --eval-every and --eval-batch: the run spec's eval, none without --eval-data.
StatusOr<std::optional<protocol::EvalSpec>> EvalOf(const TrainOptions& options) {
  if (options.eval_data.empty()) {
    if (options.eval_every != 0) return InvalidArgumentError("--eval-every needs --eval-data");
    if (options.eval_batch) return InvalidArgumentError("--eval-batch needs --eval-data");
    return std::optional<protocol::EvalSpec>();
  }
  ASSIGN_OR_RETURN(DataSpec data, ParseDataFlag(options.eval_data, "--eval-data", options.seed));
  protocol::EvalSpec eval{data, options.eval_every};
  eval.batch = options.eval_batch;
  if (eval.batch && *eval.batch < 1) return InvalidArgumentError("--eval-batch must be >= 1");
  return std::optional<protocol::EvalSpec>(eval);
}

}  // namespace

const char* DefaultPrecision(const std::string& device) {
  return device == "cuda" ? "bf16" : "fp32";
}

namespace {

StatusOr<RunSpec> PrepareSpec(const TrainOptions& options) {
  RunSpec spec;
  spec.job_id = "train";
  spec.iterations = options.iterations;
  if (options.epochs < 0) return InvalidArgumentError("--epochs must be >= 1");
  spec.epochs = options.epochs;
  spec.seed = options.seed;
  spec.optimizer = options.optimizer;
  if (options.batch_norm != "synchronized" && options.batch_norm != "per_device") {
    return InvalidArgumentError("--batch-norm must be synchronized or per_device, not " +
                                options.batch_norm);
  }
  spec.sync_batch_norm = options.batch_norm == "synchronized";
  const std::string precision =
      options.precision.empty() ? DefaultPrecision(options.device) : options.precision;
  auto parsed_precision = planner::ParsePrecision(precision);
  if (!parsed_precision.ok()) return parsed_precision.status().WithContext("--precision");
  spec.precision = *parsed_precision;
  auto gradient_precision = planner::ParsePrecision(options.gradient_precision);
  if (!gradient_precision.ok())
    return gradient_precision.status().WithContext("--gradient-precision");
  spec.gradient_precision = *gradient_precision;
  auto memory_format = planner::ParseMemoryFormat(options.memory_format);
  if (!memory_format.ok()) return memory_format.status().WithContext("--memory-format");
  spec.memory_format = *memory_format;
  if (options.accumulation_steps < 1) {
    return InvalidArgumentError("--accumulation-steps must be >= 1");
  }
  spec.accumulation_steps = options.accumulation_steps;
  ASSIGN_OR_RETURN(spec.data, ParseDataFlag(options.data, "--data", options.seed));
  ASSIGN_OR_RETURN(spec.eval, EvalOf(options));
  if (options.model.empty() == options.graph_path.empty()) {
    return InvalidArgumentError("give exactly one of --model and --graph");
  }
  if (!options.model.empty()) {
    // The coordinator's rule for a job's model options, so deepool-train builds the same graph.
    const planner::zoo::ModelOptions model_options =
        planner::zoo::JobModelOptions(options.num_classes, options.image_size, spec.data.kind);
    auto graph = planner::zoo::BuildModel(options.model, model_options);
    if (!graph.ok()) return graph.status().WithContext("--model " + options.model);
    spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
  } else {
    ASSIGN_OR_RETURN(std::string text, ReadFile(options.graph_path));
    auto graph = planner::ParseGraphJson(text);
    if (!graph.ok()) return graph.status().WithContext(options.graph_path);
    spec.graph = std::make_shared<const planner::Graph>(std::move(graph).value());
  }
  if (!options.plan_path.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(options.plan_path));
    auto plan = planner::ParsePlanJson(text);
    if (!plan.ok()) return plan.status().WithContext(options.plan_path);
    spec.plan = std::move(plan).value();
    if (options.ranks > 0 && options.ranks != spec.plan.num_devices) {
      return InvalidArgumentError("--ranks " + std::to_string(options.ranks) +
                                  " but the plan is for " + std::to_string(spec.plan.num_devices) +
                                  " devices");
    }
    if (options.global_batch > 0 && options.global_batch != spec.IterationBatch()) {
      return InvalidArgumentError("--global-batch " + std::to_string(options.global_batch) +
                                  " but the plan is for a batch of " +
                                  std::to_string(spec.plan.global_batch) + " per pass, " +
                                  std::to_string(spec.IterationBatch()) + " an iteration");
    }
  } else {
    int ranks = options.ranks > 0 ? options.ranks : 1;
    int64_t batch = options.global_batch > 0 ? options.global_batch : 32;
    // The layout is for one pass: the micro-batch.
    if (batch % options.accumulation_steps != 0) {
      return InvalidArgumentError(
          "--global-batch " + std::to_string(batch) + " does not split into --accumulation-steps " +
          std::to_string(options.accumulation_steps) + " micro-batches of equal size");
    }
    batch /= options.accumulation_steps;
    if (batch < ranks) {
      return InvalidArgumentError("--global-batch " + std::to_string(batch) +
                                  " is smaller than --ranks " + std::to_string(ranks));
    }
    spec.plan = planner::DataParallelLayout(*spec.graph, batch, ranks);
    spec.plan.num_devices = ranks;
  }
  if (!options.init_path.empty()) {
    spec.init_path = std::filesystem::absolute(options.init_path).string();
    // The coordinator's check at submission, before any rank starts: one clear error instead of
    // every rank's. A file it cannot judge is left to the ranks' check as they load it.
    const auto check = weights::CheckWeightsFile(*spec.init_path, *spec.graph);
    if (!check.ok()) return check.status().WithContext("init " + *spec.init_path);
  }
  if (!options.checkpoint_path.empty()) {
    spec.checkpoint_path = std::filesystem::absolute(options.checkpoint_path).string();
  }
  if (!options.checkpoint_dir.empty()) {
    PeriodicCheckpoints periodic;
    periodic.dir = std::filesystem::absolute(options.checkpoint_dir).string();
    periodic.every_iterations = options.checkpoint_every;
    periodic.every_seconds = options.checkpoint_every_seconds;
    periodic.keep = options.checkpoint_keep;
    spec.checkpoints = periodic;
  }
  RETURN_IF_ERROR(ValidateRunSpec(spec));
  return spec;
}

}  // namespace

Status RunTraining(const TrainOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(RunSpec spec, PrepareSpec(options));
  std::string work_dir = options.work_dir;
  // A folder made here holds only the run spec: removed when training ends, however it ends.
  std::unique_ptr<const std::string, void (*)(const std::string*)> made_dir(nullptr, nullptr);
  if (work_dir.empty()) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "deepool-train-XXXXXX").string();
    if (!mkdtemp(pattern.data())) return InternalError("cannot create a temporary folder");
    work_dir = pattern;
    made_dir = decltype(made_dir)(&work_dir, [](const std::string* dir) {
      std::error_code ignored;  // a leftover temporary folder is harmless
      std::filesystem::remove_all(*dir, ignored);
    });
  }
  std::string spec_path = (std::filesystem::path(work_dir) / "run.json").string();
  RETURN_IF_ERROR(WriteRunSpecFile(spec, spec_path));

  LaunchOptions launch;
  launch.executor_path =
      options.executor_path.empty() ? SiblingExecutable("deepool-executor") : options.executor_path;
  launch.run_spec_path = spec_path;
  launch.world_size = spec.plan.num_devices;
  launch.device = options.device == "cpu" ? "cpu" : "cuda";
  launch.timeout_s = options.timeout_s;
  ASSIGN_OR_RETURN(auto ranks, RankProcesses::Start(launch));
  if (!options.json_events) {
    out << "model " << spec.graph->name() << ", " << spec.plan.num_devices << " ranks on "
        << options.device << " in " << planner::PrecisionName(spec.precision) << ", global batch "
        << spec.IterationBatch()
        << (spec.accumulation_steps > 1
                ? " (" + std::to_string(spec.accumulation_steps) + " passes of " +
                      std::to_string(spec.plan.global_batch) + ")"
                : std::string())
        << ", "
        << (spec.epochs > 0 ? std::to_string(spec.epochs) + " epochs"
                            : std::to_string(spec.iterations) + " iterations")
        << "\n";
    out << std::setw(6) << "iter" << std::setw(12) << "loss" << std::setw(12) << "ms"
        << std::setw(14) << "samples/s" << std::setw(12) << "busy ms" << std::setw(12) << "idle ms"
        << "\n";
  }
  // A [tokens, vocabulary] output is evaluated per token (Executor::Evaluate).
  const bool sequence_output =
      spec.graph->layer(spec.graph->output_ids().front()).output_shape.size() == 2;
  Status status = ranks->Wait([&](int rank, const protocol::ExecutorEvent& event) {
    if (options.json_events) {
      out << protocol::ExecutorEventToJson(event) << std::endl;
      return;
    }
    if (const auto* evaluation = std::get_if<protocol::EvaluationEvent>(&event)) {
      out << "evaluation after iteration " << evaluation->iteration << ": top-1 " << std::fixed
          << std::setprecision(1) << 100 * evaluation->top1 << " %, top-5 "
          << 100 * evaluation->top5 << " %";
      if (evaluation->loss) out << ", loss " << std::setprecision(4) << *evaluation->loss;
      if (evaluation->loss && sequence_output) {  // per token: the perplexity
        out << ", perplexity " << std::setprecision(2) << std::exp(*evaluation->loss);
      }
      out << " (" << evaluation->samples << " samples)" << std::endl;
      return;
    }
    const auto* iteration = std::get_if<protocol::IterationEvent>(&event);
    if (rank != 0 || !iteration) return;
    out << std::setw(6) << iteration->iteration << std::setw(12) << std::fixed
        << std::setprecision(4) << iteration->loss.value_or(NAN) << std::setw(12)
        << std::setprecision(2) << iteration->iteration_ms << std::setw(14) << std::setprecision(1)
        << iteration->samples_per_s << std::setw(12) << std::setprecision(2) << iteration->busy_ms
        << std::setw(12) << iteration->idle_ms << std::endl;
  });
  if (!status.ok()) return status.WithContext("training failed");
  if (!options.json_events) {
    for (const RankOutcome& outcome : ranks->outcomes()) {
      if (outcome.checkpoint)
        out << "rank " << outcome.rank << " checkpoint " << *outcome.checkpoint << "\n";
    }
    // The ranks' count: an epochs run's iterations are the executors' to count.
    out << "done: " << spec.plan.num_devices << " ranks finished "
        << ranks->outcomes().front().iterations << " iterations\n";
  }
  return Status::Ok();
}

}  // namespace deepool::worker
