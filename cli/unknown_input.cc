#include "cli/unknown_input.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/closest_match.h"

namespace deepool::cli {
namespace {

// "deepool model show": the command's full name, for messages.
std::string CommandPath(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* parent = app.get_parent(); parent; parent = parent->get_parent()) {
    path.insert(0, parent->get_name() + " ");
  }
  return path;
}

std::vector<std::string> SubcommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
    for (const std::string& alias : sub->get_aliases()) names.push_back(alias);
  }
  return names;
}

const CLI::App* FindSubcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->check_name(name)) return sub;
  }
  return nullptr;
}

// The innermost subcommand named in `args` (the app itself when none is).
const CLI::App* InnermostCommand(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* at = &app;
  for (const std::string& arg : args) {
    if (arg.empty() || arg[0] == '-') continue;
    if (const CLI::App* sub = FindSubcommand(*at, arg)) at = sub;
  }
  return at;
}

// The command's flags ("--gpus", "-d"), each with whether it takes a value.
std::vector<std::pair<std::string, bool>> Flags(const CLI::App& app) {
  std::vector<std::pair<std::string, bool>> flags;
  for (const CLI::Option* option : app.get_options()) {
    const bool takes_value = option->get_type_size_max() > 0;
    for (const std::string& name : option->get_lnames()) flags.emplace_back("--" + name, takes_value);
    for (const std::string& name : option->get_snames()) flags.emplace_back("-" + name, takes_value);
  }
  return flags;
}

// "-1", "-.5": a value, not a flag.
bool IsNegativeNumber(const std::string& arg) {
  return arg.size() > 1 && arg[0] == '-' &&
         (std::isdigit(static_cast<unsigned char>(arg[1])) || arg[1] == '.');
}

}  // namespace

std::optional<std::string> UnknownCommandMessage(const CLI::App& app,
                                                 const std::vector<std::string>& args) {
  const CLI::App* at = &app;
  for (const std::string& arg : args) {
    const std::vector<std::string> names = SubcommandNames(*at);
    if (arg.empty() || arg[0] == '-' || names.empty()) return std::nullopt;
    const CLI::App* sub = FindSubcommand(*at, arg);
    if (!sub) {
      std::string message = CommandPath(*at) + ": there is no command '" + arg + "'";
      if (auto match = ClosestMatch(arg, names)) message += "; did you mean '" + *match + "'?";
      message += "\ncommands:";
      for (const std::string& name : names) message += " " + name;
      return message + "\n(" + CommandPath(*at) + " --help lists them)";
    }
    at = sub;
  }
  return std::nullopt;
}

std::optional<std::string> UnknownFlagMessage(const CLI::App& app,
                                              const std::vector<std::string>& args) {
  const CLI::App* command = InnermostCommand(app, args);
  if (command->get_allow_extras()) return std::nullopt;  // passed on (deepool profile)
  const std::vector<std::pair<std::string, bool>> flags = Flags(*command);
  std::vector<std::string> names;
  names.reserve(flags.size());
  for (const auto& flag : flags) names.push_back(flag.first);
  std::string message;
  bool value_next = false;  // the previous flag takes this argument as its value
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (value_next || arg.size() < 2 || arg[0] != '-' || IsNegativeNumber(arg)) {
      value_next = false;
      continue;
    }
    const std::string flag = arg.substr(0, arg.find('='));  // --flag=value
    auto known = std::find_if(flags.begin(), flags.end(),
                              [&](const auto& f) { return f.first == flag; });
    if (known != flags.end()) {
      value_next = known->second && flag.size() == arg.size();
      continue;
    }
    if (!message.empty()) message += "\n";
    message += CommandPath(*command) + ": unknown flag " + flag;
    if (auto match = ClosestMatch(flag, names)) message += "; did you mean " + *match + "?";
  }
  if (message.empty()) return std::nullopt;
  return message + "\n(" + CommandPath(*command) + " --help lists the flags)";
}

}  // namespace deepool::cli
