// Commands an FG executor rank accepts while it trains, one JSON object per line on a file
// descriptor (the worker daemon's pipe to the executor's stdin; docs/formats.md, "Executor
// commands"):
//   {"command":"attach_background","background":{...the run spec's background object...}}
//   {"command":"detach_background","job_id":"bg-7"}
//
// Threading: ParseExecutorCommand is pure. CommandReader owns one thread ("dp-commands") that
// calls the handler for every line; Stop() and the destructor may be called from any other
// thread and return once that thread has ended.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "common/status.h"
#include "worker/runtime/background_spec.h"

namespace deepool::worker {

struct ExecutorCommand {
  enum class Kind { kAttachBackground, kDetachBackground };
  Kind kind = Kind::kAttachBackground;
  BackgroundSpec background;  // attach
  std::string job_id;         // both (attach: background.job_id)
};

// INVALID_ARGUMENT naming the field for malformed JSON, an unknown command, or a bad background
// object (the field named as "background.batch_size", ...).
StatusOr<ExecutorCommand> ParseExecutorCommand(std::string_view line);

class CommandReader {
 public:
  // Starts reading `fd` (not closed here). Ends at end of file, on a read error, or at Stop().
  CommandReader(int fd, std::function<void(const std::string& line)> handler);
  ~CommandReader();
  CommandReader(const CommandReader&) = delete;
  CommandReader& operator=(const CommandReader&) = delete;

  void Stop();

 private:
  void Loop();

  const int fd_;
  std::function<void(const std::string&)> handler_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace deepool::worker
