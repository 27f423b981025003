#include "worker/runtime/executor_process.h"

#include <atomic>
#include <chrono>
#include <cmath>

#include "common/clock.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "worker/runtime/background/background_host.h"
#include "worker/runtime/background/multiplex_attach.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/checkpoints/checkpoint_schedule.h"
#include "worker/runtime/checkpoints/initial_weights.h"
#include "worker/runtime/checkpoints/periodic_checkpoints.h"
#include "worker/runtime/communication/communicator_gloo.h"
#include "worker/runtime/communication/communicator_nccl.h"
#include "worker/runtime/communication/communicator_staged.h"
#include "worker/runtime/data/micro_batches.h"
#include "worker/runtime/devices/device.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/executor_commands.h"
#include "worker/runtime/executor_events.h"
#include "worker/runtime/profiling/span_recorder.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {
namespace {

double WallMicros() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The rank's communicator: NCCL on CUDA (Gloo through host buffers when ranks share the GPU),
// Gloo on CPU. Rank 0 started with store port 0 hosts the store and announces its port on `out`
// (the launcher's store_ready event).
StatusOr<std::unique_ptr<Communicator>> Connect(const ExecutorProcessOptions& options,
                                                const RunSpec& spec, const DeviceSpec& device,
                                                std::ostream& out) {
  StatusOr<HostPort> store = ParseHostPort(options.store);
  if (!store.ok()) return store.status().WithContext("--store");
  CommOptions comm_options;
  comm_options.rank = options.rank;
  comm_options.world_size = options.world_size;
  comm_options.store_host = store->host;
  comm_options.store_port = store->port;
  comm_options.bind_host = options.bind_host;
  comm_options.timeout = std::chrono::seconds(options.timeout_s);
  // The naive collocation baseline (priority_streams off) keeps every stream at the default
  // priority, the FG rank's NCCL streams included.
  if (spec.background && spec.background->SharesRank(options.rank)) {
    comm_options.high_priority_streams = spec.background->sharing.priority_streams;
  }
  auto on_store_ready = [&](int port) {
    if (store->port == 0) out << StoreReadyEvent(store->host, port) << std::endl;
  };
  if (device.cuda && options.share_gpu) return ConnectStaged(comm_options, on_store_ready);
  if (device.cuda) return ConnectNccl(comm_options, on_store_ready);
  if (options.share_gpu) return InvalidArgumentError("--share-gpu needs a CUDA device");
  return ConnectGloo(comm_options, on_store_ready);
}

// A BG job beside the FG rank: either fixed by the run spec (`sharing`), or attached and
// detached by commands while the rank trains (`host`, only with a command channel). The
// communicator is wrapped so that waits on it become the BG job's time.
struct BackgroundSide {
  std::unique_ptr<DeviceSharing> sharing;
  std::unique_ptr<BackgroundHost> host;
  std::unique_ptr<CommandReader> commands;
};

StatusOr<BackgroundSide> AttachBackground(const ExecutorProcessOptions& options,
                                          const RunSpec& spec, const DeviceSpec& device,
                                          std::unique_ptr<Communicator>* comm) {
  BackgroundSide side;
  if (spec.background && spec.background->SharesRank(options.rank)) {
    ASSIGN_OR_RETURN(side.sharing, DeviceSharing::Attach(*spec.background, device.torch_device(),
                                                         comm, SystemClock::Get()));
  } else if (options.command_fd >= 0) {
    SharingOptions host_options;
    if (!options.background_sharing.empty()) {
      ASSIGN_OR_RETURN(host_options.mode, ParseSharingMode(options.background_sharing));
    }
    ASSIGN_OR_RETURN(side.host, BackgroundHost::Create(device.torch_device(), host_options, comm,
                                                       SystemClock::Get()));
  }
  return side;
}

// Applies one executor command: a trace request goes to the recorder, a stop sets
// `stop_asked` for the next periodic checkpoint; attach and detach go to the BG host, and are
// refused without one (the run spec fixed this rank's BG job, if any).
void HandleCommand(BackgroundHost* host, SpanRecorder* spans, std::atomic<bool>* stop_asked,
                   const std::string& line) {
  StatusOr<ExecutorCommand> command = ParseExecutorCommand(line);
  if (!command.ok()) {
    DP_LOG_WARN("ignored executor command: {}", command.status().ToString());
    return;
  }
  if (command->kind == ExecutorCommand::Kind::kStopAtCheckpoint) {
    if (!stop_asked->exchange(true)) DP_LOG_INFO("asked to stop at the next periodic checkpoint");
    return;
  }
  if (command->kind == ExecutorCommand::Kind::kTrace) {
    DP_LOG_INFO("trace request {}: {} iterations from iteration {}", command->trace.request_id,
                command->trace.iterations, command->trace.first_iteration);
    spans->Request(command->trace);
    return;
  }
  if (!host) {
    DP_LOG_WARN("ignored executor command (the run spec attaches this rank's BG job): {}",
                line.substr(0, 200));
    return;
  }
  if (command->kind == ExecutorCommand::Kind::kAttachBackground) {
    Status attached = host->Attach(command->background);
    if (!attached.ok()) host->Reject(command->job_id, attached.ToString());
  } else {
    Status detached = host->Detach(command->job_id);
    if (!detached.ok()) DP_LOG_WARN("detach_background: {}", detached.ToString());
  }
}

// Starts reading commands, after the executor is built so that an attached BG job does not
// compete with that. Commands are read whatever the rank runs, so that a writer never blocks on
// a full pipe.
void StartCommands(int command_fd, BackgroundSide* side, SpanRecorder* spans,
                   std::atomic<bool>* stop_asked) {
  if (command_fd < 0) return;
  side->commands = std::make_unique<CommandReader>(
      command_fd, [h = side->host.get(), spans, stop_asked](const std::string& line) {
        HandleCommand(h, spans, stop_asked, line);
      });
}

void PrintTraceEvents(const std::vector<protocol::TraceEvent>& events, std::ostream& out) {
  for (const protocol::TraceEvent& e : events) out << protocol::ExecutorEventToJson(e) << '\n';
  if (!events.empty()) out.flush();
}

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// What TrainLoop needs beside the executor.
struct LoopContext {
  const RunSpec& spec;
  int rank;
  Communicator& comm;
  torch::Device device;
  int64_t first_iteration;
  const std::atomic<bool>& stop_asked;  // by a "stop_at_checkpoint" command
  DataSource* eval_data;                // the run spec's held-out set; null without "eval"
  int64_t data_samples;                 // the training set's size
};

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A periodic checkpoint after `done` iterations, when `schedule` calls for one (a time-based
// one after the ranks agree on the time). A failed one is logged and training goes on: the
// previous whole checkpoint still stands. True when the ranks stop here (a stop was asked of one
// of them; never after the last iteration, which ends anyway).
StatusOr<bool> MaybeCheckpoint(const LoopContext& loop, CheckpointSchedule& schedule,
                               Executor& executor, int64_t done) {
  if (!loop.spec.checkpoints) return false;
  const CheckpointSchedule::Step step = schedule.After(done);
  if (step == CheckpointSchedule::Step::kNothing) return false;
  if (step == CheckpointSchedule::Step::kAgree) {
    ASSIGN_OR_RETURN(double elapsed, MeanOverRanks(loop.comm, loop.device,
                                                   schedule.SecondsSinceLast(SteadySeconds())));
    if (!schedule.Agreed(done, elapsed)) return false;
  }
  ASSIGN_OR_RETURN(CheckpointOutcome outcome,
                   WriteTrainingCheckpoint(loop.spec, loop.rank, done, loop.data_samples, executor,
                                           loop.comm, loop.device, loop.stop_asked.load()));
  schedule.Written(done, SteadySeconds());
  if (!outcome.written.ok()) DP_LOG_WARN("rank {}: {}", loop.rank, outcome.written.ToString());
  return outcome.stop && done < loop.spec.iterations;
}

// An epochs run's iterations, from its training set's size. The ranks must agree on it, or
// some would stop while others wait for them: a rank whose set differs in size from the mean
// of all ranks' fails, and so then does every rank (a second sum), naming the sizes.
StatusOr<int64_t> CountEpochIterations(const RunSpec& spec, int64_t samples, Communicator& comm,
                                       const torch::Device& device) {
  ASSIGN_OR_RETURN(const double mean, MeanOverRanks(comm, device, static_cast<double>(samples)));
  ASSIGN_OR_RETURN(const double differing,
                   MeanOverRanks(comm, device, mean == static_cast<double>(samples) ? 0.0 : 1.0));
  if (differing > 0) {
    return FailedPreconditionError(fmt::format(
        "epochs: the ranks' training sets differ in size (this rank's has {} samples, the "
        "ranks' mean is {}): every node must hold the same data set",
        samples, mean));
  }
  ASSIGN_OR_RETURN(const int64_t iterations,
                   protocol::IterationsForEpochs(spec.epochs, samples, spec.IterationBatch()));
  if (comm.rank() == 0) {
    DP_LOG_INFO("{} epochs of {} samples at a global batch of {}: {} iterations", spec.epochs,
                samples, spec.IterationBatch(), iterations);
  }
  return iterations;
}

// Evaluates the held-out set after `done` iterations when the run spec asks for it then: every
// eval.every_iterations iterations and after the last. Rank 0 prints the result, as an event and
// as a log line.
Status MaybeEvaluate(const LoopContext& loop, Executor& executor, int64_t done, std::ostream& out) {
  if (loop.eval_data == nullptr) return Status::Ok();
  const int64_t every = loop.spec.eval->every_iterations;
  if (done != loop.spec.iterations && (every == 0 || done % every != 0)) return Status::Ok();
  ASSIGN_OR_RETURN(EvaluationStats stats,
                   executor.Evaluate(loop.eval_data, loop.eval_data->num_samples()));
  if (loop.rank != 0) return Status::Ok();
  const bool tokens = stats.predictions > stats.samples;  // a sequence output: per token
  DP_LOG_INFO(
      "evaluation after iteration {}: top-1 {:.2f} %, top-5 {:.2f} %{}, loss {:.4f}{} ({} "
      "samples, {:.0f} ms)",
      done, 100 * stats.top1, 100 * stats.top5, tokens ? " of tokens" : "", stats.loss,
      tokens ? fmt::format(", perplexity {:.2f}", std::exp(stats.loss)) : "", stats.samples,
      stats.evaluation_ms);
  out << EvaluationEvent(loop.rank, done, stats) << std::endl;
  return Status::Ok();
}

// Runs the iterations, printing each one's event (decorated with the BG job's progress).
// Returns the iteration the ranks stopped at when asked to, nullopt when they ran to the end.
StatusOr<std::optional<int64_t>> TrainLoop(const LoopContext& loop, Executor& executor,
                                           BackgroundSide& side, SpanRecorder& spans,
                                           std::ostream& out) {
  const RunSpec& spec = loop.spec;
  std::optional<int64_t> stopped;
  CheckpointSchedule schedule(spec.checkpoints ? spec.checkpoints->every_iterations : 0,
                              spec.checkpoints ? spec.checkpoints->every_seconds : 0,
                              loop.first_iteration, spec.iterations, SteadySeconds());
  if (side.sharing) side.sharing->Start();
  for (int64_t i = loop.first_iteration; i < spec.iterations && !stopped; ++i) {
    spans.BeginIteration(i);
    ASSIGN_OR_RETURN(IterationStats stats, executor.Step(i));
    PrintTraceEvents(spans.TakeFinished(loop.rank), out);
    std::string line =
        IterationEvent(loop.rank, stats, spec.iterations, PeakMemoryBytes(loop.device));
    if (side.host) {
      for (const std::string& l : side.host->AfterIteration(line)) out << l << '\n';
      out.flush();
    } else {
      out << (side.sharing ? side.sharing->Decorate(line) : line) << std::endl;
    }
    RETURN_IF_ERROR(MaybeEvaluate(loop, executor, i + 1, out));
    ASSIGN_OR_RETURN(bool stop, MaybeCheckpoint(loop, schedule, executor, i + 1));
    if (stop) stopped = i + 1;
  }
  if (side.commands) side.commands->Stop();
  PrintTraceEvents(spans.Finish(loop.rank), out);
  if (side.sharing) side.sharing->Finish();  // the BG job never outlives the FG rank
  if (side.host) {
    for (const std::string& l : side.host->Finish()) out << l << '\n';
    out.flush();
  }
  return stopped;
}

// Each rank holds only its layers; ranks write "<path>.rank<R>" files and rank 0 writes the
// path itself when it holds every layer (e.g. data parallelism). Returns the file written.
StatusOr<std::string> WriteCheckpoint(const RunSpec& spec, int rank, const Executor& executor) {
  std::vector<std::shared_ptr<LayerModule>> modules(static_cast<size_t>(spec.graph->num_layers()));
  bool holds_all = true;
  for (int id = 0; id < spec.graph->num_layers(); ++id) {
    auto found = executor.modules().find(id);
    if (found != executor.modules().end()) {
      modules[static_cast<size_t>(id)] = found->second;
    } else {
      holds_all = false;
    }
  }
  ASSIGN_OR_RETURN(auto state, CollectStateDict(*spec.graph, modules));
  std::string path = holds_all && rank == 0
                         ? *spec.checkpoint_path
                         : *spec.checkpoint_path + ".rank" + std::to_string(rank);
  RETURN_IF_ERROR(SaveCheckpoint(path, state));
  return path;
}

Status Train(const ExecutorProcessOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(RunSpec spec, ReadRunSpecFile(options.run_spec_path));
  ASSIGN_OR_RETURN(DeviceSpec device, ParseDevice(options.device));
  ASSIGN_OR_RETURN(auto context, MakeDeviceContext(device));
  if (options.timeout_s < 1) return InvalidArgumentError("--timeout-s must be >= 1");
  if (options.cpu_threads < 0) return InvalidArgumentError("--threads must be >= 0");
  if (!device.cuda && options.cpu_threads > 0) at::set_num_threads(options.cpu_threads);
  // Before the command reader (in `side`) that hands it requests, so it outlives that. On CUDA
  // the spans are the host's: when work was posted and how long the host waited.
  SpanRecorder spans(SystemClock::Get(), WallMicros());
  std::atomic<bool> stop_asked{false};  // likewise
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Connect(options, spec, device, out));
  ASSIGN_OR_RETURN(BackgroundSide side, AttachBackground(options, spec, device, &comm));
  if (side.sharing) side.sharing->TraceUnits(&spans);
  if (side.host) side.host->TraceUnits(&spans);
  // An iteration's rows, all its accumulation passes' (RunSpec::IterationBatch).
  ASSIGN_OR_RETURN(auto source, MakeDataSource(spec.data, *spec.graph, spec.IterationBatch()));
  if (spec.epochs > 0) {
    ASSIGN_OR_RETURN(spec.iterations, CountEpochIterations(spec, source->num_samples(), *comm,
                                                           device.torch_device()));
  }
  // Each pass reads its micro-batch (steps 1: the source itself); the next pass's rows are
  // produced while this one trains (pinned for a GPU).
  ASSIGN_OR_RETURN(source, MicroBatches(std::move(source), spec.accumulation_steps));
  std::unique_ptr<DataSource> data =
      WithPrefetch(std::move(source), device.cuda ? HostMemory::kPinned : HostMemory::kPageable);
  std::unique_ptr<DataSource> eval_data;
  if (spec.eval) {
    // Rows per pass: eval.batch, or the global batch (Executor::Evaluate scales the plan to it).
    auto eval_source =
        MakeDataSource(spec.eval->data, *spec.graph, spec.eval->PassBatch(spec.plan.global_batch),
                       DataUse::kEvaluation);
    if (!eval_source.ok()) return eval_source.status().WithContext("eval.data");
    eval_data = WithPrefetch(std::move(*eval_source),
                             device.cuda ? HostMemory::kPinned : HostMemory::kPageable);
  }
  ExecutorOptions executor_options;
  executor_options.seed = spec.seed;
  executor_options.optimizer = spec.optimizer;
  executor_options.total_iterations = spec.iterations;
  executor_options.gradient_bucket_bytes = planner::GradientBucketBytes(spec.gradient_bucket_mb);
  executor_options.sync_batch_norm = spec.sync_batch_norm;
  executor_options.precision = spec.precision;
  executor_options.gradient_precision = spec.gradient_precision;
  executor_options.accumulation_steps = spec.accumulation_steps;
  executor_options.memory_format = spec.memory_format;  // auto: Create resolves it
  executor_options.device = device.torch_device();
  if (device.cuda) executor_options.synchronize = [ctx = context.get()] { ctx->Synchronize(); };
  executor_options.spans = &spans;
  ASSIGN_OR_RETURN(auto executor,
                   Executor::Create(*spec.graph, spec.plan, comm.get(), data.get(),
                                    BuildLayerModule, executor_options, SystemClock::Get()));
  if (spec.init_path) {
    ASSIGN_OR_RETURN(const int tensors,
                     LoadInitialWeights(*spec.init_path, *spec.graph, *executor));
    // A log line on stdout, so that it reaches the job's logs.
    if (options.rank == 0) {
      out << "initialised from " << *spec.init_path << " (" << tensors << " tensors)" << std::endl;
    }
  }
  ASSIGN_OR_RETURN(int64_t first_iteration,
                   ResumeFromCheckpoint(spec, options.rank, data->num_samples(), *executor, *comm,
                                        device.torch_device(), out));
  StartCommands(options.command_fd, &side, &spans, &stop_asked);
  const LoopContext loop{spec,
                         options.rank,
                         *comm,
                         device.torch_device(),
                         first_iteration,
                         stop_asked,
                         eval_data.get(),
                         data->num_samples()};
  ASSIGN_OR_RETURN(std::optional<int64_t> stopped, TrainLoop(loop, *executor, side, spans, out));
  if (stopped) {  // the job goes on elsewhere from this checkpoint: no final export
    out << StoppedEvent(options.rank, *stopped) << std::endl;
    return Status::Ok();
  }
  std::optional<std::string> checkpoint;
  std::optional<double> checkpoint_ms;
  if (spec.checkpoint_path) {
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(checkpoint, WriteCheckpoint(spec, options.rank, *executor));
    checkpoint_ms = MillisSince(start);
  }
  out << DoneEvent(options.rank, spec.iterations, checkpoint, checkpoint_ms) << std::endl;
  return Status::Ok();
}

}  // namespace

Status RunExecutorProcess(const ExecutorProcessOptions& options, std::ostream& out) {
  Status status;
  try {
    status = Train(options, out);
  } catch (const std::exception& e) {
    status = InternalError(std::string("unexpected exception: ") + e.what());
  }
  if (!status.ok()) {
    // The whole text (a libtorch stack trace, say) goes to the log, the rank's log file; the
    // event carries its first line and code.
    DP_LOG_ERROR("rank {}: {}", options.rank, status.ToString());
    out << ErrorEvent(options.rank, status) << std::endl;
  }
  return status;
}

}  // namespace deepool::worker
