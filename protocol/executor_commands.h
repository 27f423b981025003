// Commands an FG executor rank accepts while it trains, one JSON object per line on its stdin
// (the worker daemon writes them; docs/formats.md, "Executor commands"):
//   {"command":"attach_background","background":{...the run spec's background object...}}
//   {"command":"detach_background","job_id":"bg-7"}
//   {"command":"trace","request_id":R,"first_iteration":F,"iterations":N}
//     (record a timeline of iterations F..F+N-1, or of the next N when F has passed; the rank
//     answers with "trace" events, executor_events.h)
//   {"command":"stop_at_checkpoint"}
//     (stop after the next periodic checkpoint, to be resized: every rank of the job stops there
//     once any rank was asked, and ends with a "done" event with "stopped":true)
// Threading: plain values and pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "protocol/background_spec.h"

namespace deepool::protocol {

struct TraceCommand {
  int64_t request_id = 0;
  int64_t first_iteration = 0;  // >= 0
  int iterations = 1;           // 1..kMaxTraceIterations
  static constexpr int kMaxTraceIterations = 100;
};

struct ExecutorCommand {
  enum class Kind { kAttachBackground, kDetachBackground, kTrace, kStopAtCheckpoint };
  Kind kind = Kind::kAttachBackground;
  BackgroundSpec background;  // attach
  std::string job_id;         // attach and detach (attach: background.job_id)
  TraceCommand trace;         // trace
};

// INVALID_ARGUMENT naming the field for malformed JSON, an unknown command, or a bad background
// object (the field named as "background.batch_size", ...).
StatusOr<ExecutorCommand> ParseExecutorCommand(std::string_view line);
// One line without its newline. attach writes `background`, detach writes `job_id`, trace
// `trace`'s fields.
std::string ExecutorCommandToJson(const ExecutorCommand& command);

// The attach_background line around a background object that is already JSON: the worker daemon
// forwards the coordinator's document as it is, and the executor rank validates it when it
// parses the command (ExecutorCommandToJson writes attach commands through this too).
std::string AttachBackgroundCommandJson(const nlohmann::json& background);

}  // namespace deepool::protocol
