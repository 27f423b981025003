#include "worker/runtime/executor_commands.h"

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

namespace deepool::worker {

StatusOr<ExecutorCommand> ParseExecutorCommand(std::string_view line) {
  nlohmann::json doc = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgumentError("command: not a JSON object");
  }
  if (!doc.contains("command") || !doc["command"].is_string()) {
    return InvalidArgumentError("command: missing or not a string");
  }
  const std::string name = doc["command"].get<std::string>();
  ExecutorCommand command;
  if (name == "attach_background") {
    if (!doc.contains("background") || !doc["background"].is_object()) {
      return InvalidArgumentError("background: missing or not an object");
    }
    ASSIGN_OR_RETURN(command.background, ParseBackgroundJson(doc["background"]));
    command.kind = ExecutorCommand::Kind::kAttachBackground;
    command.job_id = command.background.job_id;
    return command;
  }
  if (name == "detach_background") {
    if (!doc.contains("job_id") || !doc["job_id"].is_string()) {
      return InvalidArgumentError("job_id: missing or not a string");
    }
    command.kind = ExecutorCommand::Kind::kDetachBackground;
    command.job_id = doc["job_id"].get<std::string>();
    return command;
  }
  return InvalidArgumentError("command: unknown command \"" + name + "\"");
}

CommandReader::CommandReader(int fd, std::function<void(const std::string&)> handler)
    : fd_(fd), handler_(std::move(handler)), thread_([this] { Loop(); }) {}

CommandReader::~CommandReader() { Stop(); }

void CommandReader::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void CommandReader::Loop() {
  pthread_setname_np(pthread_self(), "dp-commands");
  std::string buffer;
  char chunk[4096];
  while (!stop_) {
    // Polled with a timeout so that Stop() is seen without closing the descriptor.
    pollfd p{fd_, POLLIN, 0};
    int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return;
    if (ready == 0) continue;
    ssize_t n = ::read(fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // end of file: the daemon closed its end
    buffer.append(chunk, static_cast<size_t>(n));
    size_t newline;
    while ((newline = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      if (!line.empty()) handler_(line);
    }
  }
}

}  // namespace deepool::worker
