// deepool submit | status | cancel | logs: jobs on the coordinator.
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/command_registry.h"
#include "cli/services/client.h"
#include "cli/services/format.h"
#include "cli/services/job_wait.h"
#include "cli/services/submit_retry.h"
#include "cli/services/why.h"
#include "common/json_fields.h"
#include "common/status.h"
#include "jobspec/job_spec.h"
#include "jobspec/job_spec_json.h"
#include "protocol/training_spec.h"

namespace deepool::cli {
namespace {

using nlohmann::json;

struct SubmitFlags {
  ClientOptions client;
  std::string spec;  // file, "-" for stdin, or inline JSON
  std::string model, graph_file, name, optimizer, data, data_path, data_dtype, profile, checkpoint,
      batch_norm;
  std::string checkpoint_dir;
  std::string eval_data;  // "synthetic", "cifar10:PATH", "image_folder:PATH" or "tokens:PATH"
  std::string init;       // weights to start from, on every worker
  std::string precision;  // "fp32", "tf32", "bf16" or "fp16"; empty: the coordinator's default
  std::string gradient_precision;  // "fp32" or "bf16"; empty: fp32
  std::string memory_format;       // "auto", "contiguous" or "channels_last"; empty: auto
  std::optional<int64_t> accumulation_steps;
  std::optional<int64_t> eval_batch;
  std::optional<int64_t> global_batch, iterations, epochs, seed, num_classes, image_size,
      checkpoint_every, data_skip_bad, eval_every;
  std::optional<int> gpus, priority, checkpoint_keep;
  std::optional<double> amplification_limit, lr, checkpoint_every_seconds, gradient_bucket_mb;
  bool foreground = false, background = false, detach = false, requeue = false;
  bool concurrent_branches = false;
};

// The checkpoint flags set fields of the spec's "checkpoint" object and keep the others a spec
// file gives (a bare string there is the path, as in docs/formats.md).
void ApplyCheckpointFlags(const SubmitFlags& f, json* doc) {
  if (f.checkpoint.empty() && f.checkpoint_dir.empty() && !f.checkpoint_every &&
      !f.checkpoint_every_seconds && !f.checkpoint_keep) {
    return;
  }
  json& checkpoint = (*doc)["checkpoint"];
  if (checkpoint.is_string()) checkpoint = json{{"path", checkpoint}};
  if (!checkpoint.is_object()) checkpoint = json::object();
  if (!f.checkpoint.empty()) checkpoint["path"] = f.checkpoint;
  if (!f.checkpoint_dir.empty()) checkpoint["dir"] = f.checkpoint_dir;
  if (f.checkpoint_every) checkpoint["every_iterations"] = *f.checkpoint_every;
  if (f.checkpoint_every_seconds) checkpoint["every_seconds"] = *f.checkpoint_every_seconds;
  if (f.checkpoint_keep) checkpoint["keep"] = *f.checkpoint_keep;
}

// --eval-data, --eval-every and --eval-batch set the spec's "eval" object: --eval-data replaces
// its data (seed and skip_bad then keep their defaults), --eval-every its every_iterations,
// --eval-batch its batch; the rest of an "eval" a spec file gives stays.
Status ApplyEvalFlags(const SubmitFlags& f, json* doc) {
  if (f.eval_data.empty() && !f.eval_every && !f.eval_batch) return Status::Ok();
  json& eval = (*doc)["eval"];
  if (!eval.is_object()) eval = json::object();
  if (!f.eval_data.empty()) {
    ASSIGN_OR_RETURN(const protocol::DataSpec data,
                     protocol::ParseDataFlag(f.eval_data, "--eval-data"));
    eval["data"] = {{"kind", data.kind}};
    if (!data.path.empty()) eval["data"]["path"] = data.path;
  }
  if (f.eval_every) eval["every_iterations"] = *f.eval_every;
  if (f.eval_batch) eval["batch"] = *f.eval_batch;
  return Status::Ok();
}

// Reads the spec argument and applies the flags over it. Errors are messages for stderr.
StatusOr<json> BuildSpec(const SubmitFlags& f) {
  json doc = json::object();
  if (!f.spec.empty()) {
    std::string text;
    if (f.spec == "-") {
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    } else if (!f.spec.empty() && f.spec.front() == '{') {
      text = f.spec;
    } else {
      std::ifstream in(f.spec);
      if (!in) return InvalidArgumentError("cannot read job spec file " + f.spec);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const std::string what = f.spec.front() == '{' ? "job spec" : "job spec " + f.spec;
    ASSIGN_OR_RETURN(doc, ParseJson(text, what));
    if (!doc.is_object()) return InvalidArgumentError(what + " is not a JSON object");
  }
  if (!f.model.empty()) doc["model"] = f.model;
  if (!f.graph_file.empty()) {
    std::ifstream in(f.graph_file);
    if (!in) return InvalidArgumentError("cannot read graph file " + f.graph_file);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    ASSIGN_OR_RETURN(doc["graph"], ParseJson(text, f.graph_file));
  }
  if (!f.name.empty()) doc["name"] = f.name;
  if (f.foreground) doc["role"] = "fg";
  if (f.background) doc["role"] = "bg";
  if (f.global_batch) doc["global_batch"] = *f.global_batch;
  // Either flag replaces a spec file's length, in iterations or in epochs.
  if (f.iterations) {
    doc.erase("epochs");
    doc["iterations"] = *f.iterations;
  }
  if (f.epochs) {
    doc.erase("iterations");
    doc["epochs"] = *f.epochs;
  }
  if (!f.init.empty()) doc["init"] = {{"path", f.init}};
  if (f.gpus) doc["gpus"] = *f.gpus;
  if (f.priority) doc["priority"] = *f.priority;
  if (f.amplification_limit) doc["amplification_limit"] = *f.amplification_limit;
  if (f.seed) doc["seed"] = *f.seed;
  if (f.num_classes) doc["num_classes"] = *f.num_classes;
  if (f.image_size) doc["image_size"] = *f.image_size;
  if (!f.batch_norm.empty()) doc["batch_norm"] = f.batch_norm;
  if (!f.precision.empty()) doc["precision"] = f.precision;
  if (f.accumulation_steps) doc["accumulation_steps"] = *f.accumulation_steps;
  if (!f.gradient_precision.empty()) doc["gradient_precision"] = f.gradient_precision;
  if (!f.memory_format.empty()) doc["memory_format"] = f.memory_format;
  if (!f.optimizer.empty() || f.lr) {
    json& opt = doc["optimizer"];
    if (!opt.is_object()) opt = json::object();
    if (!f.optimizer.empty()) opt["name"] = f.optimizer;
    if (f.lr) opt["lr"] = *f.lr;
  }
  if (!f.data.empty() || !f.data_path.empty() || f.data_skip_bad || !f.data_dtype.empty()) {
    json& data = doc["data"];
    if (!data.is_object()) data = json::object();
    if (!f.data.empty()) data["kind"] = f.data;
    if (!f.data_path.empty()) data["path"] = f.data_path;
    if (f.data_skip_bad) data["skip_bad"] = *f.data_skip_bad;
    if (!f.data_dtype.empty()) data["dtype"] = f.data_dtype;
  }
  if (!f.profile.empty()) doc["profile"] = f.profile;
  if (f.gradient_bucket_mb) doc["gradient_bucket_mb"] = *f.gradient_bucket_mb;
  ApplyCheckpointFlags(f, &doc);
  RETURN_IF_ERROR(ApplyEvalFlags(f, &doc));
  if (f.requeue) doc["requeue_on_failure"] = true;
  if (f.concurrent_branches) doc["concurrent_branches"] = true;
  if (!doc.contains("model") && !doc.contains("graph")) {
    if (f.spec.empty()) return InvalidArgumentError("give a job spec file or --model / --graph");
    return InvalidArgumentError(
        "the job spec names no \"model\" or \"graph\" (or give --model "
        "/ --graph)");
  }
  return doc;
}

StatusOr<v1::JobSpec> BuildSpecMessage(const SubmitFlags& f) {
  ASSIGN_OR_RETURN(const json doc, BuildSpec(f));
  return jobspec::JobSpecProtoFromJson(doc);
}

int RunSubmit(const SubmitFlags& f) {
  // The JSON spec becomes the API message here: a misspelt or mistyped field is reported before
  // anything is sent, and the coordinator applies its one set of defaults to the message.
  StatusOr<v1::JobSpec> spec = BuildSpecMessage(f);
  if (!spec.ok()) {
    std::cerr << "deepool submit: " << spec.status().message() << "\n";
    return kExitInvalidInput;
  }
  StatusOr<CoordinatorConnection> coordinator = ConnectCoordinator(f.client);
  if (!coordinator.ok()) return ReportClientSetupError(coordinator.status());
  const std::string& address = coordinator->address;
  auto& stub = coordinator->stub;
  v1::SubmitJobRequest request;
  *request.mutable_spec() = *std::move(spec);
  v1::SubmitJobResponse response;
  const SubmitCall call = [&](const v1::SubmitJobRequest& req, v1::SubmitJobResponse* resp) {
    auto context = UnaryContext();
    context->set_wait_for_ready(true);  // a reconnecting channel connects during the try
    return stub->SubmitJob(context.get(), req, resp);
  };
  grpc::Status status = SubmitWithRetry(call, request, &response, SubmitRetry{}, std::cerr);
  if (!status.ok()) return ReportRpcError(status, "submit", address);
  if (f.detach) {
    std::cout << (f.client.json ? ToJson(response.job(), false) : response.job_id()) << "\n";
    return kExitOk;
  }
  if (!f.client.json) {
    std::cerr << "submitted " << response.job_id() << " ("
              << Printable(response.job().spec().name())
              << "); waiting for it to finish (Ctrl-C stops waiting, the job keeps running)\n";
  }
  WaitOptions wait;
  wait.json = f.client.json;
  return WaitForJobs(*stub, address, {response.job_id()}, wait, std::cout);
}

struct StatusFlags {
  ClientOptions client;
  std::string job;
  bool watch = false;
  bool why = false;
  int limit = 100;
  std::string page;  // a next_page_token: list from there
};

// ListJobs page after page, into one response, until `want` jobs (0: all) or the list's end;
// the response's next_page_token continues from where it stopped ("": the list ended).
grpc::Status ListJobsPaged(v1::CoordinatorService::Stub& stub, v1::ListJobsRequest request,
                           int want, v1::ListJobsResponse* all) {
  all->Clear();
  while (true) {
    if (want > 0) request.set_limit(want - all->jobs_size());
    v1::ListJobsResponse page;
    auto context = UnaryContext();
    grpc::Status status = stub.ListJobs(context.get(), request, &page);
    if (!status.ok()) return status;
    for (v1::Job& job : *page.mutable_jobs()) *all->add_jobs() = std::move(job);
    *all->mutable_summary() = page.summary();
    all->set_next_page_token(page.next_page_token());
    if (page.next_page_token().empty() || (want > 0 && all->jobs_size() >= want)) {
      return grpc::Status::OK;
    }
    request.set_page_token(page.next_page_token());
  }
}

// status JOB --why: the job, the pending jobs the caller may see, and the nodes, explained.
int WhyOfJob(v1::CoordinatorService::Stub& stub, const std::string& address,
             const std::string& job_id) {
  v1::GetJobRequest job_request;
  job_request.set_job_id(job_id);
  v1::Job job;
  auto job_context = UnaryContext();
  grpc::Status status = stub.GetJob(job_context.get(), job_request, &job);
  if (!status.ok()) return ReportRpcError(status, "job " + job_id, address);
  v1::ListJobsRequest jobs_request;
  jobs_request.add_states(v1::JOB_STATE_PENDING);
  v1::ListJobsResponse jobs;
  status = ListJobsPaged(stub, jobs_request, /*want=*/0, &jobs);
  if (!status.ok()) return ReportRpcError(status, "list jobs", address);
  v1::ListNodesResponse nodes;
  auto nodes_context = UnaryContext();
  status = stub.ListNodes(nodes_context.get(), v1::ListNodesRequest(), &nodes);
  if (!status.ok()) return ReportRpcError(status, "list nodes", address);
  std::cout << WhyText(job, {jobs.jobs().begin(), jobs.jobs().end()},
                       {nodes.nodes().begin(), nodes.nodes().end()}, NowWallMillis(),
                       jobs.summary());
  return kExitOk;
}

int StatusOfJob(v1::CoordinatorService::Stub& stub, const std::string& address,
                const StatusFlags& f) {
  auto show = [&](const v1::Job& job) {
    if (f.client.json) {
      std::cout << ToJson(job, !f.watch) << std::endl;
      return;
    }
    v1::GetJobPlanResponse plan;
    v1::GetJobPlanRequest plan_request;
    plan_request.set_job_id(job.job_id());
    bool have_plan = false;
    if (job.has_plan()) {
      auto ctx = UnaryContext();
      have_plan = stub.GetJobPlan(ctx.get(), plan_request, &plan).ok();
    }
    if (f.watch && isatty(STDOUT_FILENO)) std::cout << "\x1b[H\x1b[2J";
    std::cout << JobDetail(job, have_plan ? &plan : nullptr, NowWallMillis()) << std::flush;
    if (f.watch && !isatty(STDOUT_FILENO)) std::cout << "\n";
  };
  if (!f.watch) {
    v1::GetJobRequest request;
    request.set_job_id(f.job);
    v1::Job job;
    auto context = UnaryContext();
    grpc::Status status = stub.GetJob(context.get(), request, &job);
    if (!status.ok()) return ReportRpcError(status, "job " + f.job, address);
    show(job);
    return kExitOk;
  }
  grpc::ClientContext context;
  v1::WatchJobRequest request;
  request.set_job_id(f.job);
  auto reader = stub.WatchJob(&context, request);
  v1::Job job;
  while (reader->Read(&job)) show(job);
  grpc::Status status = reader->Finish();
  if (!status.ok()) return ReportRpcError(status, "watch " + f.job, address);
  return kExitOk;
}

int RunStatus(const StatusFlags& f) {
  StatusOr<CoordinatorConnection> coordinator = ConnectCoordinator(f.client);
  if (!coordinator.ok()) return ReportClientSetupError(coordinator.status());
  const std::string& address = coordinator->address;
  auto& stub = coordinator->stub;
  if (f.why) {
    if (f.job.empty() || f.watch || f.client.json) {
      std::cerr << "deepool status: --why needs a job id and goes without --watch and --json\n";
      return kExitUsage;
    }
    return WhyOfJob(*stub, address, f.job);
  }
  if (!f.job.empty()) return StatusOfJob(*stub, address, f);
  while (true) {
    v1::ListJobsRequest request;
    request.set_page_token(f.page);
    v1::ListJobsResponse response;
    grpc::Status status = ListJobsPaged(*stub, request, f.limit, &response);
    if (!status.ok()) return ReportRpcError(status, "list jobs", address);
    std::vector<v1::Job> jobs(response.jobs().begin(), response.jobs().end());
    if (f.client.json) {
      std::cout << ToJson(response, !f.watch) << std::endl;
    } else {
      if (f.watch && isatty(STDOUT_FILENO)) std::cout << "\x1b[H\x1b[2J";
      std::cout << JobsTable(jobs);
      if (response.has_summary()) std::cout << "\n" << ClusterSummaryText(response.summary());
      std::cout << std::flush;
      if (!f.watch && !response.next_page_token().empty()) {
        std::cerr << "older jobs: deepool status --page " << response.next_page_token() << "\n";
      }
      if (f.watch && !isatty(STDOUT_FILENO)) std::cout << "\n";
    }
    if (!f.watch) return kExitOk;
    bool all_done = !jobs.empty() && std::all_of(jobs.begin(), jobs.end(), [](const v1::Job& j) {
      return IsTerminal(j.state());
    });
    if (all_done) return kExitOk;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int RunCancel(const ClientOptions& client, const std::string& job_id, const std::string& reason) {
  StatusOr<CoordinatorConnection> coordinator = ConnectCoordinator(client);
  if (!coordinator.ok()) return ReportClientSetupError(coordinator.status());
  const std::string& address = coordinator->address;
  auto& stub = coordinator->stub;
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_reason(reason);
  v1::Job job;
  auto context = UnaryContext();
  grpc::Status status = stub->CancelJob(context.get(), request, &job);
  if (!status.ok()) return ReportRpcError(status, "cancel " + job_id, address);
  if (client.json) {
    std::cout << ToJson(job) << "\n";
  } else {
    std::cout << job.job_id() << " " << StateName(job.state())
              << (job.reason().empty() ? "" : ": " + Printable(job.reason())) << "\n";
  }
  return kExitOk;
}

int RunResize(const ClientOptions& client, const std::string& job_id, int gpus) {
  StatusOr<CoordinatorConnection> coordinator = ConnectCoordinator(client);
  if (!coordinator.ok()) return ReportClientSetupError(coordinator.status());
  v1::ResizeJobRequest request;
  request.set_job_id(job_id);
  request.set_gpus(gpus);
  v1::Job job;
  auto context = UnaryContext();
  grpc::Status status = coordinator->stub->ResizeJob(context.get(), request, &job);
  if (!status.ok()) return ReportRpcError(status, "resize " + job_id, coordinator->address);
  if (client.json) {
    std::cout << ToJson(job) << "\n";
  } else if (job.resize_to() > 0) {
    std::string every;
    if (job.spec().checkpoint_every_iterations() > 0) {
      every =
          " (every " + std::to_string(job.spec().checkpoint_every_iterations()) + " iterations)";
    }
    std::cout << job.job_id() << " " << StateName(job.state()) << " on " << job.spec().gpus()
              << " devices: stops at its next checkpoint" << every << ", then resumes on "
              << job.resize_to() << "\n";
  } else {
    std::cout << job.job_id() << " " << StateName(job.state()) << ": runs on " << job.spec().gpus()
              << " devices\n";
  }
  return kExitOk;
}

int RunLogs(const ClientOptions& client, const std::string& job_id, bool follow, int tail) {
  StatusOr<CoordinatorConnection> coordinator = ConnectCoordinator(client);
  if (!coordinator.ok()) return ReportClientSetupError(coordinator.status());
  const std::string& address = coordinator->address;
  auto& stub = coordinator->stub;
  grpc::ClientContext context;
  if (!follow) context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::GetJobLogsRequest request;
  request.set_job_id(job_id);
  request.set_follow(follow);
  request.set_tail_lines(tail);
  auto reader = stub->GetJobLogs(&context, request);
  v1::LogEntry entry;
  while (reader->Read(&entry)) {
    if (client.json) {
      std::cout << ToJson(entry, false) << "\n";
    } else {
      std::string who = entry.node_id().empty() ? "coordinator" : entry.node_id();
      if (entry.rank() >= 0) who += " r" + std::to_string(entry.rank());
      std::cout << FormatWallTime(entry.time_ms()) << " [" << who << "] " << Printable(entry.line())
                << "\n";
    }
    std::cout.flush();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return ReportRpcError(status, "logs of " + job_id, address);
  return kExitOk;
}

RegisterCommand submit_command([](CLI::App& app, CommandResult& result) {
  auto flags = std::make_shared<SubmitFlags>();
  CLI::App* cmd = app.add_subcommand(
      "submit", "Submit a training job (a JSON job spec file, inline JSON, '-', or flags)");
  cmd->add_option("spec", flags->spec, "Job spec: FILE, '-' (stdin) or inline JSON");
  cmd->add_option("--model", flags->model, "Zoo model name (deepool model list)");
  cmd->add_option("--graph", flags->graph_file, "A layer-graph JSON file instead of --model");
  cmd->add_option("--name", flags->name, "Job name");
  cmd->add_option("--global-batch,--batch", flags->global_batch, "Global batch size");
  cmd->add_option("--iterations", flags->iterations, "Training iterations");
  cmd->add_option("--epochs", flags->epochs,
                  "FG, instead of --iterations: passes over the training set (the executors "
                  "count the iterations from its size; needs executor protocol 5)");
  cmd->add_option("--gpus", flags->gpus, "Devices to plan over (FG); 1 for BG");
  cmd->add_option("--amplification-limit,--amp", flags->amplification_limit,
                  "FG: GPU-seconds per iteration / single-GPU iteration time (0: unconstrained)");
  cmd->add_option("--priority", flags->priority, "Higher runs first");
  cmd->add_option("--optimizer", flags->optimizer, "SGD, Adam or AdamW (sgd, adam, adamw)");
  cmd->add_option("--lr", flags->lr, "Learning rate");
  cmd->add_option("--data", flags->data, "Synthetic, cifar10, image_folder or tokens");
  cmd->add_option("--data-path", flags->data_path,
                  "On every worker: cifar10's file or folder; image_folder's folder of class "
                  "folders or path<TAB>label list file; tokens' file of token ids");
  cmd->add_option("--data-dtype", flags->data_dtype,
                  "Tokens: the ids' type, uint16 (default) or uint32");
  cmd->add_option("--data-skip-bad", flags->data_skip_bad,
                  "Image_folder: unreadable images skipped before the job fails (default 0)");
  cmd->add_option("--eval-data", flags->eval_data,
                  "FG: evaluate on this held-out set, on every worker: synthetic, cifar10:PATH, "
                  "image_folder:PATH or tokens:PATH (default: no evaluation; needs executor "
                  "protocol 4)");
  cmd->add_option("--eval-every", flags->eval_every,
                  "Iterations between evaluations on --eval-data (default 0: only after the "
                  "last)");
  cmd->add_option("--eval-batch", flags->eval_batch,
                  "Samples per evaluation pass (default: the global batch); evaluation keeps no "
                  "activations for backward, so a larger batch usually evaluates faster");
  cmd->add_option("--init", flags->init,
                  "Start from these weights, a path on every worker: a state_dict file (torch.save "
                  "of a dict) or a safetensors file, loaded strictly (needs executor protocol 6)");
  cmd->add_option("--precision", flags->precision,
                  "What the job trains at: fp32, tf32, bf16 (autocast, fp32 master weights) or "
                  "fp16 (also loss scaling); anything but fp32 needs executor protocol 6 "
                  "(default: bf16 on devices with bf16 math, fp32 on CPUs)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
  cmd->add_option("--accumulation-steps", flags->accumulation_steps,
                  "FG: each iteration is N forward and backward passes of global-batch / N "
                  "samples, gradients summed and all-reduced once; the plan is for one pass "
                  "(default 1; above 1 needs executor protocol 8)");
  cmd->add_option("--gradient-precision", flags->gradient_precision,
                  "FG: the width gradient all-reduces move, fp32 (default) or bf16 (gradients "
                  "and the step stay fp32; bf16 needs executor protocol 8)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--memory-format", flags->memory_format,
                  "FG: the layout of 4-D tensors, auto (default: channels_last on CUDA for a "
                  "convolutional model at bf16 or fp16), contiguous or channels_last (either "
                  "of the last two needs executor protocol 9)")
      ->check(CLI::IsMember({"auto", "contiguous", "channels_last"}));
  cmd->add_option("--seed", flags->seed, "Random seed");
  cmd->add_option("--profile", flags->profile, "Measured (default) or analytical");
  cmd->add_option("--checkpoint", flags->checkpoint, "Where rank 0 writes the final checkpoint");
  cmd->add_option("--checkpoint-dir", flags->checkpoint_dir,
                  "Periodic checkpoints here, on storage every worker sees; a requeued or "
                  "resized job resumes from the newest whole one");
  cmd->add_option("--checkpoint-every", flags->checkpoint_every,
                  "Iterations between checkpoints in --checkpoint-dir (default 0: only at the "
                  "end)");
  cmd->add_option("--checkpoint-every-seconds", flags->checkpoint_every_seconds,
                  "Seconds between checkpoints in --checkpoint-dir (default 0: none by time)");
  // Defaults shown are the spec's own (jobspec/job_spec.h), which the coordinator applies.
  const jobspec::JobSpec defaults;
  cmd->add_option("--checkpoint-keep", flags->checkpoint_keep,
                  "Checkpoints kept in --checkpoint-dir (default " +
                      std::to_string(defaults.checkpoint_keep) + ")");
  std::ostringstream bucket_help;
  bucket_help << "Gradient bucket cap in MiB, as DDP's bucket_cap_mb (default "
              << defaults.gradient_bucket_mb << ")";
  cmd->add_option("--gradient-bucket-mb", flags->gradient_bucket_mb, bucket_help.str());
  cmd->add_option("--num-classes", flags->num_classes, "Zoo model option");
  cmd->add_option("--image-size", flags->image_size, "Zoo model option");
  cmd->add_option("--batch-norm", flags->batch_norm,
                  "Synchronized (default: statistics summed over a layer's devices, training "
                  "equals one device's) or per_device (each device's own batch, as DDP without "
                  "SyncBatchNorm: cheaper, not the same training)")
      ->check(CLI::IsMember({"synchronized", "per_device"}));
  cmd->add_flag("--concurrent-branches", flags->concurrent_branches,
                "FG: let parallel branches (Inception's towers, residual shortcuts) run side by "
                "side on disjoint devices where the planner finds that faster");
  cmd->add_flag("--requeue-on-failure", flags->requeue, "Requeue instead of fail on node loss");
  auto* fg = cmd->add_flag("--foreground,--fg", flags->foreground, "A foreground job (default)");
  auto* bg = cmd->add_flag("--background,--bg", flags->background,
                           "A background job in the FG jobs' idle device time");
  fg->excludes(bg);
  cmd->add_flag("--detach,-d", flags->detach, "Print the job id and return without waiting");
  AddClientOptions(cmd, &flags->client);
  cmd->callback([flags, &result] { result.exit_code = RunSubmit(*flags); });
});

RegisterCommand status_command([](CLI::App& app, CommandResult& result) {
  auto flags = std::make_shared<StatusFlags>();
  CLI::App* cmd = app.add_subcommand("status", "The jobs table, or one job in detail");
  cmd->add_option("job", flags->job, "A job id: show it in detail with its plan summary");
  cmd->add_flag("--watch,-w", flags->watch, "Refresh until the jobs shown are finished");
  cmd->add_flag("--why", flags->why,
                "With a job id: why it waits (the scheduler's last decision, its place in the "
                "queue, free devices against what it needs, nodes taking no work)");
  cmd->add_option("--limit", flags->limit,
                  "Most jobs listed, newest first (0: all, fetched 1,000 at a time)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--page", flags->page,
                  "Start below the jobs already seen: the token the last listing printed");
  AddClientOptions(cmd, &flags->client);
  cmd->callback([flags, &result] { result.exit_code = RunStatus(*flags); });
});

RegisterCommand cancel_command([](CLI::App& app, CommandResult& result) {
  auto client = std::make_shared<ClientOptions>();
  auto job = std::make_shared<std::string>();
  auto reason = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("cancel", "Cancel a job in any non-terminal state");
  cmd->add_option("job", *job, "Job id")->required();
  cmd->add_option("--reason", *reason, "Recorded in the job's history");
  AddClientOptions(cmd, client.get());
  cmd->callback([=, &result] { result.exit_code = RunCancel(*client, *job, *reason); });
});

RegisterCommand resize_command([](CLI::App& app, CommandResult& result) {
  auto client = std::make_shared<ClientOptions>();
  auto job = std::make_shared<std::string>();
  auto gpus = std::make_shared<int>(0);
  CLI::App* cmd = app.add_subcommand(
      "resize",
      "Run a FG job on another number of devices, the global batch kept: a running job stops "
      "at its next periodic checkpoint and resumes from it on the new count (it needs "
      "periodic checkpoints: checkpoint.dir with every_iterations or every_seconds, or the "
      "coordinator's --checkpoint-root); a pending one takes it at once");
  cmd->add_option("job", *job, "Job id")->required();
  cmd->add_option("--gpus", *gpus, "The device count to run on")
      ->required()
      ->check(CLI::Range(1, 4096));
  AddClientOptions(cmd, client.get());
  cmd->callback([=, &result] { result.exit_code = RunResize(*client, *job, *gpus); });
});

RegisterCommand logs_command([](CLI::App& app, CommandResult& result) {
  auto client = std::make_shared<ClientOptions>();
  auto job = std::make_shared<std::string>();
  auto follow = std::make_shared<bool>(false);
  auto tail = std::make_shared<int>(0);
  CLI::App* cmd = app.add_subcommand("logs", "A job's executor and worker log lines");
  cmd->add_option("job", *job, "Job id")->required();
  cmd->add_flag("--follow,-f", *follow, "Keep streaming until the job finishes");
  cmd->add_option("--tail", *tail, "Only the last N stored lines (0: all)");
  AddClientOptions(cmd, client.get());
  cmd->callback([=, &result] { result.exit_code = RunLogs(*client, *job, *follow, *tail); });
});

}  // namespace
}  // namespace deepool::cli
