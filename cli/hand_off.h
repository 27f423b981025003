// The `deepool` executable that users run holds only the commands that need no coordinator
// (model, plan, simulate, profile), so they start without loading gRPC, protobuf and OpenSSL;
// every other command line goes to deepool-full, the executable with every command, next to it.
// Built without the coordinator commands, `deepool` is the only one and runs everything itself.
// Threading: pure functions, called from main before anything else runs.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace deepool::cli {

// Whether `args` (without the program name) start with a command `app` has, or are just
// "--version". No command, another leading flag (--help lists every command) or another
// command: false.
bool RunsHere(const CLI::App& app, const std::vector<std::string>& args);

// Replaces this process with `program` from this executable's directory, with the same
// arguments; returns only when that fails, with why.
Status ExecSibling(const std::string& program, char** argv);

}  // namespace deepool::cli
