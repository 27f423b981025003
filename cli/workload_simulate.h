// `deepool workload simulate`: replays a workload trace on a pool of devices under the
// coordinator's scheduling policies (the pool simulator, simulator/pool_simulator.h) and prints
// each configuration's metrics. Added to `deepool workload` by workload_command.cc; runs in the
// light `deepool` (no coordinator). docs/cli.md, docs/simulator.md.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/command_registry.h"

namespace deepool::cli {

// Adds `simulate` under `workload`; its callback sets result.exit_code.
void AddWorkloadSimulate(CLI::App* workload, CommandResult& result);

}  // namespace deepool::cli
