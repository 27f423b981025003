// ChildProcess against /bin/sh: lines, exits, signals, process groups, outputs, stdin.
#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/process_watch.h"
#include "tests/temp_dir.h"

namespace deepool {
namespace {

using deepool::testing::TempDir;

using namespace std::chrono_literals;
namespace fs = std::filesystem;

ProcessSpec Shell(const std::string& script) {
  ProcessSpec spec;
  spec.executable = "/bin/sh";
  spec.args = {"-c", script};
  return spec;
}

// Collects a child's lines; callbacks run on the child's reader thread.
struct Lines {
  std::mutex mu;
  std::vector<std::string> out, err;
  ChildCallbacks Callbacks() {
    ChildCallbacks callbacks;
    callbacks.on_stdout_line = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      out.push_back(line);
    };
    callbacks.on_stderr_line = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      err.push_back(line);
    };
    return callbacks;
  }
};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("lines of both streams arrive split, the last partial line flushed", "[subprocess]") {
  Lines lines;
  auto child = ChildProcess::Start(
      Shell("printf 'one\\ntwo\\r\\n'; echo oops >&2; printf 'tail'; exit 3"), lines.Callbacks());
  REQUIRE(child.ok());
  auto exit = (*child)->Wait(30s);
  REQUIRE(exit.has_value());
  CHECK(exit->exit_code == 3);
  CHECK_FALSE(exit->ok());
  CHECK(exit->Describe() == "exit code 3");
  CHECK(lines.out == std::vector<std::string>{"one", "two", "tail"});
  CHECK(lines.err == std::vector<std::string>{"oops"});
}

TEST_CASE("long lines are split at max_line_bytes", "[subprocess]") {
  Lines lines;
  auto child = ChildProcess::Start(Shell("printf 'abcdefgh\\n'"), lines.Callbacks(), 3);
  REQUIRE(child.ok());
  REQUIRE((*child)->Wait().ok());
  CHECK(lines.out == std::vector<std::string>{"abc", "def", "gh"});
}

TEST_CASE("a missing executable or working directory is a clean error", "[subprocess]") {
  ProcessSpec missing;
  missing.executable = "/nonexistent/deepool-tool";
  auto started = ChildProcess::Start(missing);
  REQUIRE_FALSE(started.ok());
  CHECK(started.status().code() == StatusCode::kNotFound);

  ProcessSpec bad_dir = Shell("true");
  bad_dir.working_dir = "/nonexistent/dir";
  started = ChildProcess::Start(bad_dir);
  REQUIRE_FALSE(started.ok());
  CHECK(started.status().code() == StatusCode::kInternal);
  CHECK_THAT(started.status().message(), Catch::Contains("chdir /nonexistent/dir"));

  ProcessSpec bad_file = Shell("true");
  bad_file.stdout_to = ProcessOutput::AppendTo("/nonexistent/dir/out.log");
  CHECK(ChildProcess::Start(bad_file).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("environment, working directory and PATH lookup", "[subprocess]") {
  TempDir dir;
  Lines lines;
  ProcessSpec spec;
  spec.executable = "sh";  // found in PATH
  spec.args = {"-c", "echo $DP_TEST_VALUE; pwd"};
  spec.extra_env = {"DP_TEST_VALUE=forty-two"};
  spec.working_dir = dir.path();
  auto child = ChildProcess::Start(spec, lines.Callbacks());
  REQUIRE(child.ok());
  REQUIRE((*child)->Wait().ok());
  REQUIRE(lines.out.size() == 2);
  CHECK(lines.out[0] == "forty-two");
  CHECK(fs::equivalent(lines.out[1], dir.path()));
}

TEST_CASE("outputs can be appended to files, nothing is read then", "[subprocess]") {
  TempDir dir;
  const fs::path log = std::filesystem::path(dir.path()) / "child.log";
  { std::ofstream(log) << "before\n"; }
  Lines lines;
  ProcessSpec spec = Shell("echo out; echo err >&2");
  spec.stdout_to = ProcessOutput::AppendTo(log.string());
  spec.stderr_to = ProcessOutput::AppendTo(log.string());
  auto child = ChildProcess::Start(spec, lines.Callbacks());
  REQUIRE(child.ok());
  REQUIRE((*child)->Wait().ok());
  CHECK(ReadFile(log) == "before\nout\nerr\n");
  CHECK(lines.out.empty());
  CHECK(lines.err.empty());
}

TEST_CASE("stdin pipe reaches the child", "[subprocess]") {
  Lines lines;
  ProcessSpec spec = Shell("read a; echo got $a");
  spec.stdin_pipe = true;
  auto child = ChildProcess::Start(spec, lines.Callbacks());
  REQUIRE(child.ok());
  REQUIRE((*child)->WriteStdin("hello\n").ok());
  REQUIRE((*child)->Wait().ok());
  CHECK(lines.out == std::vector<std::string>{"got hello"});
  CHECK((*child)->WriteStdin("late\n").code() == StatusCode::kFailedPrecondition);

  auto no_pipe = ChildProcess::Start(Shell("true"));
  REQUIRE(no_pipe.ok());
  CHECK((*no_pipe)->WriteStdin("x").code() == StatusCode::kFailedPrecondition);
}

TEST_CASE("a child that does not read its stdin holds up no writer", "[subprocess]") {
  ProcessSpec spec = Shell("sleep 60");
  spec.stdin_pipe = true;
  auto child = ChildProcess::Start(spec);
  REQUIRE(child.ok());
  // Far more than a pipe holds (64 KiB), queued while the child reads nothing: each write
  // returns at once (a worker writes commands holding its locks).
  const std::string command(1 << 20, 'x');
  auto written = std::async(std::launch::async, [&] {
    for (int i = 0; i < 4; ++i) {
      if (!(*child)->WriteStdin(command).ok()) return false;
    }
    return true;
  });
  REQUIRE(written.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  CHECK(written.get());
  // Past the bound on what may wait: refused, not queued.
  const std::string huge(ChildProcess::kMaxQueuedStdinBytes, 'y');
  CHECK((*child)->WriteStdin(huge).code() == StatusCode::kResourceExhausted);
  // Its end frees the writer blocked on the full pipe: the object goes at once.
  const auto start = std::chrono::steady_clock::now();
  child->reset();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("a child inherits no descriptor but its three standard ones", "[subprocess]") {
  // Opened without O_CLOEXEC, as a stream's file or a library's socket may be on another thread.
  // (At a high number: ls's own listing of the folder takes the lowest free one.)
  const int opened = ::open("/dev/null", O_RDONLY);
  REQUIRE(opened > 2);
  const int leaked = ::dup2(opened, 200);
  ::close(opened);
  REQUIRE(leaked == 200);
  Lines lines;
  auto child = ChildProcess::Start(Shell("ls /proc/self/fd"), lines.Callbacks());
  REQUIRE(child.ok());
  REQUIRE((*child)->Wait().ok());
  ::close(leaked);
  CHECK(std::find(lines.out.begin(), lines.out.end(), std::to_string(leaked)) == lines.out.end());
  CHECK(std::find(lines.out.begin(), lines.out.end(), "2") != lines.out.end());
}

TEST_CASE("a signal reaches the child's whole process group", "[subprocess]") {
  // The shell starts a grandchild and waits; killing only the shell would leave it running
  // and holding the pipe, so Wait would time out.
  Lines lines;
  auto child = ChildProcess::Start(Shell("sleep 60 & echo $!; wait"), lines.Callbacks());
  REQUIRE(child.ok());
  CHECK_FALSE((*child)->Wait(200ms).has_value());
  (*child)->SignalGroup(SIGKILL);
  auto exit = (*child)->Wait(30s);
  REQUIRE(exit.has_value());
  CHECK(exit->signal == SIGKILL);
  CHECK_THAT(exit->Describe(), Catch::StartsWith("killed by signal 9"));
  REQUIRE(lines.out.size() == 1);
  const pid_t grandchild = std::stoi(lines.out[0]);
  // Killed, it is a zombie until its new parent reaps it, and that parent need not reap at
  // once (a container's init may never): a zombie no longer runs, so it counts as gone.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() < deadline) {
    gone = ReadProcessRunState(grandchild) == ProcessRunState::kGone;
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  CHECK(gone);
}

TEST_CASE("Terminate escalates to SIGKILL after the grace period", "[subprocess]") {
  Lines lines;
  auto stubborn = ChildProcess::Start(
      Shell("trap '' TERM; echo ready; while :; do sleep 0.05; done"), lines.Callbacks());
  REQUIRE(stubborn.ok());
  for (int i = 0; i < 500; ++i) {
    {
      std::lock_guard<std::mutex> lock(lines.mu);
      if (!lines.out.empty()) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  CHECK_FALSE((*stubborn)->Terminate(300ms));
  REQUIRE((*stubborn)->exit().has_value());
  CHECK((*stubborn)->exit()->signal == SIGKILL);

  auto polite = ChildProcess::Start(Shell("sleep 60"));
  REQUIRE(polite.ok());
  CHECK((*polite)->Terminate(30s));
  CHECK((*polite)->exit()->signal == SIGTERM);
}

TEST_CASE("on_exit runs once, before Wait returns", "[subprocess]") {
  std::atomic<int> calls{0};
  ChildCallbacks callbacks;
  callbacks.on_exit = [&](const ProcessExit& exit) {
    CHECK(exit.exit_code == 0);
    ++calls;
  };
  auto child = ChildProcess::Start(Shell("exit 0"), callbacks);
  REQUIRE(child.ok());
  CHECK((*child)->Wait().ok());
  CHECK(calls == 1);
}

TEST_CASE("SiblingExecutable names a file beside this test binary", "[subprocess]") {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  CHECK(fs::path(SiblingExecutable("deepool-tool")) == self.parent_path() / "deepool-tool");
  CHECK(fs::equivalent(SiblingExecutable(self.filename().string()), self));
}

TEST_CASE("LogTail keeps only the last lines", "[subprocess]") {
  LogTail tail(2);
  tail.Add("a");
  tail.Add("b");
  tail.Add("c");
  CHECK(tail.Lines() == std::vector<std::string>{"b", "c"});
}

// A test harness that crashes must leave no daemons behind: a process that started children
// with end_with_parent is killed, and so are they.
TEST_CASE("end_with_parent kills the children of a process that is killed", "[subprocess]") {
  auto grandchild_of_killed_parent = [](bool end_with_parent) {
    int pids[2];
    REQUIRE(pipe(pids) == 0);
    const pid_t parent = fork();
    REQUIRE(parent >= 0);
    if (parent == 0) {  // the stand-in harness: starts a child, says its pid, waits to be killed
      ProcessSpec spec = Shell("exec sleep 60");
      spec.end_with_parent = end_with_parent;
      auto child = ChildProcess::Start(spec);
      const pid_t child_pid = child.ok() ? (*child)->pid() : -1;
      if (write(pids[1], &child_pid, sizeof(child_pid)) != sizeof(child_pid)) _exit(2);
      pause();
      _exit(0);
    }
    close(pids[1]);
    pid_t child = -1;
    REQUIRE(read(pids[0], &child, sizeof(child)) == sizeof(child));
    close(pids[0]);
    REQUIRE(child > 0);
    kill(parent, SIGKILL);
    waitpid(parent, nullptr, 0);
    return child;
  };
  auto gone_within = [](pid_t pid, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (ReadProcessRunState(pid) == ProcessRunState::kGone) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  CHECK(gone_within(grandchild_of_killed_parent(true), 30s));
  const pid_t orphan = grandchild_of_killed_parent(false);
  CHECK_FALSE(gone_within(orphan, 300ms));
  kill(orphan, SIGKILL);
}
}  // namespace
}  // namespace deepool
