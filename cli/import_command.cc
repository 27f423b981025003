// `deepool import ...`: turns a PyTorch module into a deepool.graph file (docs/models.md,
// "Importing a PyTorch model"). The importer is Python (importer/deepool-import, torch.fx): this
// runs it with $DEEPOOL_PYTHON, else the Python the build was configured with
// (DEEPOOL_TORCH_PYTHON, the project's .venv/bin/python), with the same arguments, and returns
// its exit status.
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "common/subprocess.h"

#ifndef DEEPOOL_IMPORTER_SCRIPT
#error "DEEPOOL_IMPORTER_SCRIPT must name importer/deepool-import (cli/CMakeLists.txt)"
#endif
#ifndef DEEPOOL_IMPORTER_PYTHON
#error "DEEPOOL_IMPORTER_PYTHON must name the default Python (cli/CMakeLists.txt)"
#endif

namespace deepool::cli {
namespace {

constexpr const char* kPythonVariable = "DEEPOOL_PYTHON";

std::string ImporterPython() {
  const char* python = std::getenv(kPythonVariable);
  return python != nullptr && *python != '\0' ? python : DEEPOOL_IMPORTER_PYTHON;
}

int RunImporter(const std::vector<std::string>& args) {
  ProcessSpec spec;
  spec.executable = ImporterPython();
  spec.args = {DEEPOOL_IMPORTER_SCRIPT};
  spec.args.insert(spec.args.end(), args.begin(), args.end());
  spec.stdout_to = ProcessOutput::Inherit();
  spec.stderr_to = ProcessOutput::Inherit();
  spec.own_process_group = false;  // a Ctrl-C on the terminal reaches the importer too
  std::cout.flush();
  std::cerr.flush();
  auto child = ChildProcess::Start(spec);
  if (!child.ok()) {
    std::cerr << "deepool import: cannot run the importer with " << spec.executable << ": "
              << child.status().message() << " (set " << kPythonVariable
              << " to a Python that has torch, or run scripts/install-torch.sh for the "
                 "project's .venv)\n";
    return kExitUnavailable;
  }
  const ProcessExit exit = (*child)->Wait();
  if (exit.signal == 0) return exit.exit_code;
  std::cerr << "deepool import: the importer " << exit.Describe() << "\n";
  return kExitFailure;
}

void RegisterImportCommand(CLI::App& app, CommandResult& result) {
  CLI::App* command = app.add_subcommand(
      "import", "Turn a PyTorch module into a deepool model (graph file and weights)");
  // Everything, --help included, goes to the importer unparsed.
  command->set_help_flag();
  command->allow_extras();
  command->prefix_command();
  command->footer(
      "Options (see `deepool import --help`):\n"
      "  (--file FILE --factory NAME | --module PKG.MOD:FACTORY) [--kwargs JSON]\n"
      "  --input-shape C,H,W [--input-dtype DTYPE] -o FILE [--weights FILE] [--name NAME]\n"
      "  [--loss-weights W,W] [--force]\n"
      "Runs importer/deepool-import with $DEEPOOL_PYTHON, else " DEEPOOL_IMPORTER_PYTHON
      ".\n"
      "Example:\n"
      "  deepool import --module torchvision.models:resnet50 --input-shape 3,224,224 \\\n"
      "      -o resnet50.graph.json --weights resnet50.pt");
  command->callback([command, &result] { result.exit_code = RunImporter(command->remaining()); });
}

const RegisterCommand kRegisterImportCommand(RegisterImportCommand);

}  // namespace
}  // namespace deepool::cli
