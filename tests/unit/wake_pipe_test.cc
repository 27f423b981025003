// common/wake_pipe.h: Wake() makes a poll on read_fd() return, from another thread too; a moved
// pipe keeps its ends and the moved-from one holds none; a default one is inert.
#include "common/wake_pipe.h"

#include <fcntl.h>
#include <poll.h>

#include <catch2/catch.hpp>
#include <thread>

namespace deepool {
namespace {

// Whether fd is readable within timeout_ms.
bool Readable(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

TEST_CASE("a wake pipe is quiet until woken and then stays readable", "[wake_pipe]") {
  StatusOr<WakePipe> pipe = WakePipe::Open();
  REQUIRE(pipe.ok());
  REQUIRE(pipe->read_fd() >= 0);
  CHECK((fcntl(pipe->read_fd(), F_GETFD) & FD_CLOEXEC) != 0);
  CHECK_FALSE(Readable(pipe->read_fd(), 0));
  pipe->Wake();
  CHECK(Readable(pipe->read_fd(), 0));
  pipe->Wake();  // waking twice is harmless
  CHECK(Readable(pipe->read_fd(), 0));
}

TEST_CASE("a wake from another thread ends a blocked poll", "[wake_pipe]") {
  StatusOr<WakePipe> pipe = WakePipe::Open();
  REQUIRE(pipe.ok());
  std::thread waker([&] { pipe->Wake(); });
  CHECK(Readable(pipe->read_fd(), -1));  // blocks until the wake: a missed one hangs the test
  waker.join();
}

TEST_CASE("a moved wake pipe keeps its ends and closing leaves none open", "[wake_pipe]") {
  StatusOr<WakePipe> opened = WakePipe::Open();
  REQUIRE(opened.ok());
  const int fd = opened->read_fd();
  WakePipe moved = std::move(*opened);
  CHECK(moved.read_fd() == fd);
  CHECK(opened->read_fd() == -1);
  opened->Wake();  // the moved-from pipe holds nothing to write to
  CHECK_FALSE(Readable(moved.read_fd(), 0));
  moved = WakePipe();  // closes both ends
  CHECK(moved.read_fd() == -1);
  CHECK(fcntl(fd, F_GETFD) == -1);
  WakePipe inert;
  inert.Wake();
  CHECK(inert.read_fd() == -1);
}

}  // namespace
}  // namespace deepool
