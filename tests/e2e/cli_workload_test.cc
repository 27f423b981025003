// `deepool workload generate`, `show` and `simulate` as a user runs them: the light
// `deepool` executable, files in a temporary directory, exit codes (docs/cli.md).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/shell_command.h"
#include "tests/temp_dir.h"

namespace {

using deepool::testing::TempDir;

using deepool::testing::CommandOutput;
using deepool::testing::RunShell;

CommandOutput RunDeepool(const std::string& args) {
  return RunShell(std::string(DEEPOOL_BIN_DIR) + "/deepool " + args);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("deepool workload generate writes the same trace for the same seed", "[cli]") {
  TempDir dir;
  const std::string flags = "workload generate --jobs 200 --load 0.5 --devices 64 --seed 3";
  const CommandOutput first = RunDeepool(flags + " -o " + dir.path() + "/a.jsonl");
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.out, Catch::StartsWith("wrote 200 jobs to "));
  REQUIRE(RunDeepool(flags + " -o " + dir.path() + "/b.jsonl").exit_code == 0);
  const std::string text = ReadFile(dir.path() + "/a.jsonl");
  CHECK(text == ReadFile(dir.path() + "/b.jsonl"));
  // Without -o the trace goes to stdout.
  const CommandOutput printed = RunDeepool(flags);
  CHECK(printed.exit_code == 0);
  CHECK(printed.out == text);

  const CommandOutput shown = RunDeepool("workload show " + dir.path() + "/a.jsonl");
  CHECK(shown.exit_code == 0);
  CHECK_THAT(shown.out, Catch::StartsWith("jobs: 200 ("));
  CHECK_THAT(shown.out, Catch::Contains("generated: seed 3, gavel durations"));
  CHECK_THAT(shown.out, Catch::Contains("MODEL") && Catch::Contains("resnet50"));
}

TEST_CASE("deepool workload refuses unknown models and bad files with the right exit", "[cli]") {
  TempDir dir;
  const CommandOutput model = RunDeepool("workload generate --jobs 5 --models resnet5 2>&1");
  CHECK(model.exit_code == 5);
  CHECK_THAT(model.out, Catch::Contains("no zoo model named resnet5 (did you mean resnet50?)"));
  CHECK(RunDeepool("workload generate --jobs 5 --load 0 2>/dev/null").exit_code == 3);

  const std::string bad = dir.path() + "/bad.jsonl";
  std::ofstream(bad)
      << R"({"format":"deepool.workload","version":1,"reference_device":"v100"})"
      << "\n"
      << R"({"id":0,"arrival_s":1,"user":"a","role":"fg","model":"mlp","global_batch":8,"gpus":9000,"iterations":3})"
      << "\n";
  const CommandOutput shown = RunDeepool("workload show " + bad + " 2>&1");
  CHECK(shown.exit_code == 3);
  CHECK(shown.out == "error: " + bad + ": line 2: gpus: must be in [1, 4096]\n");
}

TEST_CASE("deepool workload simulate replays a trace under each configuration asked for", "[cli]") {
  TempDir dir;
  const std::string trace = dir.path() + "/trace.jsonl";
  REQUIRE(RunDeepool("workload generate --jobs 60 --load 4 --devices 24 --seed 2 --models "
                     "resnet50,gpt_tiny -o " +
                     trace)
              .exit_code == 0);
  const CommandOutput simulated =
      RunDeepool("workload simulate --trace " + trace + " --policy fifo-dp,deepool");
  REQUIRE(simulated.exit_code == 0);
  CHECK_THAT(simulated.out,
             Catch::StartsWith("60 jobs on 24 devices (8 a100, 8 h100, 8 v100); modelled"));
  CHECK_THAT(simulated.out, Catch::Contains("CONFIGURATION") && Catch::Contains("MEAN JCT (h)"));
  // One row per configuration, in the order asked, each with its metrics.
  const size_t fifo = simulated.out.find("\nfifo-dp ");
  const size_t deepool = simulated.out.find("\ndeepool ");
  REQUIRE(fifo != std::string::npos);
  REQUIRE(deepool != std::string::npos);
  CHECK(fifo < deepool);
  CHECK(simulated.out.find("max-min") == std::string::npos);
  // The same trace, the same table.
  CHECK(RunDeepool("workload simulate --trace " + trace + " --policy fifo-dp,deepool").out ==
        simulated.out);
  // --devices overrides the trace's pool.
  CHECK_THAT(
      RunDeepool("workload simulate --trace " + trace + " --policy deepool --devices 48").out,
      Catch::StartsWith("60 jobs on 48 devices (16 a100"));

  const CommandOutput unknown =
      RunDeepool("workload simulate --trace " + trace + " --policy fifo 2>&1");
  CHECK(unknown.exit_code == 5);
  CHECK_THAT(unknown.out, Catch::Contains("no scheduling configuration named \"fifo\" (choices: "
                                          "fifo-dp, static-partitions"));
  CHECK(
      RunDeepool("workload simulate --trace " + dir.path() + "/none.jsonl 2>/dev/null").exit_code !=
      0);
}

}  // namespace
