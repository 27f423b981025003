// common/sigpipe.h: a write to a socket whose peer is gone fails with EPIPE instead of ending the
// process, both process-wide (IgnoreSigpipe) and on one thread whatever the disposition
// (BlockSigpipeOnThisThread). Without the block this test process dies of SIGPIPE (141).
#include "common/sigpipe.h"

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <thread>

namespace deepool {
namespace {

// Writes to a socket whose peer is closed; the errno of the write (0 if it succeeded).
int WriteToClosedPeer() {
  int pair[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  close(pair[1]);
  const ssize_t n = write(pair[0], "x", 1);
  const int error = n < 0 ? errno : 0;
  close(pair[0]);
  return error;
}

struct sigaction Disposition(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  struct sigaction before {};
  sigaction(SIGPIPE, &action, &before);
  return before;
}

bool Blocked() {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, SIGPIPE) == 1;
}

}  // namespace

TEST_CASE("IgnoreSigpipe turns SIGPIPE into EPIPE for the whole process", "[common]") {
  const struct sigaction before = Disposition(SIG_DFL);
  IgnoreSigpipe();
  struct sigaction now {};
  sigaction(SIGPIPE, nullptr, &now);
  CHECK(now.sa_handler == SIG_IGN);
  int error = -1;
  std::thread([&error] { error = WriteToClosedPeer(); }).join();
  CHECK(error == EPIPE);
  sigaction(SIGPIPE, &before, nullptr);
}

TEST_CASE("BlockSigpipeOnThisThread protects its thread under the default disposition",
          "[common]") {
  const struct sigaction before = Disposition(SIG_DFL);
  int error = -1;
  bool blocked_there = false;
  std::thread([&] {
    BlockSigpipeOnThisThread();
    blocked_there = Blocked();
    error = WriteToClosedPeer();  // the process would end here (SIGPIPE's default action)
  }).join();
  CHECK(blocked_there);
  CHECK(error == EPIPE);
  CHECK_FALSE(Blocked());  // the calling thread only
  sigaction(SIGPIPE, &before, nullptr);
}

}  // namespace deepool
