// `deepool profile ...`: measures per-layer times with libtorch. The deepool command does not
// link libtorch, so this runs deepool-profile from the same folder as this executable with the
// same arguments and returns its exit status (deepool-profile --help lists the options).
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "common/subprocess.h"

namespace deepool::cli {
namespace {

constexpr const char* kProfileTool = "deepool-profile";

int RunProfileTool(const std::vector<std::string>& args) {
  const std::string tool = SiblingExecutable(kProfileTool);
  if (access(tool.c_str(), X_OK) != 0) {
    std::cerr << "deepool profile: " << tool
              << " not found; it is built with the training runtime (DEEPOOL_WITH_RUNTIME=ON)\n";
    return kExitUnavailable;
  }
  ProcessSpec spec;
  spec.executable = tool;
  spec.args = args;
  spec.stdout_to = ProcessOutput::Inherit();
  spec.stderr_to = ProcessOutput::Inherit();
  // In our process group, so a Ctrl-C on the terminal reaches the tool too.
  spec.own_process_group = false;
  std::cout.flush();
  std::cerr.flush();
  auto child = ChildProcess::Start(spec);
  if (!child.ok()) {
    std::cerr << "deepool profile: " << child.status().message() << "\n";
    return kExitFailure;
  }
  const ProcessExit exit = (*child)->Wait();
  if (exit.signal == 0) return exit.exit_code;
  std::cerr << "deepool profile: " << kProfileTool << " " << exit.Describe() << "\n";
  return kExitFailure;
}

void RegisterProfileCommand(CLI::App& app, CommandResult& result) {
  CLI::App* profile = app.add_subcommand(
      "profile", "Measure each layer's forward and backward time on a device (libtorch)");
  // Everything, --help included, goes to deepool-profile unparsed.
  profile->set_help_flag();
  profile->allow_extras();
  profile->prefix_command();
  profile->footer(
      "Options (see `deepool profile --help`):\n"
      "  (--model NAME | --graph FILE) --device cpu|cuda:K --batch-sizes 1,2,4,8 -o FILE\n"
      "  [--warmup N] [--repeats N] [--image-size S] [--num-classes N] [--no-aux-logits]\n"
      "  [--device-name NAME] [--threads N] [--seed S] [--precision fp32|tf32|bf16|fp16]\n"
      "Example:\n"
      "  deepool profile --model vgg16 --device cuda:0 --batch-sizes 1,2,4,8,16,32 -o vgg16.json");
  profile->callback(
      [profile, &result] { result.exit_code = RunProfileTool(profile->remaining()); });
}

const RegisterCommand kRegisterProfileCommand(RegisterProfileCommand);

}  // namespace
}  // namespace deepool::cli
