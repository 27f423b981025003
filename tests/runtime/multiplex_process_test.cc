// The run spec's "background" field and the executor process with a BG job attached: progress
// lines carry the device-sharing fields.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "worker/runtime/background/background_host.h"
#include "worker/runtime/executor_commands.h"
#include "worker/runtime/executor_events.h"
#include "worker/runtime/executor_process.h"
#include "worker/runtime/run_spec.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const planner::Graph> Model(const std::string& name) {
  auto graph = planner::zoo::BuildModel(name, planner::zoo::ModelOptions{10});
  REQUIRE(graph.ok());
  return std::make_shared<const planner::Graph>(std::move(graph).value());
}

RunSpec SpecWithBackground() {
  RunSpec spec;
  spec.job_id = "fg";
  spec.graph = Model("mlp");
  spec.plan = testing::MakePlan(*spec.graph, 8, 1, {0});
  spec.iterations = 3;
  spec.seed = 1;
  BackgroundSpec bg;
  bg.job_id = "bg";
  bg.graph = Model("mlp");
  bg.batch_size = 4;
  bg.seed = 2;
  bg.iterations = 2;
  spec.background = bg;
  return spec;
}

TEST_CASE("run spec: the background field round-trips and its errors name the field",
          "[multiplex]") {
  RunSpec spec = SpecWithBackground();
  auto parsed = ParseRunSpecJson(RunSpecToJson(spec));
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  REQUIRE(parsed->background.has_value());
  REQUIRE(parsed->background->job_id == "bg");
  REQUIRE(parsed->background->batch_size == 4);
  REQUIRE(parsed->background->iterations == 2);
  REQUIRE(RunSpecToJson(*parsed) == RunSpecToJson(spec));

  spec.background.reset();
  auto without = ParseRunSpecJson(RunSpecToJson(spec));
  REQUIRE(without.ok());
  REQUIRE_FALSE(without->background.has_value());

  auto doc = nlohmann::json::parse(RunSpecToJson(SpecWithBackground()));
  doc["background"]["batch_size"] = 0;
  auto bad = ParseRunSpecJson(doc.dump());
  REQUIRE_FALSE(bad.ok());
  REQUIRE_THAT(bad.status().message(), Catch::Contains("background.batch_size"));
}

TEST_CASE("executor process with a BG job: iteration lines carry the sharing fields",
          "[multiplex]") {
  fs::path dir = fs::temp_directory_path() /
                 ("deepool-mux-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
  fs::create_directories(dir);
  std::string path = (dir / "run.json").string();
  REQUIRE(WriteRunSpecFile(SpecWithBackground(), path).ok());
  ExecutorProcessOptions options;
  options.run_spec_path = path;
  options.rank = 0;
  options.world_size = 1;
  options.store = "127.0.0.1:0";
  options.timeout_s = 30;
  // A command channel beside a run spec BG job: commands are read and ignored.
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const std::string detach = R"({"command":"detach_background","job_id":"bg"})"
                             "\n";
  REQUIRE(::write(pipe_fds[1], detach.data(), detach.size()) ==
          static_cast<ssize_t>(detach.size()));
  options.command_fd = pipe_fds[0];
  std::ostringstream out;
  Status status = RunExecutorProcess(options, out);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  INFO(out.str());
  REQUIRE(status.ok());
  REQUIRE(out.str().find("background_done") == std::string::npos);
  std::istringstream lines(out.str());
  std::string line;
  int iterations = 0;
  bool done = false;
  while (std::getline(lines, line)) {
    auto event = protocol::ParseExecutorEvent(line);
    INFO(line);
    REQUIRE(event.ok());
    if (const auto* iteration = std::get_if<protocol::IterationEvent>(&*event)) {
      ++iterations;
      REQUIRE(iteration->sharing.has_value());  // fg_busy_ms, bg_busy_ms, bg_samples_per_s, ...
    }
    if (std::holds_alternative<protocol::DoneEvent>(*event)) done = true;
  }
  REQUIRE(iterations == 3);
  REQUIRE(done);
  fs::remove_all(dir);
}

// Calls `on_flush` with everything written so far at every flush (std::endl, flush()).
class FlushHook : public std::stringbuf {
 public:
  explicit FlushHook(std::function<void(const std::string&)> on_flush)
      : on_flush_(std::move(on_flush)) {}

 protected:
  int sync() override {
    on_flush_(str());
    return 0;
  }

 private:
  std::function<void(const std::string&)> on_flush_;
};

TEST_CASE("a BG job's end line survives a message that is not UTF-8", "[multiplex]") {
  // A file name in a failed BG job's data folder, say: writing it used to throw, which ended the
  // FG executor hosting the job.
  const std::string line = BackgroundDoneLine("bg-1", protocol::BackgroundEnd::kError,
                                              BackgroundProgress{}, "cannot read /d/\xff/a.jpg");
  StatusOr<protocol::ExecutorEvent> event = protocol::ParseExecutorEvent(line);
  INFO(line);
  REQUIRE(event.ok());
  const auto* done = std::get_if<protocol::BackgroundDoneEvent>(&*event);
  REQUIRE(done != nullptr);
  CHECK(done->status == protocol::BackgroundEnd::kError);
  CHECK(done->progress.job_id == "bg-1");
  CHECK_THAT(done->message, Catch::StartsWith("cannot read /d/") && Catch::EndsWith("/a.jpg"));
}

TEST_CASE("executor commands: attach and detach parse, errors name the field", "[multiplex]") {
  BackgroundSpec bg = SpecWithBackground().background.value();
  nlohmann::json attach = {{"command", "attach_background"}, {"background", BackgroundToJson(bg)}};
  auto parsed = ParseExecutorCommand(attach.dump());
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->kind == ExecutorCommand::Kind::kAttachBackground);
  CHECK(parsed->job_id == "bg");
  CHECK(parsed->background.batch_size == 4);
  auto detach = ParseExecutorCommand(R"({"command":"detach_background","job_id":"bg"})");
  REQUIRE(detach.ok());
  CHECK(detach->kind == ExecutorCommand::Kind::kDetachBackground);
  CHECK(detach->job_id == "bg");
  attach["background"]["batch_size"] = 0;
  REQUIRE_THAT(ParseExecutorCommand(attach.dump()).status().message(),
               Catch::Contains("background.batch_size"));
  REQUIRE_THAT(ParseExecutorCommand(R"({"command":"reboot"})").status().message(),
               Catch::Contains("unknown command"));
  REQUIRE_FALSE(ParseExecutorCommand("{").ok());
}

TEST_CASE("executor process: a BG job attached over the command channel mid-run trains",
          "[multiplex]") {
  constexpr int kFgIterations = 10000;
  fs::path dir = fs::temp_directory_path() /
                 ("deepool-mux-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
  fs::create_directories(dir);
  std::string path = (dir / "run.json").string();
  RunSpec spec = SpecWithBackground();
  BackgroundSpec bg = *spec.background;
  spec.background.reset();  // no BG job at start
  // Enough FG iterations (about 0.2 ms each on a CPU) that the BG job's two finish first even on
  // a loaded machine: with 400 its first iteration once took 0.8 s, and the host ended first.
  spec.iterations = kFgIterations;
  REQUIRE(WriteRunSpecFile(spec, path).ok());
  bg.job_id = "bg-late";
  // One FG rank never waits, so an idle-only gate would never let BG run: concurrent here, and
  // a normal-priority BG thread so a loaded machine cannot starve it.
  bg.sharing.idle_thread_priority = false;
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  ExecutorProcessOptions options;
  options.run_spec_path = path;
  options.store = "127.0.0.1:0";
  options.timeout_s = 30;
  options.command_fd = pipe_fds[0];
  options.background_sharing = "concurrent";
  // The attach command goes out once the first FG iteration was reported: mid-run.
  bool sent = false;
  const std::string attach =
      nlohmann::json{{"command", "attach_background"}, {"background", BackgroundToJson(bg)}}
          .dump() +
      "\n";
  FlushHook hook([&](const std::string& text) {
    if (sent || text.find("\"event\":\"iteration\"") == std::string::npos) return;
    sent = true;
    REQUIRE(::write(pipe_fds[1], attach.data(), attach.size()) ==
            static_cast<ssize_t>(attach.size()));
  });
  std::ostream out(&hook);
  Status status = RunExecutorProcess(options, out);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  INFO(hook.str());
  REQUIRE(status.ok());
  std::istringstream lines(hook.str());
  std::string line;
  int iterations = 0, shared_iterations = 0, progress_lines = 0;
  std::optional<protocol::BackgroundDoneEvent> done_bg;
  bool first_shared = false, done = false;
  while (std::getline(lines, line)) {
    auto event = protocol::ParseExecutorEvent(line);
    INFO(line);
    REQUIRE(event.ok());
    if (const auto* iteration = std::get_if<protocol::IterationEvent>(&*event)) {
      if (iteration->sharing) {
        first_shared = first_shared || iterations == 0;
        ++shared_iterations;
      }
      ++iterations;
    } else if (const auto* progress = std::get_if<protocol::BackgroundEvent>(&*event)) {
      CHECK(progress->job_id == "bg-late");
      ++progress_lines;
    } else if (const auto* ended = std::get_if<protocol::BackgroundDoneEvent>(&*event)) {
      done_bg = *ended;
    } else if (std::holds_alternative<protocol::DoneEvent>(*event)) {
      done = true;
    }
  }
  CHECK(iterations == kFgIterations);
  CHECK_FALSE(first_shared);  // the first iteration ran before the job was attached
  CHECK(shared_iterations > 0);
  CHECK(progress_lines == shared_iterations);
  REQUIRE(done_bg.has_value());
  CHECK(done_bg->progress.job_id == "bg-late");
  CHECK(done_bg->status == protocol::BackgroundEnd::kOk);
  CHECK(done_bg->progress.iterations == 2);
  CHECK(done_bg->progress.loss.has_value());
  CHECK(done);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deepool::worker
