// The deepool commands that need no coordinator (model, plan, simulate), run as a user runs them:
// the real binary from build/bin, its stdout parsed and its exit code checked.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "planner/graph.h"
#include "planner/plan.h"
#include "tests/shell_command.h"
#include "tests/temp_dir.h"

namespace {

using deepool::testing::CommandOutput;
using deepool::testing::RunShell;
using deepool::testing::TempDir;

CommandOutput RunDeepool(const std::string& args) {
  return RunShell(std::string(DEEPOOL_BIN_DIR) + "/deepool " + args);
}

// `deepool <args>` (a plan command with --json) succeeds and prints a plan the parser accepts.
deepool::planner::Plan RunPlanJson(const std::string& args) {
  auto planned = RunDeepool(args);
  REQUIRE(planned.exit_code == 0);
  auto plan = deepool::planner::ParsePlanJson(planned.out);
  REQUIRE(plan.ok());
  return *plan;
}

TEST_CASE("deepool model show --json prints a graph the parser accepts", "[cli]") {
  auto shown = RunDeepool("model show small_cnn --json --num-classes 10");
  REQUIRE(shown.exit_code == 0);
  auto doc = nlohmann::json::parse(shown.out);
  CHECK(doc["total_params"] == 4266);
  auto graph = deepool::planner::ParseGraphJson(shown.out);
  REQUIRE(graph.ok());
  CHECK(graph->total_params() == 4266);

  auto listed = RunDeepool("model list");
  CHECK(listed.exit_code == 0);
  CHECK_THAT(listed.out, Catch::Contains("wide_resnet101_2") && Catch::Contains("inception_v3"));

  auto unknown = RunDeepool("model show no_such_model 2>/dev/null");
  CHECK(unknown.exit_code == 5);
}

TEST_CASE("deepool plan --json prints a valid plan within the limit", "[cli]") {
  const auto plan = RunPlanJson(
      "plan --model vgg16 --global-batch 32 --gpus 8 --amplification-limit 2.0 --device a100 "
      "--json");
  CHECK(plan.Validate().ok());
  CHECK(plan.global_batch == 32);
  CHECK(plan.totals.devices_used <= 8);
  CHECK(plan.totals.amplification <= 2.0 * 1.001);
  CHECK(plan.totals.iteration_ms <= plan.data_parallel.iteration_ms * 1.001);

  auto table = RunDeepool(
      "plan --model vgg16 --global-batch 32 --gpus 8 --amplification-limit 2.0 --device a100");
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("features.0") && Catch::Contains("data parallelism"));
  CHECK_THAT(table.out, Catch::Contains("Pareto frontiers epsilon-optimal, epsilon 0.0010"));
  auto exact = RunDeepool(
      "plan --model vgg16 --global-batch 32 --gpus 8 --device a100 --pareto-tolerance 0");
  CHECK(exact.exit_code == 0);
  CHECK_THAT(exact.out, Catch::Contains("Pareto frontiers exact;"));

  auto explained = RunDeepool(
      "plan --model vgg16 --global-batch 32 --gpus 8 --amplification-limit 2.0 --device a100 "
      "--explain");
  CHECK(explained.exit_code == 0);
  // At G = 8 the plan is data parallelism itself (the classifier's gradient all-reduces hide
  // behind backward): one group of every layer.
  CHECK_THAT(explained.out, Catch::Contains("why each device count") &&
                                Catch::Contains("features.0 .. classifier.6 (40 layers) on 8") &&
                                Catch::Contains("of limit 2.00"));
  CHECK(RunDeepool("plan --model vgg16 --global-batch 32 --gpus 8 --device a100 --explain --json "
                   "2>/dev/null")
            .exit_code == 2);

  // Without a device or profile the error names the presets to choose from.
  auto no_device = RunDeepool("plan --model vgg16 --global-batch 32 --gpus 8 2>&1");
  CHECK(no_device.exit_code == 2);
  CHECK_THAT(no_device.out, Catch::Contains("--device NAME") && Catch::Contains("a100, h100"));

  auto impossible = RunDeepool(
      "plan --model vgg16 --global-batch 32 --gpus 8 --amplification-limit 0.5 --device a100 "
      "2>/dev/null");
  CHECK(impossible.exit_code == 3);
}

TEST_CASE("deepool plan --curve prints the plan at every device count", "[cli]") {
  // Inception-v3: its plans differ from data parallelism at these counts.
  const std::string base = "plan --model inception_v3 --global-batch 32 --device a100 --gpus ";
  auto listed = RunDeepool(base + "4 --curve --json");
  REQUIRE(listed.exit_code == 0);
  const nlohmann::json curve = nlohmann::json::parse(listed.out);
  REQUIRE(curve.at("points").size() == 4);
  CHECK(curve.at("points")[0].at("speedup").get<double>() == Approx(1.0));
  for (int devices = 1; devices <= 4; ++devices) {
    const nlohmann::json& point = curve.at("points")[static_cast<size_t>(devices - 1)];
    CHECK(point.at("devices").get<int>() == devices);
    const auto plan = RunPlanJson(base + std::to_string(devices) + " --json");
    CHECK(point.at("iteration_ms").get<double>() == Approx(plan.totals.iteration_ms));
  }
  auto table = RunDeepool(base + "4 --curve");
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("speed-up curve of inception_v3"));
  CHECK(RunDeepool(base + "4 --curve --explain 2>/dev/null").exit_code == 2);
}

TEST_CASE("deepool plan charges gradient all-reduces as its flags say", "[cli]") {
  const std::string base = "plan --model vgg16 --global-batch 32 --gpus 8 --device a100 --json";
  const auto bucketed = RunPlanJson(base);
  // One ring all-reduce per layer after backward (the old model): data parallelism pays every
  // all-reduce in full, so it is slower, and a burst plan beats it.
  const auto serial = RunPlanJson(base + " --gradient-bucket-mb 0 --no-overlap --ring-only");
  CHECK(serial.data_parallel.iteration_ms > 1.1 * bucketed.data_parallel.iteration_ms);
  CHECK(serial.totals.iteration_ms < serial.data_parallel.iteration_ms);
  CHECK(RunDeepool(base + " --gradient-bucket-mb -1 2>/dev/null").exit_code == 2);
}

TEST_CASE("deepool plan --concurrent-branches runs Inception's towers side by side", "[cli]") {
  // Inception-v3 at B = 64 on 64 A100s without a limit: packing finds a faster layout.
  const std::string request =
      "plan --model inception_v3 --global-batch 64 --gpus 64 --amplification-limit 0 "
      "--device a100";
  const std::string base = request + " --json";
  auto off_rank_zero = [](const deepool::planner::Plan& plan) {
    return std::count_if(plan.layers.begin(), plan.layers.end(),
                         [](const auto& layer) { return layer.devices.front() > 0; });
  };
  const auto serial = RunPlanJson(base);
  CHECK(off_rank_zero(serial) == 0);
  const auto packed = RunPlanJson(base + " --concurrent-branches");
  CHECK(off_rank_zero(packed) > 0);
  CHECK(packed.totals.iteration_ms < serial.totals.iteration_ms);
  CHECK(packed.totals.devices_used <= 64);
  // The table names the ranks of a layer that does not start at rank 0.
  const auto moved = std::find_if(packed.layers.begin(), packed.layers.end(),
                                  [](const auto& layer) { return layer.devices.front() > 0; });
  REQUIRE(moved != packed.layers.end());
  auto table = RunDeepool(request + " --concurrent-branches");
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("(rank"));
  CHECK_THAT(table.out, Catch::Contains(std::to_string(moved->devices.front()) + "-" +
                                        std::to_string(moved->devices.back()) + ")"));
}

TEST_CASE("a measured profile plans on a cluster of its own devices, and another is warned about",
          "[cli]") {
  // A CPU-measured profile without layers: every layer falls back to the analytical a100 model,
  // but the links must still be the profile's devices' (cpu-G), not the default dgx-a100's.
  TempDir dir;
  const std::string profile = dir.File("cpu.json");
  std::ofstream(profile) << R"({"format":"deepool.profile","version":1,"device":"cpu",)"
                         << R"("model":"small_cnn","layers":[]})";
  const std::string base = "plan --model small_cnn --global-batch 32 --gpus 4 --profile " +
                           profile + " --fallback-device a100";
  const CommandOutput by_default = RunDeepool(base + " --json 2>&1");
  const CommandOutput on_cpu = RunDeepool(base + " --cluster cpu-4 --json 2>&1");
  REQUIRE(by_default.exit_code == 0);
  CHECK(by_default.out == on_cpu.out);
  CHECK(by_default.out.find("warning") == std::string::npos);
  const CommandOutput on_a100 = RunDeepool(base + " --cluster dgx-a100 2>&1");
  REQUIRE(on_a100.exit_code == 0);
  CHECK_THAT(on_a100.out, Catch::Contains("warning: the profile was measured on cpu devices but "
                                          "cluster dgx-a100 has a100 devices"));
  const CommandOutput simulated = RunDeepool(
      "simulate --fg-model small_cnn --global-batch 32 --gpus 4 --device a100 "
      "--profile " +
      profile + " --cluster dgx-a100 --json 2>&1 >/dev/null");
  CHECK_THAT(simulated.out, Catch::Contains("measured on cpu devices"));
}

TEST_CASE("deepool plan's search line says whether blocks were searched whole", "[cli]") {
  const std::string base = "plan --global-batch 32 --gpus 8 --device a100 --model ";
  const CommandOutput chain = RunDeepool(base + "vgg16");
  const CommandOutput residual = RunDeepool(base + "resnet50");
  const CommandOutput by_layers = RunDeepool(base + "resnet50 --granularity layers");
  REQUIRE(chain.exit_code == 0);
  REQUIRE(residual.exit_code == 0);
  REQUIRE(by_layers.exit_code == 0);
  // VGG-16 is a chain: with the default granularity every solve is layer by layer all the same.
  CHECK_THAT(chain.out, Catch::Contains("search: granularity mixed (the graph has no block to "
                                        "search whole: layer by layer)"));
  CHECK_THAT(residual.out,
             Catch::Contains("search: granularity mixed (blocks searched whole in some solves)"));
  CHECK_THAT(by_layers.out, Catch::Contains("search: Pareto frontiers"));
}

TEST_CASE("deepool plan says what iteration overhead the profile adds, and where", "[cli]") {
  TempDir dir;
  const std::string bare = dir.File("bare.json");
  const std::string with_overhead = dir.File("overhead.json");
  const std::string head = R"({"format":"deepool.profile","version":1,"device":"cpu",)"
                           R"("model":"small_cnn","layers":[])";
  std::ofstream(bare) << head << "}";
  std::ofstream(with_overhead)
      << head << R"(,"iteration_overhead":[{"batch":1,"ms":3},{"batch":64,"ms":5}]})";
  const std::string base =
      "plan --model small_cnn --global-batch 32 --gpus 1 --fallback-device "
      "a100 --profile ";
  const CommandOutput without = RunDeepool(base + bare + " 2>&1");
  const CommandOutput with = RunDeepool(base + with_overhead + " 2>&1");
  REQUIRE(without.exit_code == 0);
  REQUIRE(with.exit_code == 0);
  CHECK(without.out.find("iteration overhead") == std::string::npos);
  // 3 + 2 x 31 / 63 ms at the whole batch of 32 on one device, in the output layer's forward.
  CHECK_THAT(with.out, Catch::Contains("iteration overhead: 3.984 ms at 32 samples per device"));
  CHECK_THAT(with.out, Catch::Contains("included in fc's FW MS"));
}

TEST_CASE(
    "a plan slower than DDP-style data parallelism because of synchronised batch norm says so",
    "[cli]") {
  const std::string base = "plan --global-batch 32 --gpus 8 --device a100 --model ";
  // ResNet-50 at G = 8: synchronised statistics make every plan slower than the baseline, which
  // keeps them per device (docs/benchmarks.md, "Per-device batch norm").
  const CommandOutput resnet = RunDeepool(base + "resnet50");
  REQUIRE(resnet.exit_code == 0);
  const std::string marker = "With --batch-norm per_device: ";
  const size_t at = resnet.out.find(marker);
  REQUIRE(at != std::string::npos);
  const double per_device_ms = std::stod(resnet.out.substr(at + marker.size()));
  const deepool::planner::Plan synchronised = RunPlanJson(base + "resnet50 --json");
  REQUIRE(synchronised.totals.iteration_ms > synchronised.data_parallel.iteration_ms);
  const deepool::planner::Plan per_device =
      RunPlanJson(base + "resnet50 --batch-norm per_device --json");
  CHECK(per_device_ms == Approx(per_device.totals.iteration_ms).epsilon(0.01));
  CHECK(per_device_ms < synchronised.totals.iteration_ms);
  // Nothing to say without batch norm, when asked for per-device statistics already, or when the
  // plan is not slower.
  for (const std::string& args :
       {base + "vgg16", base + "resnet50 --batch-norm per_device",
        std::string("plan --global-batch 64 --gpus 64 --device a100 --model wide_resnet101_2")}) {
    const CommandOutput other = RunDeepool(args);
    REQUIRE(other.exit_code == 0);
    CHECK(other.out.find(marker) == std::string::npos);
  }
}

TEST_CASE("deepool plan --precision plans at it and refuses what the device or profile lacks",
          "[cli]") {
  const std::string base = "plan --model resnet50 --global-batch 64 --gpus 8 --device h100";
  const auto tf32 = RunPlanJson(base + " --json");
  const auto named = RunPlanJson(base + " --precision tf32 --json");
  const auto bf16 = RunPlanJson(base + " --precision bf16 --json");
  // The device's default is tf32: naming it changes nothing; bf16 is faster and says so.
  CHECK(named.totals.iteration_ms == tf32.totals.iteration_ms);
  CHECK(tf32.profile_source == "analytical:h100");
  CHECK(bf16.profile_source == "analytical:h100 (bf16)");
  CHECK(bf16.single_device_ms < tf32.single_device_ms);
  const CommandOutput table = RunDeepool(base + " --precision bf16");
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out,
             Catch::Contains("precision: bf16 (activations and their gradients 2 bytes"));

  const CommandOutput v100 = RunDeepool(
      "plan --model resnet50 --global-batch 64 --gpus 8 --device v100 --precision bf16 2>&1");
  CHECK(v100.exit_code == 2);
  CHECK_THAT(v100.out, Catch::Contains("device preset \"v100\" has no bf16 math"));
  const CommandOutput unknown = RunDeepool(base + " --precision half 2>&1");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.out, Catch::Contains("unknown precision \"half\""));

  TempDir dir;
  const std::string profile = dir.File("bf16.json");
  std::ofstream(profile) << R"({"format":"deepool.profile","version":1,"device":"a100",)"
                         << R"("model":"small_cnn","precision":"bf16","layers":[]})";
  const std::string with_file = "plan --model small_cnn --global-batch 32 --gpus 4 --profile " +
                                profile + " --fallback-device a100";
  const CommandOutput at_file = RunDeepool(with_file);
  REQUIRE(at_file.exit_code == 0);
  CHECK_THAT(at_file.out, Catch::Contains("analytical:a100 (bf16)"));
  CHECK_THAT(at_file.out, Catch::Contains("precision: bf16"));
  const CommandOutput other = RunDeepool(with_file + " --precision tf32 2>&1");
  CHECK(other.exit_code == 3);
  CHECK_THAT(other.out, Catch::Contains("is for bf16: cannot plan at tf32"));
}

TEST_CASE("deepool simulate --json compares DP, BP and BP+BG", "[cli]") {
  auto simulated =
      RunDeepool("simulate --fg-model small_cnn --global-batch 32 --gpus 4 --device a100 --json");
  REQUIRE(simulated.exit_code == 0);
  auto doc = nlohmann::json::parse(simulated.out);
  CHECK(doc["format"] == "deepool.simulation");
  std::map<std::string, nlohmann::json> configs;
  for (const auto& config : doc["configs"]) configs[config["name"]] = config;
  REQUIRE(configs.count("DP"));
  REQUIRE(configs.count("BP"));
  REQUIRE(configs.count("BP+BG"));
  for (const auto& [name, config] : configs) {
    INFO(name);
    CHECK(config["fg_iteration_ms"].get<double>() > 0);
  }
}

TEST_CASE("deepool simulate charges gradient all-reduces as its flags say, as plan does", "[cli]") {
  const std::string base =
      "simulate --fg-model vgg16 --global-batch 32 --gpus 8 --device a100 --no-bg --json";
  auto configs_of = [](const std::string& args) {
    auto run = RunDeepool(args);
    REQUIRE(run.exit_code == 0);
    std::map<std::string, double> fg_ms;
    const auto doc = nlohmann::json::parse(run.out);
    for (const auto& config : doc["configs"]) {
      fg_ms[config["name"]] = config["fg_iteration_ms"].get<double>();
    }
    return fg_ms;
  };
  auto bucketed = configs_of(base);
  auto serial = configs_of(base + " --gradient-bucket-mb 0 --no-overlap --ring-only");
  // The same DP iteration as `deepool plan` with the same flags.
  const auto plan = RunPlanJson(
      "plan --model vgg16 --global-batch 32 --gpus 8 --device a100 --json --gradient-bucket-mb 0 "
      "--no-overlap --ring-only");
  CHECK(serial["DP"] == Approx(plan.data_parallel.iteration_ms).epsilon(1e-6));
  CHECK(serial["DP"] > 1.1 * bucketed["DP"]);
  CHECK(serial["BP"] < serial["DP"]);
  CHECK(RunDeepool(base + " --pareto-tolerance 2 2>/dev/null").exit_code == 2);
  // The text report says which charge it made.
  const std::string text =
      "simulate --fg-model vgg16 --global-batch 32 --gpus 8 --device a100 --no-bg";
  auto described = RunDeepool(text);
  REQUIRE(described.exit_code == 0);
  CHECK_THAT(described.out, Catch::Contains("cost model: gradient all-reduces in buckets of 25 MiB "
                                            "overlapped with backward, ring or tree; branches one "
                                            "after another"));
  described = RunDeepool(text +
                         " --gradient-bucket-mb 0 --no-overlap --ring-only "
                         "--concurrent-branches");
  REQUIRE(described.exit_code == 0);
  CHECK_THAT(described.out, Catch::Contains("cost model: gradient all-reduces one per layer after "
                                            "backward, ring only; branches side by side where "
                                            "faster"));
}

}  // namespace

TEST_CASE("a mistyped command or flag is named with the closest match", "[cli]") {
  auto command = RunDeepool("statsu 2>&1");
  CHECK(command.exit_code == 2);
  CHECK_THAT(command.out, Catch::Contains("there is no command 'statsu'; did you mean 'status'?"));

  // Help for a command that does not exist is an error, not the main help.
  auto help = RunDeepool("statsu --help 2>&1");
  CHECK(help.exit_code == 2);
  CHECK_THAT(help.out, Catch::Contains("did you mean 'status'?"));

  auto nested = RunDeepool("model shwo small_cnn 2>&1");
  CHECK(nested.exit_code == 2);
  CHECK_THAT(nested.out, Catch::Contains("deepool model: there is no command 'shwo'; did you "
                                         "mean 'show'?"));

  auto flag = RunDeepool("plan --model vgg16 --global-bach 32 --gpus 8 2>&1");
  CHECK(flag.exit_code == 2);
  CHECK_THAT(flag.out, Catch::Contains("deepool plan: unknown flag --global-bach; did you mean "
                                       "--global-batch?"));

  auto far = RunDeepool("frobnicate 2>&1");
  CHECK(far.exit_code == 2);
  CHECK_THAT(far.out, Catch::Contains("there is no command 'frobnicate'"));
  CHECK_THAT(far.out, !Catch::Contains("did you mean"));

  CHECK(RunDeepool("plan --help").exit_code == 0);
}

TEST_CASE("deepool runs the offline commands without gRPC or OpenSSL and hands off the rest",
          "[cli]") {
  const std::string bin = DEEPOOL_BIN_DIR;
  if (!std::filesystem::exists(bin + "/deepool-full")) {
    WARN("built without the coordinator commands: deepool is the only executable");
    return;
  }
  auto libraries = RunShell("ldd " + bin + "/deepool");
  REQUIRE(libraries.exit_code == 0);
  CHECK_THAT(libraries.out, Catch::Contains("libc.so"));
  for (const char* heavy : {"grpc", "libssl", "libcrypto", "protobuf", "absl"}) {
    INFO(heavy);
    CHECK_THAT(libraries.out, !Catch::Contains(heavy));
  }
  // The full command set answers for the rest: the main help lists the coordinator commands...
  auto help = RunDeepool("--help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::Contains("status") && Catch::Contains("plan"));
  // ...and a coordinator command runs there (nothing listens on this port).
  auto status = RunDeepool("status --coordinator 127.0.0.1:1 2>&1");
  CHECK(status.exit_code == 4);
  CHECK_THAT(status.out, !Catch::Contains("cannot be run"));
  // --version is answered without it: a copy of deepool alone in a folder still prints it.
  TempDir folder;
  const std::string alone = folder.path();
  std::filesystem::copy_file(bin + "/deepool", alone + "/deepool",
                             std::filesystem::copy_options::overwrite_existing);
  auto version = RunShell(alone + "/deepool --version 2>&1");
  CHECK(version.exit_code == 0);
  CHECK(version.out == RunShell(bin + "/deepool-full --version").out);
  CHECK_THAT(version.out,
             Catch::Matches("deepool 0\\.1\\.0 \\(commit ([0-9a-f]{12}(-dirty)?|unknown)\\)\n"));
}

namespace {

struct HelpEntry {
  std::string section;  // "Options", "Subcommands" or "Positionals"
  std::string name;     // the first word of the entry: a flag, a command or a positional
  std::string description;
};

// The entries of `help` in CLI11's layout (and argparse's, for `deepool import`): under a section
// heading, a name and then its description after two or more spaces, or on the next line when the
// name is long; a description's further lines are indented deeper than the names.
std::vector<HelpEntry> HelpEntries(const std::string& help) {
  std::vector<HelpEntry> entries;
  std::istringstream lines(help);
  std::string line, section;
  std::optional<HelpEntry> pending;  // a long name whose description is on the next line
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != ' ') {
      section = line.size() > 1 && line.back() == ':' ? line.substr(0, line.size() - 1) : "";
      continue;
    }
    if (section.empty()) continue;
    const size_t text = line.find_first_not_of(' ');
    if (text > 4) {  // a description's line: of a long name above, or a wrapped one's next
      if (pending) {
        pending->description = line.substr(text);
        entries.push_back(*pending);
        pending.reset();
      }
      continue;
    }
    HelpEntry entry{section, line.substr(text, line.find(' ', text) - text), ""};
    const size_t gap = line.find("  ", text);
    const size_t description = gap == std::string::npos ? gap : line.find_first_not_of(' ', gap);
    if (description == std::string::npos) {
      pending = entry;
    } else {
      entry.description = line.substr(description);
      entries.push_back(entry);
    }
  }
  return entries;
}

}  // namespace

TEST_CASE("every command and option is described in a sentence that starts with a capital",
          "[cli]") {
  std::vector<std::string> commands{""};  // grows with each help's subcommands
  for (size_t i = 0; i < commands.size(); ++i) {
    auto help = RunDeepool(commands[i] + " --help");
    INFO("deepool " << commands[i] << " --help");
    REQUIRE(help.exit_code == 0);
    const std::vector<HelpEntry> entries = HelpEntries(help.out);
    CHECK_FALSE(entries.empty());  // at least --help: the layout was read
    for (const HelpEntry& entry : entries) {
      INFO(entry.name << ": " << entry.description);
      REQUIRE_FALSE(entry.description.empty());
      CHECK_FALSE(std::islower(static_cast<unsigned char>(entry.description[0])));
      if (entry.section == "Subcommands") {
        commands.push_back(commands[i].empty() ? entry.name : commands[i] + " " + entry.name);
      }
    }
  }
  CHECK(commands.size() >= 7);  // deepool, model and its two, plan, profile, simulate...
}

// What bash offers for the words of `line` (the last word is the one being completed), through
// the script `deepool completion bash` prints.
std::string BashCompletes(const std::string& script, const std::string& line) {
  const std::string command =
      "bash -c 'source \"$0\"; COMP_WORDS=(" + line +
      "); "
      "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _deepool; echo \"${COMPREPLY[*]}\"' " +
      script;
  CommandOutput completed = RunShell(command);
  REQUIRE(completed.exit_code == 0);
  std::string out = std::move(completed.out);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST_CASE("JSON nested a million deep is refused with a message, not a crash", "[cli]") {
  TempDir dir;
  const std::string nested = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  std::ofstream(dir.File("spec.json")) << R"({"model": "mlp", "graph": )" << nested << "}";
  std::ofstream(dir.File("graph.json")) << nested;

  // Refused before the coordinator is asked (none listens on port 1).
  auto submitted =
      RunDeepool("submit " + dir.File("spec.json") + " --coordinator 127.0.0.1:1 2>&1");
  CHECK(submitted.exit_code == 3);
  CHECK_THAT(submitted.out, Catch::Contains("nested deeper than 100 levels"));
  auto planned = RunDeepool("plan --graph " + dir.File("graph.json") + " --device a100 --gpus 2 " +
                            "--global-batch 8 2>&1");
  CHECK(planned.exit_code != 0);
  CHECK(planned.exit_code != -1);  // -1: killed by a signal
  CHECK_THAT(planned.out, Catch::Contains("nested deeper than 100 levels"));
}

TEST_CASE("deepool completion bash completes commands, subcommands and flags", "[cli]") {
  TempDir dir;
  const std::string script = dir.File("deepool.bash");
  REQUIRE(RunDeepool("completion bash > " + script).exit_code == 0);
  CHECK(BashCompletes(script, "deepool sta") == "status");
  CHECK(BashCompletes(script, "deepool s") == "simulate submit status");  // in registration order
  CHECK(BashCompletes(script, "deepool model s") == "show");
  CHECK(BashCompletes(script, "deepool plan --global") == "--global-batch");
  CHECK(BashCompletes(script, "deepool model show --num") == "--num-classes");
  CHECK(BashCompletes(script, "deepool submit --detach --gpu") == "--gpus");

  auto zsh = RunDeepool("completion zsh");
  CHECK(zsh.exit_code == 0);
  CHECK_THAT(zsh.out, Catch::StartsWith("#compdef deepool") && Catch::Contains("bashcompinit"));
  CHECK(RunDeepool("completion fish 2>/dev/null").exit_code == 2);
}
