#include "protocol/executor_commands.h"

#include <nlohmann/json.hpp>

#include "common/json_fields.h"

namespace deepool::protocol {

using nlohmann::json;

StatusOr<ExecutorCommand> ParseExecutorCommand(std::string_view line) {
  ASSIGN_OR_RETURN(const json doc, ParseJson(line, "command"));
  if (!doc.is_object()) {
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
  if (name == "trace") {
    command.kind = ExecutorCommand::Kind::kTrace;
    TraceCommand& trace = command.trace;
    ASSIGN_OR_RETURN(trace.request_id, ReadRequiredField<int64_t>(doc, "request_id", ""));
    ASSIGN_OR_RETURN(trace.first_iteration, ReadRequiredField<int64_t>(doc, "first_iteration", ""));
    ASSIGN_OR_RETURN(trace.iterations, ReadRequiredField<int>(doc, "iterations", ""));
    if (trace.first_iteration < 0) return InvalidArgumentError("first_iteration: must be >= 0");
    if (trace.iterations < 1 || trace.iterations > TraceCommand::kMaxTraceIterations) {
      return InvalidArgumentError("iterations: must be 1.." +
                                  std::to_string(TraceCommand::kMaxTraceIterations));
    }
    return command;
  }
  if (name == "stop_at_checkpoint") {
    command.kind = ExecutorCommand::Kind::kStopAtCheckpoint;
    return command;
  }
  return InvalidArgumentError("command: unknown command \"" + name + "\"");
}

std::string ExecutorCommandToJson(const ExecutorCommand& command) {
  if (command.kind == ExecutorCommand::Kind::kAttachBackground) {
    return AttachBackgroundCommandJson(BackgroundToJson(command.background));
  }
  if (command.kind == ExecutorCommand::Kind::kTrace) {
    return json{{"command", "trace"},
                {"request_id", command.trace.request_id},
                {"first_iteration", command.trace.first_iteration},
                {"iterations", command.trace.iterations}}
        .dump();
  }
  if (command.kind == ExecutorCommand::Kind::kStopAtCheckpoint) {
    return json{{"command", "stop_at_checkpoint"}}.dump();
  }
  return json{{"command", "detach_background"}, {"job_id", command.job_id}}.dump();
}

std::string AttachBackgroundCommandJson(const json& background) {
  return json{{"command", "attach_background"}, {"background", background}}.dump();
}

}  // namespace deepool::protocol
