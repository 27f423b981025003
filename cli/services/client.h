// What every coordinator-facing subcommand shares: the coordinator address (flag, then
// $DEEPOOL_COORDINATOR, then ~/.config/deepool/config.json {"coordinator": "HOST:PORT"}, then
// 127.0.0.1:7070), the credentials (a token from $DEEPOOL_TOKEN, $DEEPOOL_TOKEN_FILE, the
// config's "token_file" or ~/.config/deepool/token; TLS files from $DEEPOOL_TLS_CA/_CERT/_KEY or
// the config's "tls": {"ca", "cert", "key"}), the gRPC stub, mapping gRPC errors to exit codes and
// messages, and rendering jobs and nodes for people. Used from the main thread only.
#pragma once

#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "cli/command_registry.h"
#include "common/status.h"
#include "deepool/v1/coordinator.grpc.pb.h"
#include "security/transport.h"

namespace deepool::cli {

inline constexpr const char* kDefaultCoordinator = "127.0.0.1:7070";

struct ClientOptions {
  std::string coordinator;  // from --coordinator; empty: resolved at connect time
  bool json = false;        // --json
};

// Adds --coordinator (and --json when with_json) to a subcommand.
void AddClientOptions(CLI::App* command, ClientOptions* options, bool with_json = true);

// Resolution order as above. `home` and `env` are parameters so tests need no real home.
std::string ResolveCoordinatorAddress(const std::string& flag, const char* env_value,
                                      const std::string& home);
std::string ResolveCoordinatorAddress(const std::string& flag);

// The credentials as above; `env` looks up an environment variable (nullptr: unset). An error
// names the file that cannot be read.
using EnvLookup = const char* (*)(const char*);
StatusOr<security::ClientSecurity> ResolveClientSecurity(EnvLookup env, const std::string& home);

struct CoordinatorConnection {
  std::string address;
  std::unique_ptr<v1::CoordinatorService::Stub> stub;
};
// Resolves the address and credentials as above and opens a channel.
StatusOr<CoordinatorConnection> ConnectCoordinator(const ClientOptions& options);
// With the credentials given (deepool up, tests).
StatusOr<std::unique_ptr<v1::CoordinatorService::Stub>> ConnectCoordinator(
    const std::string& address, const security::ClientSecurity& security);
// Prints why the client could not be set up (its credentials) and returns kExitInvalidInput.
int ReportClientSetupError(const Status& status);
// A context with a deadline, for unary calls.
std::unique_ptr<grpc::ClientContext> UnaryContext(
    std::chrono::milliseconds timeout = std::chrono::seconds(10));

// kExitUnavailable for UNAVAILABLE / DEADLINE_EXCEEDED, kExitInvalidInput for INVALID_ARGUMENT,
// kExitNotFound for NOT_FOUND, kExitDenied for UNAUTHENTICATED / PERMISSION_DENIED,
// kExitFailure otherwise.
int ExitCodeFor(const grpc::Status& status);
// Prints a one-line explanation to stderr and returns ExitCodeFor(status).
int ReportRpcError(const grpc::Status& status, const std::string& what, const std::string& address);

// "PENDING", "RUNNING", ... for the proto enum.
std::string StateName(v1::JobState state);
bool IsTerminal(v1::JobState state);
std::string RoleName(v1::JobRole role);
// A proto as JSON (field names as in the proto), one object.
std::string ToJson(const google::protobuf::Message& message, bool pretty = true);

// The jobs table: ID, NAME, ROLE, STATE, PROGRESS, SAMPLES/S, ITERATION (FG), DEVICES.
std::string JobsTable(const std::vector<v1::Job>& jobs);
// Two lines under the jobs table: running FG / BG jobs with their samples/s and the total; how
// many devices are busy, shared, idle, and the device time split (usage_view.cc).
std::string ClusterSummaryText(const v1::ClusterSummary& summary);
// One row per rank of the job: node, device, iterations, FG busy, BG busy, idle, and the job it
// shares the device with (usage_view.cc).
std::string DeviceUsageTable(const v1::Job& job);
// One job in detail; plan (may be null) adds the plan summary. Of its evaluations, the last
// kDetailEvaluations are shown (--json has them all).
constexpr int kDetailEvaluations = 5;
std::string JobDetail(const v1::Job& job, const v1::GetJobPlanResponse* plan, int64_t now_ms);
// A one-line progress summary for `submit` and `up`: "job-3 RUNNING [###...] 40% it 8/20 ...",
// ending with the last evaluation's accuracy when there is one ("eval top-1 81.2 % top-5 99.0 %").
std::string JobProgressLine(const v1::Job& job);
// "12/100"; for a job given epochs, "12/300 (epoch 1 of 3)" once its executors counted the
// iterations, "12/? (3 epochs)" until then.
std::string IterationsDone(const v1::Job& job);
// One evaluation on the held-out set:
// "iteration 200: top-1 81.2 %  top-5 99.0 %  loss 0.520  (800 samples)" (no loss when absent).
std::string EvaluationText(const v1::Evaluation& evaluation);
// The nodes table: NAME, ID, STATE, ADDRESS, DEVICES, IN USE, TASKS, HEARTBEAT.
std::string NodesTable(const std::vector<v1::Node>& nodes, int64_t now_ms);
// Summary of a plan document: layers, device counts, predicted times, amplification.
std::string PlanSummary(const std::string& plan_json);

int64_t NowWallMillis();

}  // namespace deepool::cli
