// deepool trace: a running job's timeline, measured by its executors.
#include <iostream>

#include "cli/command_registry.h"
#include "cli/command_support.h"
#include "cli/services/client.h"
#include "cli/services/trace_view.h"
#include "common/timeline.h"

namespace deepool::cli {
namespace {

struct TraceFlags {
  ClientOptions client;
  std::string job;
  std::string output;  // default: <job>.trace.json
  std::string svg;
  int iterations = 3;
  int timeout_s = 60;
};

int RunTrace(const TraceFlags& f) {
  StatusOr<CoordinatorConnection> coordinator = ConnectCoordinator(f.client);
  if (!coordinator.ok()) return ReportClientSetupError(coordinator.status());
  v1::TraceJobRequest request;
  request.set_job_id(f.job);
  request.set_iterations(f.iterations);
  request.set_timeout_s(f.timeout_s);
  v1::TraceJobResponse response;
  std::cerr << "recording " << f.iterations << " iterations of job " << f.job << " ..."
            << std::endl;
  // The coordinator waits up to timeout_s for the ranks; the call a little longer.
  auto context = UnaryContext(std::chrono::seconds(f.timeout_s + 15));
  grpc::Status status = coordinator->stub->TraceJob(context.get(), request, &response);
  if (!status.ok()) return ReportRpcError(status, "trace " + f.job, coordinator->address);
  if (response.ranks_size() == 0) {
    return Fail(UnavailableError("no rank of job " + f.job + " sent its timeline within " +
                                 std::to_string(f.timeout_s) + " s"),
                kExitFailure);
  }
  StatusOr<Timeline> timeline = TimelineOfTrace(response);
  if (!timeline.ok()) return Fail(timeline.status(), kExitFailure);
  const std::string output = f.output.empty() ? f.job + ".trace.json" : f.output;
  Status written = WriteTextFile(output, TimelineToChromeTrace(*timeline));
  if (written.ok() && !f.svg.empty()) written = WriteTextFile(f.svg, TimelineToSvg(*timeline));
  if (!written.ok()) return Fail(written, kExitFailure);
  if (f.client.json) {
    std::cout << ToJson(response) << "\n";
  } else {
    std::cout << TraceSummary(response) << "wrote " << output
              << " (open it in https://ui.perfetto.dev or chrome://tracing)"
              << (f.svg.empty() ? "" : " and " + f.svg) << "\n";
  }
  return response.ranks_size() < response.world_size() ? kExitFailure : kExitOk;
}

RegisterCommand trace_command([](CLI::App& app, CommandResult& result) {
  auto flags = std::make_shared<TraceFlags>();
  CLI::App* cmd = app.add_subcommand(
      "trace",
      "Record a few iterations of a running FG job on every rank: each layer's forward and "
      "backward, transfers, all-reduces, waits and the optimizer step, as a trace Perfetto opens");
  cmd->add_option("job", flags->job, "Job id (RUNNING, FG)")->required();
  cmd->add_option("-o,--output", flags->output,
                  "Chrome trace JSON file to write (default: <job>.trace.json)");
  cmd->add_option("--svg", flags->svg, "Also draw the timeline as an SVG picture");
  cmd->add_option("--iterations,-n", flags->iterations, "Iterations to record")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--timeout", flags->timeout_s,
                  "Seconds to wait for every rank's timeline (ranks that have not answered by "
                  "then are left out, and the exit code is 1)")
      ->check(CLI::Range(1, 600));
  AddClientOptions(cmd, &flags->client);
  cmd->callback([flags, &result] { result.exit_code = RunTrace(*flags); });
});

}  // namespace
}  // namespace deepool::cli
