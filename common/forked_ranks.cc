// Forked rank processes and the port pipe between them; see forked_ranks.h.
#include "common/forked_ranks.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace deepool {
namespace {

std::string Errno() { return std::strerror(errno); }

// The exit code of the child `pid` once it has ended; -1 if a signal ended it.
int WaitForExitCode(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

StatusOr<PortPipe> PortPipe::Create() {
  int fds[2];
  if (pipe(fds) != 0) return InternalError("port pipe: " + Errno());
  return PortPipe(fds[0], fds[1]);
}

PortPipe::PortPipe(PortPipe&& other) noexcept
    : read_fd_(other.read_fd_), write_fd_(other.write_fd_) {
  other.read_fd_ = -1;
  other.write_fd_ = -1;
}

PortPipe::~PortPipe() {
  if (read_fd_ >= 0) close(read_fd_);
  if (write_fd_ >= 0) close(write_fd_);
}

Status PortPipe::Publish(int port, int readers) const {
  for (int i = 0; i < readers; ++i) {
    if (write(write_fd_, &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) {
      return InternalError("port pipe: writing a port: " + Errno());
    }
  }
  return Status::Ok();
}

StatusOr<int> PortPipe::Await() const {
  int port = 0;
  const ssize_t got = read(read_fd_, &port, sizeof(port));
  if (got == static_cast<ssize_t>(sizeof(port))) return port;
  if (got < 0) return InternalError("port pipe: reading a port: " + Errno());
  return UnavailableError("port pipe: no port was published");
}

StatusOr<std::vector<int>> ForkRanks(int ranks, const std::function<int(int rank)>& body) {
  std::vector<pid_t> children;
  Status forked = Status::Ok();
  for (int rank = 0; rank < ranks; ++rank) {
    std::fflush(nullptr);  // nothing buffered before the fork is written twice
    const pid_t pid = fork();
    if (pid < 0) {
      forked = InternalError("forking rank " + std::to_string(rank) + ": " + Errno());
      break;
    }
    if (pid == 0) {
      const int code = body(rank);
      std::fflush(nullptr);
      std::_Exit(code);
    }
    children.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : children) codes.push_back(WaitForExitCode(pid));
  if (!forked.ok()) return forked;
  return codes;
}

}  // namespace deepool
