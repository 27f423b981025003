// deepool-train: trains a model on this machine with one deepool-executor process per rank.
//   deepool-train --plan plan.json (--model NAME | --graph FILE) --ranks 4 --device cpu
//                 --iterations 20 [--global-batch B] [--optimizer sgd --lr 0.01]
//                 [--lr-schedule cosine --warmup-iterations W --min-lr M] [--clip-grad-norm C]
//                 [--no-decay-1d]
//                 [--data synthetic|cifar10:PATH|image_folder:PATH|tokens:PATH] [--checkpoint-dir
//                 DIR
//                 --checkpoint-every N] [--eval-data KIND:PATH [--eval-every N]
//                 [--eval-batch B]]
#include <CLI/CLI.hpp>
#include <iostream>

#include "common/logging.h"
#include "protocol/training_spec.h"
#include "worker/runtime/train_launch.h"

int main(int argc, char** argv) {
  deepool::worker::TrainOptions options;
  CLI::App app{"deepool-train: run a training plan on local ranks"};
  app.add_option("--plan", options.plan_path, "plan JSON (default: data parallelism)");
  app.add_option("--model", options.model, "zoo model name");
  app.add_option("--graph", options.graph_path, "layer graph JSON file");
  app.add_option("--num-classes", options.num_classes, "zoo models: classes (cifar10: 10)");
  app.add_option("--image-size", options.image_size, "zoo models: input image side");
  app.add_option("--ranks", options.ranks, "number of ranks (default: the plan's)");
  app.add_option("--device", options.device, "cpu or cuda (rank R uses cuda:R)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--precision", options.precision,
                 "fp32, tf32, bf16 or fp16: autocast mixed precision with fp32 weights and "
                 "optimizer (default: bf16 on cuda, fp32 on cpu)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
  app.add_option("--iterations", options.iterations, "training iterations (default 20)");
  app.add_option("--epochs", options.epochs,
                 "instead of --iterations: passes over the training set (the ranks count the "
                 "iterations: ceil(epochs * samples / global batch))")
      ->excludes(app.get_option("--iterations"));
  app.add_option("--global-batch", options.global_batch,
                 "samples per iteration (default: the plan's, times --accumulation-steps)");
  app.add_option("--accumulation-steps", options.accumulation_steps,
                 "gradient accumulation: passes of global-batch / N samples per iteration, one "
                 "gradient sum and optimizer step after the last (default 1)");
  app.add_option("--gradient-precision", options.gradient_precision,
                 "fp32 or bf16: the width gradient all-reduces move (default fp32)");
  app.add_option("--memory-format", options.memory_format,
                 "auto, contiguous or channels_last: the layout of convolutions' 4-D weights "
                 "and activations (default auto: channels_last on cuda for a convolutional "
                 "model at bf16 or fp16, else contiguous)")
      ->check(CLI::IsMember({"auto", "contiguous", "channels_last"}));
  app.add_option("--optimizer", options.optimizer.name, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--lr", options.optimizer.lr, "learning rate");
  app.add_option("--momentum", options.optimizer.momentum, "SGD momentum");
  app.add_option("--weight-decay", options.optimizer.weight_decay,
                 "weight decay (default 0; adamw: 0.01, as torch's)");
  app.add_flag("--no-decay-1d",
               "no weight decay for parameters of at most one dimension "
               "(biases, norm weights), as the param groups of timm's and nanoGPT's recipes");
  app.add_option("--lr-schedule", options.optimizer.schedule.kind,
                 "constant (default), cosine or linear: the lr after the warm-up, decaying to "
                 "--min-lr at the last iteration")
      ->check(CLI::IsMember({"constant", "cosine", "linear"}));
  app.add_option("--warmup-iterations", options.optimizer.schedule.warmup_iterations,
                 "iterations of linear warm-up from 0 to --lr (default 0)");
  app.add_option("--min-lr", options.optimizer.schedule.min_lr,
                 "the lr a cosine or linear schedule ends at (default 0)");
  app.add_option("--clip-grad-norm", options.optimizer.clip_grad_norm,
                 "clip the gradients to this global L2 norm over all parameters, as torch's "
                 "clip_grad_norm_ (default 0: no clipping)");
  app.add_option("--data", options.data,
                 "synthetic, cifar10:PATH, image_folder:PATH (a folder of class folders or a "
                 "path<TAB>label list) or tokens:PATH (a flat file of uint16 token ids)");
  app.add_option("--eval-data", options.eval_data,
                 "evaluate on this held-out set (synthetic, cifar10:PATH, image_folder:PATH or "
                 "tokens:PATH) "
                 "every --eval-every iterations and after the last; default: no evaluation");
  app.add_option("--eval-every", options.eval_every,
                 "iterations between evaluations (default 0: only after the last)");
  app.add_option("--eval-batch", options.eval_batch,
                 "samples per evaluation pass (default: the global batch; the plan's shares are "
                 "scaled to it, and without backward a larger batch usually evaluates faster)");
  app.add_option("--seed", options.seed,
                 "weights, synthetic data, and image_folder's shuffling and augmentation");
  app.add_option("--timeout-s", options.timeout_s, "communication timeout per rank");
  app.add_option("--checkpoint", options.checkpoint_path, "write the trained model here");
  app.add_option("--init", options.init_path,
                 "start from these weights: a state_dict file (torch.save of a dict, a deepool "
                 "checkpoint or the importer's --weights) or a safetensors file; every parameter "
                 "and buffer must be there with its shape");
  app.add_option("--checkpoint-dir", options.checkpoint_dir,
                 "periodic checkpoints here (optimizer state included); started again with the "
                 "same folder, training resumes from the newest whole one");
  app.add_option("--checkpoint-every", options.checkpoint_every,
                 "iterations between checkpoints (default 0: only at the end)");
  app.add_option("--checkpoint-every-seconds", options.checkpoint_every_seconds,
                 "seconds between checkpoints (the ranks agree on the iteration; default 0: "
                 "none by time)");
  app.add_option("--checkpoint-keep", options.checkpoint_keep,
                 "checkpoints kept in --checkpoint-dir (default 2)");
  app.add_option("--batch-norm", options.batch_norm,
                 "batch norm statistics of a layer on several ranks: synchronized (default: "
                 "summed over its ranks, training equals one device's) or per_device (each "
                 "rank's own batch, as DDP without SyncBatchNorm)")
      ->check(CLI::IsMember({"synchronized", "per_device"}));
  app.add_option("--work-dir", options.work_dir, "folder for the run spec (default: temporary)");
  app.add_flag("--json", options.json_events, "print the ranks' raw JSON events");
  CLI11_PARSE(app, argc, argv);
  options.optimizer.decay_1d = app.count("--no-decay-1d") == 0;
  if (options.optimizer.name == "adamw" && app.count("--weight-decay") == 0) {
    options.optimizer.weight_decay = deepool::protocol::kAdamWDefaultWeightDecay;
  }
  deepool::InitLogging("train", "warn");
  deepool::Status status = deepool::worker::RunTraining(options, std::cout);
  if (!status.ok()) {
    std::cerr << "deepool-train: " << status.ToString() << std::endl;
    return 1;
  }
  return 0;
}
