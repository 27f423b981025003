#include "worker/runtime/executor_process.h"

#include "common/clock.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "worker/runtime/background_host.h"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/communicator_gloo.h"
#include "worker/runtime/communicator_nccl.h"
#include "worker/runtime/device.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/executor_commands.h"
#include "worker/runtime/executor_events.h"
#include "worker/runtime/multiplex_attach.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {
namespace {

Status Train(const ExecutorProcessOptions& options, std::ostream& out) {
  ASSIGN_OR_RETURN(RunSpec spec, ReadRunSpecFile(options.run_spec_path));
  ASSIGN_OR_RETURN(DeviceSpec device, ParseDevice(options.device));
  ASSIGN_OR_RETURN(auto context, MakeDeviceContext(device));
  StatusOr<HostPort> store = ParseHostPort(options.store);
  if (!store.ok()) return store.status().WithContext("--store");
  if (options.timeout_s < 1) return InvalidArgumentError("--timeout-s must be >= 1");
  if (options.cpu_threads < 0) return InvalidArgumentError("--threads must be >= 0");
  if (!device.cuda && options.cpu_threads > 0) at::set_num_threads(options.cpu_threads);
  CommOptions comm_options;
  comm_options.rank = options.rank;
  comm_options.world_size = options.world_size;
  comm_options.store_host = store->host;
  comm_options.store_port = store->port;
  comm_options.timeout = std::chrono::seconds(options.timeout_s);
  // The naive collocation baseline (priority_streams off) keeps every stream at the default
  // priority, the FG rank's NCCL streams included.
  const bool shares_device = spec.background && spec.background->SharesRank(options.rank);
  if (shares_device) comm_options.high_priority_streams = spec.background->sharing.priority_streams;
  auto on_store_ready = [&](int port) {
    if (store->port == 0) out << StoreReadyEvent(store->host, port) << std::endl;
  };
  std::unique_ptr<Communicator> comm;
  if (device.cuda) {
    ASSIGN_OR_RETURN(comm, ConnectNccl(comm_options, on_store_ready));
  } else {
    ASSIGN_OR_RETURN(comm, ConnectGloo(comm_options, on_store_ready));
  }
  // A BG job on this rank's device: waits on the communicator become its idle time.
  std::unique_ptr<DeviceSharing> sharing;
  if (shares_device) {
    ASSIGN_OR_RETURN(sharing, DeviceSharing::Attach(*spec.background, device.torch_device(), &comm,
                                                    SystemClock::Get()));
  }
  // Otherwise, with a command channel: BG jobs may be attached while the rank trains.
  std::unique_ptr<BackgroundHost> host;
  if (!sharing && options.command_fd >= 0) {
    SharingOptions host_options;
    if (!options.background_sharing.empty()) {
      ASSIGN_OR_RETURN(SharingMode mode, ParseSharingMode(options.background_sharing));
      host_options.mode = mode;
    }
    ASSIGN_OR_RETURN(host, BackgroundHost::Create(device.torch_device(), host_options, &comm,
                                                  SystemClock::Get()));
  }
  ASSIGN_OR_RETURN(auto source, MakeDataSource(spec.data, *spec.graph, spec.plan.global_batch));
  // The next iteration's rows are produced while this one trains.
  std::unique_ptr<DataSource> data = WithPrefetch(std::move(source));
  ExecutorOptions executor_options;
  executor_options.seed = spec.seed;
  executor_options.optimizer = spec.optimizer;
  executor_options.device = device.torch_device();
  if (device.cuda) executor_options.synchronize = [ctx = context.get()] { ctx->Synchronize(); };
  ASSIGN_OR_RETURN(auto executor,
                   Executor::Create(*spec.graph, spec.plan, comm.get(), data.get(),
                                    BuildLayerModule, executor_options, SystemClock::Get()));
  if (sharing) sharing->Start();
  std::unique_ptr<CommandReader> commands;
  if (sharing && options.command_fd >= 0) {
    // The run spec attached this rank's BG job. Commands are still read, so that a writer never
    // blocks on a full pipe, and refused.
    commands = std::make_unique<CommandReader>(options.command_fd, [](const std::string& line) {
      DP_LOG_WARN("ignored executor command (the run spec attaches this rank's BG job): {}",
                  line.substr(0, 200));
    });
  }
  if (host) {
    // Started after the executor is built, so an attached BG job does not compete with that.
    commands = std::make_unique<CommandReader>(
        options.command_fd, [h = host.get()](const std::string& line) {
          StatusOr<ExecutorCommand> command = ParseExecutorCommand(line);
          if (!command.ok()) {
            DP_LOG_WARN("ignored executor command: {}", command.status().ToString());
            return;
          }
          if (command->kind == ExecutorCommand::Kind::kAttachBackground) {
            Status attached = h->Attach(command->background);
            if (!attached.ok()) h->Reject(command->job_id, attached.ToString());
          } else {
            Status detached = h->Detach(command->job_id);
            if (!detached.ok()) DP_LOG_WARN("detach_background: {}", detached.ToString());
          }
        });
  }
  for (int64_t i = 0; i < spec.iterations; ++i) {
    ASSIGN_OR_RETURN(IterationStats stats, executor->Step(i));
    std::string line = IterationEvent(options.rank, stats);
    if (host) {
      for (const std::string& l : host->AfterIteration(line)) out << l << '\n';
      out.flush();
    } else {
      out << (sharing ? sharing->Decorate(line) : line) << std::endl;
    }
  }
  if (commands) commands->Stop();
  if (sharing) sharing->Finish();  // the BG job never outlives the FG rank
  if (host) {
    for (const std::string& l : host->Finish()) out << l << '\n';
    out.flush();
  }
  std::optional<std::string> checkpoint;
  if (spec.checkpoint_path) {
    // Each rank holds only its layers; ranks write "<path>.rank<R>" files and rank 0 also
    // writes the path itself when it holds every layer (e.g. data parallelism).
    std::vector<std::shared_ptr<LayerModule>> modules(
        static_cast<size_t>(spec.graph->num_layers()));
    bool holds_all = true;
    for (int id = 0; id < spec.graph->num_layers(); ++id) {
      auto found = executor->modules().find(id);
      if (found != executor->modules().end()) {
        modules[static_cast<size_t>(id)] = found->second;
      } else {
        holds_all = false;
      }
    }
    ASSIGN_OR_RETURN(auto state, CollectStateDict(*spec.graph, modules));
    std::string path = holds_all && options.rank == 0
                           ? *spec.checkpoint_path
                           : *spec.checkpoint_path + ".rank" + std::to_string(options.rank);
    RETURN_IF_ERROR(SaveCheckpoint(path, state));
    checkpoint = path;
  }
  out << DoneEvent(options.rank, spec.iterations, checkpoint) << std::endl;
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
    DP_LOG_ERROR("rank {}: {}", options.rank, status.ToString());
    out << ErrorEvent(options.rank, status.ToString()) << std::endl;
  }
  return status;
}

}  // namespace deepool::worker
