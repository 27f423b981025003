// deepool: the command-line client. Subcommands register themselves (command_registry.h).
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "cli/unknown_input.h"

namespace deepool::cli {
std::vector<Registrar>& Registrars() {
  static std::vector<Registrar> registrars;
  return registrars;
}
}  // namespace deepool::cli

int main(int argc, char** argv) {
  using namespace deepool::cli;
  CLI::App app{"deepool: burst-parallel DNN training on shared GPU clusters", "deepool"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "deepool 0.1.0");
  CommandResult result;
  for (auto& registrar : Registrars()) registrar(app, result);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << app.help();
    return kExitUsage;
  }
  std::optional<std::string> unknown = UnknownCommandMessage(app, args);
  if (!unknown) unknown = UnknownFlagMessage(app, args);
  if (unknown) {
    std::cerr << *unknown << "\n";
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  return result.exit_code;
}
