// The body of deepool-train: prepare a run spec (graph from the zoo or a file, plan from a file
// or a data-parallel layout), start one deepool-executor per rank on this machine, print each
// iteration's loss and time, and fail clearly when any rank fails.
// Threading: runs on the calling thread.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "common/status.h"
#include "worker/runtime/layers/optimizer.h"

namespace deepool::worker {

struct TrainOptions {
  std::string plan_path;   // empty: data parallelism over `ranks`
  std::string model;       // zoo name, or
  std::string graph_path;  // a graph JSON file
  // Zoo models, as a job's: planner::zoo::JobModelOptions (0: 10 classes for cifar10, else the
  // zoo's default; the model's default image size, cifar10 images resized to it).
  int64_t num_classes = 0;
  int64_t image_size = 0;
  int ranks = 0;  // 0: the plan's device count (1 without a plan)
  std::string device = "cpu";
  int64_t iterations = 20;
  int64_t epochs = 0;        // above 0: passes over the training set, in place of iterations
  int64_t global_batch = 0;  // 0: the plan's (32 without a plan), times accumulation_steps
  // Gradient accumulation (the run spec's "accumulation_steps"): each iteration is this many
  // passes of global_batch / accumulation_steps samples, which the plan (or the data-parallel
  // layout) is for; global_batch must divide evenly.
  int64_t accumulation_steps = 1;
  std::string gradient_precision = "fp32";  // or "bf16": the gradient all-reduces' width
  // "auto", "contiguous" or "channels_last" (a run spec's "memory_format"; auto is written as
  // no field, and each rank resolves it: planner/memory_format.h).
  std::string memory_format = "auto";
  OptimizerSpec optimizer;
  std::string data =
      "synthetic";  // "synthetic", "cifar10:PATH", "image_folder:PATH" or "tokens:PATH"
  // Evaluation (the run spec's "eval"): a held-out set in --data's form; empty: none. Every
  // eval_every iterations (0: only at the end) and after the last.
  std::string eval_data;
  int64_t eval_every = 0;
  std::optional<int64_t> eval_batch;  // samples per evaluation pass; absent: the global batch
  uint64_t seed = 0;
  int timeout_s = 60;
  std::string checkpoint_path;
  std::string init_path;  // weights to start from (a state_dict file or safetensors); empty: none
  // Periodic checkpoints; a run started again with the same directory resumes from it.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  double checkpoint_every_seconds = 0;
  int checkpoint_keep = 2;
  std::string batch_norm = "synchronized";  // or "per_device" (a run spec's "batch_norm")
  // "fp32", "tf32", "bf16" or "fp16" (a run spec's "precision"); empty: bf16 on cuda, fp32 on
  // cpu (DefaultPrecision).
  std::string precision;
  std::string executor_path;  // empty: deepool-executor next to this binary
  std::string work_dir;       // where the run spec goes; empty: a fresh temporary folder
  bool json_events = false;   // print the ranks' raw event lines instead of the table
};

// The precision a run gets when none is asked for: bf16 on "cuda" (every GPU deepool targets,
// Ampere and later, runs it on tensor cores), fp32 on "cpu" (bf16 there is emulated on most
// CPUs and slower).
const char* DefaultPrecision(const std::string& device);

Status RunTraining(const TrainOptions& options, std::ostream& out);

}  // namespace deepool::worker
