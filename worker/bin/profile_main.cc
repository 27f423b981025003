// deepool-profile: measures per-layer forward and backward times and writes a profile JSON.
//   deepool-profile (--model NAME | --graph FILE) --device cpu|cuda:K --batch-sizes 1,2,4,8
//                   -o FILE [--warmup N] [--repeats N] [--image-size S] [--num-classes N]
//                   [--no-iteration-overhead] [--optimizer sgd|adam|adamw] [--momentum M]
//                   [--weight-decay W] [--no-links] [--precision fp32|tf32|bf16|fp16]
// Progress ("[i/n] layer") goes to stderr. Exit status: 0 ok, 2 usage, 3 invalid input,
// 5 unknown model or missing file, 1 other failures (as the deepool command's codes).
#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

#include "common/build_info.h"
#include "common/logging.h"
#include "common/subprocess.h"
#include "protocol/training_spec.h"
#include "worker/runtime/profiling/profiler.h"

int main(int argc, char** argv) {
  deepool::worker::ProfileToolOptions options;
  bool no_aux_logits = false;
  std::string log_level = "warn";
  CLI::App app{"deepool-profile: measure per-layer forward and backward times"};
  app.add_option("--model", options.model, "Zoo model name");
  app.add_option("--graph", options.graph_path, "Layer graph JSON file");
  app.add_option("--device", options.device, "The device: cpu or cuda:K")->capture_default_str();
  app.add_option("--device-name", options.device_name,
                 "The profile's device field (default: --device), e.g. a100");
  app.add_option("--batch-sizes", options.batch_sizes, "Per-device batch sizes, e.g. 1,2,4,8")
      ->required()
      ->delimiter(',');
  app.add_option("-o,--output", options.output_path, "Profile JSON to write")->required();
  app.add_option("--warmup", options.warmup, "Untimed runs per layer and batch")
      ->capture_default_str();
  app.add_option("--repeats", options.repeats, "Timed runs per layer and batch (median)")
      ->capture_default_str();
  app.add_option("--image-size", options.model_options.image_size, "Zoo models: input image side");
  app.add_option("--num-classes", options.model_options.num_classes, "Zoo models: classes")
      ->capture_default_str();
  app.add_flag("--no-aux-logits", no_aux_logits, "For inception_v3: without the aux classifier");
  app.add_option("--threads", options.threads, "CPU: torch intra-op threads (0: default)");
  app.add_option("--seed", options.seed, "Weights and inputs seed");
  std::string cuda_timing = "device";
  app.add_option("--cuda-timing", cuda_timing,
                 "CUDA: 'device' times only the kernels' GPU time, their launches queued "
                 "behind a spin kernel (an executor that keeps the GPU busy); 'with-launch' "
                 "each layer as issued, its host launch latency included")
      ->check(CLI::IsMember({"device", "with-launch"}))
      ->capture_default_str();
  bool no_links = false;
  app.add_flag("--no-links", no_links,
               "CPU devices: do not time collectives between two ranks of this host "
               "(deepool-calibrate; plans then use the cluster preset's links)");
  bool no_overhead = false;
  app.add_flag("--no-iteration-overhead", no_overhead,
               "Do not measure the iteration's work outside the layers (a one-rank "
               "training run at each batch; the planner then charges none)");
  std::string optimizer = "sgd";
  std::optional<double> momentum, weight_decay;
  app.add_option("--optimizer", optimizer,
                 "The optimizer whose step the iteration overhead includes: the job's "
                 "(Adam's step costs more than SGD's)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  app.add_option("--momentum", momentum, "With --optimizer sgd (default 0.9, as a job's)");
  app.add_option("--weight-decay", weight_decay,
                 "The optimizer's weight decay (default 0; adamw: 0.01, as torch's)");
  std::string precision;
  app.add_option("--precision", precision,
                 "Time every layer (and the iteration overhead) as the runtime trains at this "
                 "precision: fp32, tf32, bf16 or fp16 (bf16 and fp16 under autocast, activations "
                 "16-bit), and record it in the profile; default: fp32, unrecorded")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
  app.add_option("--log-level", log_level, "Log level: trace, debug, info, warn, error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  options.model_options.aux_logits = !no_aux_logits;
  options.deepool_commit = deepool::BuildCommit();
  if (!no_links) options.link_tool = deepool::SiblingExecutable("deepool-calibrate");
  options.iteration_overhead = !no_overhead;
  options.overhead_optimizer.name = optimizer;
  options.overhead_optimizer.momentum = momentum.value_or(optimizer == "sgd" ? 0.9 : 0.0);
  options.overhead_optimizer.weight_decay = weight_decay.value_or(
      optimizer == "adamw" ? deepool::protocol::kAdamWDefaultWeightDecay : 0.0);
  if (!precision.empty()) {
    options.precision = deepool::planner::ParsePrecision(precision).value();  // checked above
  }
  if (app.count("--cuda-timing") > 0) {
    options.cuda_timing = deepool::worker::ParseCudaTiming(cuda_timing).value();  // checked above
  }
  deepool::InitLogging("profile", log_level);
  deepool::Status status = deepool::worker::RunProfileTool(options, std::cerr);
  if (status.ok()) return 0;
  std::cerr << "deepool-profile: " << status.ToString() << std::endl;
  switch (status.code()) {
    case deepool::StatusCode::kInvalidArgument:
      return 3;
    case deepool::StatusCode::kNotFound:
      return 5;
    default:
      return 1;
  }
}
