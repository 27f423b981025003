#include "worker/runtime/executor_commands.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "common/thread_name.h"

namespace deepool::worker {

CommandReader::CommandReader(int fd, std::function<void(const std::string&)> handler)
    : fd_(fd), handler_(std::move(handler)), thread_([this] { Loop(); }) {}

CommandReader::~CommandReader() { Stop(); }

void CommandReader::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void CommandReader::Loop() {
  SetCurrentThreadName("dp-commands");
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
