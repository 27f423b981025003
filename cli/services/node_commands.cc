// deepool nodes | drain | undrain: the cluster's worker nodes.
#include <iostream>

#include "cli/command_registry.h"
#include "cli/services/client.h"
#include "cli/services/format.h"

namespace deepool::cli {
namespace {

int RunNodes(const ClientOptions& client) {
  StatusOr<CoordinatorConnection> coordinator = ConnectCoordinator(client);
  if (!coordinator.ok()) return ReportClientSetupError(coordinator.status());
  const std::string& address = coordinator->address;
  auto& stub = coordinator->stub;
  v1::ListNodesResponse response;
  auto context = UnaryContext();
  grpc::Status status = stub->ListNodes(context.get(), v1::ListNodesRequest(), &response);
  if (!status.ok()) return ReportRpcError(status, "list nodes", address);
  if (client.json) {
    std::cout << ToJson(response) << "\n";
  } else {
    std::vector<v1::Node> nodes(response.nodes().begin(), response.nodes().end());
    std::cout << NodesTable(nodes, NowWallMillis());
  }
  return kExitOk;
}

int RunDrain(const ClientOptions& client, const std::string& node, bool drain, bool evacuate) {
  StatusOr<CoordinatorConnection> coordinator = ConnectCoordinator(client);
  if (!coordinator.ok()) return ReportClientSetupError(coordinator.status());
  const std::string& address = coordinator->address;
  auto& stub = coordinator->stub;
  v1::Node response;
  auto context = UnaryContext();
  grpc::Status status;
  if (drain) {
    v1::DrainNodeRequest request;
    request.set_node(node);
    request.set_evacuate(evacuate);
    status = stub->DrainNode(context.get(), request, &response);
  } else {
    v1::UndrainNodeRequest request;
    request.set_node(node);
    status = stub->UndrainNode(context.get(), request, &response);
  }
  if (!status.ok()) return ReportRpcError(status, (drain ? "drain " : "undrain ") + node, address);
  if (client.json) {
    std::cout << ToJson(response) << "\n";
  } else {
    std::string state = v1::NodeState_Name(response.state());
    if (state.rfind("NODE_STATE_", 0) == 0) state = state.substr(11);
    std::cout << Printable(response.name()) << " (" << response.node_id() << ") " << state;
    if (drain && response.task_ids_size() > 0 && response.evacuations().empty()) {
      std::cout << ": " << response.task_ids_size() << " running task(s) will finish first";
    }
    std::cout << "\n";
    for (const std::string& line : response.evacuations())
      std::cout << "  " << Printable(line) << "\n";
  }
  return kExitOk;
}

RegisterCommand nodes_command([](CLI::App& app, CommandResult& result) {
  auto client = std::make_shared<ClientOptions>();
  CLI::App* cmd = app.add_subcommand("nodes", "Worker nodes, their devices and what runs there");
  AddClientOptions(cmd, client.get());
  cmd->callback([=, &result] { result.exit_code = RunNodes(*client); });
});

RegisterCommand drain_command([](CLI::App& app, CommandResult& result) {
  for (bool drain : {true, false}) {
    auto client = std::make_shared<ClientOptions>();
    auto node = std::make_shared<std::string>();
    CLI::App* cmd =
        app.add_subcommand(drain ? "drain" : "undrain",
                           drain ? "Stop giving a node new tasks (its running tasks finish)"
                                 : "Let a drained node take tasks again");
    cmd->add_option("node", *node, "Node name or id")->required();
    auto evacuate = std::make_shared<bool>(false);
    if (drain) {
      cmd->add_flag("--evacuate", *evacuate,
                    "Also move its jobs that write periodic checkpoints: a FG job stops at its "
                    "next checkpoint, a BG job at once, and each resumes from its checkpoint on "
                    "other nodes (the others finish there)");
    }
    AddClientOptions(cmd, client.get());
    cmd->callback([=, &result] { result.exit_code = RunDrain(*client, *node, drain, *evacuate); });
  }
});

}  // namespace
}  // namespace deepool::cli
