// deepool: the command-line client. Subcommands register themselves (command_registry.h).
#include <iostream>

#include "cli/command_registry.h"

namespace deepool::cli {
std::vector<Registrar>& Registrars() {
  static std::vector<Registrar> registrars;
  return registrars;
}
}  // namespace deepool::cli

int main(int argc, char** argv) {
  using namespace deepool::cli;
  CLI::App app{"deepool: burst-parallel DNN training on shared GPU clusters"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "deepool 0.1.0");
  CommandResult result;
  for (auto& registrar : Registrars()) registrar(app, result);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  return result.exit_code;
}
