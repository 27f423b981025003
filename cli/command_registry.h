// Subcommands register themselves here so that cli/main.cc stays a thin dispatcher and each
// command lives in its own file. A registrar adds its subcommands to the app and sets their
// callbacks; a callback stores its exit code in the shared CommandResult.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace deepool::cli {

// Exit codes of the deepool command (documented in docs/cli.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,       // the operation ran and failed (e.g. a job FAILED)
  kExitUsage = 2,         // bad flags or arguments
  kExitInvalidInput = 3,  // a file or spec was refused
  kExitUnavailable = 4,   // the coordinator could not be reached
  kExitNotFound = 5,      // no such job, node or model
  kExitDenied = 6,        // the coordinator did not accept our credentials, or refused the call
};

struct CommandResult {
  int exit_code = kExitOk;
};

using Registrar = std::function<void(CLI::App& app, CommandResult& result)>;

std::vector<Registrar>& Registrars();

struct RegisterCommand {
  explicit RegisterCommand(Registrar registrar) { Registrars().push_back(std::move(registrar)); }
};

}  // namespace deepool::cli
