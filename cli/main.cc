// deepool: the command-line client. Subcommands register themselves (command_registry.h).
// Built twice when the coordinator commands are built: `deepool` (the commands that need no
// coordinator; DEEPOOL_HAND_OFF_TO names the executable it hands every other command line to)
// and deepool-full (every command). See cli/hand_off.h.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "cli/hand_off.h"
#include "cli/unknown_input.h"
#include "common/build_info.h"
#include "common/heap_reuse.h"

namespace deepool::cli {
std::vector<Registrar>& Registrars() {
  static std::vector<Registrar> registrars;
  return registrars;
}
}  // namespace deepool::cli

int main(int argc, char** argv) {
  using namespace deepool::cli;
  // A command frees its input's large buffers (a graph built or parsed) before it plans.
  deepool::ReuseFreedHeapBlocks();
  CLI::App app{"deepool: burst-parallel DNN training on shared GPU clusters", "deepool"};
  app.require_subcommand(1);
  app.set_version_flag("--version", deepool::BuildDescription("deepool"));
  CommandResult result;
  for (auto& registrar : Registrars()) registrar(app, result);
  const std::vector<std::string> args(argv + 1, argv + argc);
#ifdef DEEPOOL_HAND_OFF_TO
  if (!RunsHere(app, args)) {
    const deepool::Status failed = ExecSibling(DEEPOOL_HAND_OFF_TO, argv);
    std::cerr << "deepool: " << failed.message() << "\n";
    return kExitUnavailable;
  }
#endif
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
