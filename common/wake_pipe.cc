#include "common/wake_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace deepool {

StatusOr<WakePipe> WakePipe::Open() {
  WakePipe pipe;
  if (pipe2(pipe.fds_, O_CLOEXEC) != 0) {
    return InternalError(std::string("pipe: ") + std::strerror(errno));
  }
  return pipe;
}

WakePipe::WakePipe(WakePipe&& other) noexcept {
  std::swap(fds_[0], other.fds_[0]);
  std::swap(fds_[1], other.fds_[1]);
}

WakePipe& WakePipe::operator=(WakePipe&& other) noexcept {
  if (this != &other) {
    Close();
    std::swap(fds_[0], other.fds_[0]);
    std::swap(fds_[1], other.fds_[1]);
  }
  return *this;
}

WakePipe::~WakePipe() { Close(); }

void WakePipe::Wake() {
  if (fds_[1] < 0) return;
  const char byte = 1;
  // The pipe's buffer holds far more bytes than Wake is ever called, and the read end is ours
  // and open: the write cannot block or fail, so its result carries nothing to act on.
  ssize_t ignored = write(fds_[1], &byte, 1);
  static_cast<void>(ignored);
}

void WakePipe::Close() {
  for (int& fd : fds_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

}  // namespace deepool
