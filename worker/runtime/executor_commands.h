// Reading the commands an FG executor rank accepts while it trains, one JSON object per line on
// a file descriptor (the worker daemon's pipe to the executor's stdin). The commands themselves
// and their one parser are the executor protocol's (protocol/executor_commands.h).
//
// Threading: CommandReader owns one thread ("dp-commands") that calls the handler for every
// line; Stop() and the destructor may be called from any other thread and return once that
// thread has ended.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "protocol/executor_commands.h"
#include "worker/runtime/background/background_spec.h"

namespace deepool::worker {

using protocol::ExecutorCommand;
using protocol::ParseExecutorCommand;

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
