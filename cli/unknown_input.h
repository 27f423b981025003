// Errors for what the user mistyped: an unknown command or flag is named, with the closest
// known one when there is a near match ("there is no command 'statsu'; did you mean 'status'?").
// CLI11's own messages ("A subcommand is required", "The following argument was not expected")
// name neither, and `deepool statsu --help` would print the main help and exit 0.
// Threading: pure functions over a configured CLI::App.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace deepool::cli {

// Walks `args` (without the program name) down the app's subcommands; the first word that
// should name a subcommand and names none gives the error message, "deepool model: there is no
// command 'shwo'; did you mean 'show'?" and the commands there are. Stops at the first flag or
// at a command without subcommands (its words are its own arguments).
std::optional<std::string> UnknownCommandMessage(const CLI::App& app,
                                                 const std::vector<std::string>& args);

// Each flag in `args` that the innermost command given does not have, with the closest flag it
// has ("deepool plan: unknown flag --global-bach; did you mean --global-batch?"); nullopt when
// all are known. Checked before parsing: CLI11 would first complain about the required flag the
// typo left out. Values of flags that take one, negative numbers and what follows "--" are not
// flags; a command that passes extra arguments on (deepool profile) is not checked.
std::optional<std::string> UnknownFlagMessage(const CLI::App& app,
                                              const std::vector<std::string>& args);

}  // namespace deepool::cli
