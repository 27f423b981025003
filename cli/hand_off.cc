#include "cli/hand_off.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace deepool::cli {

bool RunsHere(const CLI::App& app, const std::vector<std::string>& args) {
  // Both executables print the same version line; loading gRPC only to print it tripled its time.
  if (args.size() == 1 && args.front() == "--version") return true;
  if (args.empty() || args.front().empty() || args.front()[0] == '-') return false;
  for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (command->check_name(args.front())) return true;
  }
  return false;
}

Status ExecSibling(const std::string& program, char** argv) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return InternalError("cannot find this executable: " + error.message());
  const std::string path = (self.parent_path() / program).string();
  execv(path.c_str(), argv);
  return UnavailableError(
      path + " (which runs the coordinator commands) cannot be run: " + std::strerror(errno));
}

}  // namespace deepool::cli
