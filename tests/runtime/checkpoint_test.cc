// Checkpoints: save, load back in C++, refuse mismatched files; and, where Python with torch and
// torchvision is installed, load in Python into torchvision's model of the same name with
// strict=True and compare its outputs with ours (tests/runtime/checkpoint_torchvision_check.py).
#include "worker/runtime/checkpoints/checkpoint.h"

#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "planner/zoo/zoo.h"
#include "tests/shell_command.h"
#include "tests/source_dir.h"
#include "tests/temp_dir.h"
#include "worker/runtime/layers/layer_module.h"

namespace deepool::worker {
namespace {

using deepool::testing::TempDir;

namespace fs = std::filesystem;
using planner::Graph;

// The project's virtual environment (scripts/install-torch.sh): torch and torchvision of the
// release deepool builds against.
constexpr const char* kPython = DEEPOOL_TORCH_PYTHON;

Graph MustBuild(const std::string& name, const planner::zoo::ModelOptions& options = {}) {
  auto graph = planner::zoo::BuildModel(name, options);
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

std::vector<std::shared_ptr<LayerModule>> MustBuildModules(const Graph& graph, uint64_t seed) {
  auto modules = BuildAllLayerModules(graph, seed);
  INFO(modules.status().ToString());
  REQUIRE(modules.ok());
  return std::move(modules).value();
}

StateDict MustCollect(const Graph& graph, const std::vector<std::shared_ptr<LayerModule>>& m) {
  auto state = CollectStateDict(graph, m);
  INFO(state.status().ToString());
  REQUIRE(state.ok());
  return std::move(state).value();
}

void RequireSameState(const StateDict& a, const StateDict& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    REQUIRE(a[i].first == b[i].first);
    CHECK(a[i].second.dtype() == b[i].second.dtype());
    CHECK(torch::equal(a[i].second.cpu(), b[i].second.cpu()));
  }
}

// Runs a command, returning its exit status and, in `output`, what it printed.
int RunCommand(const std::string& command, std::string* output) {
  deepool::testing::CommandOutput run = deepool::testing::RunShell(command + " 2>&1");
  *output += run.out;
  return run.exit_code;
}

bool PythonWithTorchvision(std::string* why) {
  if (access(kPython, X_OK) != 0) {
    *why = std::string(kPython) + " is not installed";
    return false;
  }
  std::string output;
  if (RunCommand(std::string(kPython) + " -c 'import torch, torchvision'", &output) != 0) {
    *why = std::string(kPython) + " cannot import torch and torchvision: " + output;
    return false;
  }
  return true;
}

TEST_CASE("a checkpoint round-trips through a file in C++", "[checkpoint]") {
  TempDir dir;
  Graph graph = MustBuild("small_cnn");
  auto source = MustBuildModules(graph, 1);
  // Train a step so that buffers (running stats, num_batches_tracked) hold non-initial values.
  torch::manual_seed(0);
  auto out = ForwardGraph(graph, source, torch::randn({4, 3, 16, 16}));
  REQUIRE(out.ok());
  StateDict saved = MustCollect(graph, source);
  REQUIRE(SaveCheckpoint(dir.File("model.pt"), saved).ok());
  CHECK_FALSE(fs::exists(dir.File("model.pt.tmp")));

  auto loaded = LoadCheckpoint(dir.File("model.pt"));
  INFO(loaded.status().ToString());
  REQUIRE(loaded.ok());
  RequireSameState(saved, *loaded);

  auto target = MustBuildModules(graph, 2);
  REQUIRE_FALSE(torch::equal(MustCollect(graph, target)[0].second, saved[0].second));
  Status status = LoadStateDictInto(*loaded, graph, target);
  INFO(status.ToString());
  REQUIRE(status.ok());
  RequireSameState(saved, MustCollect(graph, target));
  bool has_tracked = false;
  for (const auto& [key, tensor] : saved) {
    if (key == "stem.bn.num_batches_tracked") {
      has_tracked = true;
      CHECK(tensor.item<int64_t>() == 1);
    }
  }
  CHECK(has_tracked);
}

TEST_CASE("a rank holding some layers saves and loads only those", "[checkpoint]") {
  TempDir dir;
  Graph graph = MustBuild("mlp");
  auto full = MustBuildModules(graph, 5);
  REQUIRE(SaveCheckpoint(dir.File("full.pt"), MustCollect(graph, full)).ok());

  auto partial = MustBuildModules(graph, 6);
  const int fc1 = *graph.FindLayer("fc1");
  partial[static_cast<size_t>(fc1)] = nullptr;  // this rank does not hold fc1
  StateDict partial_state = MustCollect(graph, partial);
  for (const auto& [key, tensor] : partial_state) CHECK(key.rfind("fc1.", 0) != 0);

  auto loaded = LoadCheckpoint(dir.File("full.pt"));
  REQUIRE(loaded.ok());
  REQUIRE(LoadStateDictInto(*loaded, graph, partial).ok());
  StateDict full_state = MustCollect(graph, full);
  StateDict expected;
  for (const auto& entry : full_state) {
    if (entry.first.rfind("fc1.", 0) != 0) expected.push_back(entry);
  }
  RequireSameState(expected, MustCollect(graph, partial));
}

TEST_CASE("mismatched checkpoints are refused with the offending key", "[checkpoint]") {
  TempDir dir;
  Graph graph = MustBuild("mlp");
  auto modules = MustBuildModules(graph, 1);
  StateDict state = MustCollect(graph, modules);

  SECTION("a missing tensor") {
    StateDict fewer(state.begin() + 1, state.end());
    Status status = LoadStateDictInto(fewer, graph, modules);
    CHECK(status.code() == StatusCode::kInvalidArgument);
    CHECK(status.message().find(state[0].first) != std::string::npos);
  }
  SECTION("a tensor of the wrong shape") {
    StateDict wrong = state;
    wrong[0].second = torch::zeros({3, 3});
    Status status = LoadStateDictInto(wrong, graph, modules);
    CHECK(status.code() == StatusCode::kInvalidArgument);
    CHECK(status.message().find(state[0].first) != std::string::npos);
  }
  SECTION("a key of a layer the model does not have") {
    StateDict extra = state;
    extra.emplace_back("conv9.weight", torch::zeros({1}));
    Status status = LoadStateDictInto(extra, graph, modules);
    CHECK(status.code() == StatusCode::kInvalidArgument);
    CHECK(status.message().find("conv9.weight") != std::string::npos);
  }
  SECTION("a file that is not a checkpoint") {
    std::ofstream(dir.File("junk.pt")) << "not a zip archive";
    CHECK(LoadCheckpoint(dir.File("junk.pt")).status().code() == StatusCode::kDataLoss);
    CHECK(LoadCheckpoint(dir.File("absent.pt")).status().code() == StatusCode::kNotFound);
  }
  SECTION("a directory that does not exist") {
    CHECK_FALSE(SaveCheckpoint(dir.File("no/such/dir/model.pt"), state).ok());
  }
}

// Saves `name`'s checkpoint and an eval-mode input/output pair and checks both against
// torchvision in Python; with `reverse`, also loads torchvision's own initial weights (saved by
// Python) into our modules.
void CheckAgainstTorchvision(const std::string& name, const planner::zoo::ModelOptions& options,
                             bool reverse) {
  TempDir dir;
  Graph graph = MustBuild(name, options);
  auto modules = MustBuildModules(graph, 11);
  const std::string checkpoint = dir.File(name + ".pt");
  Status saved = SaveCheckpoint(checkpoint, MustCollect(graph, modules));
  INFO(saved.ToString());
  REQUIRE(saved.ok());

  StateDict io;
  {
    torch::NoGradGuard no_grad;
    for (auto& module : modules) module->eval();
    torch::manual_seed(3);
    std::vector<int64_t> shape{2};
    shape.insert(shape.end(), graph.input_shape().begin(), graph.input_shape().end());
    torch::Tensor input = torch::randn(shape);
    auto outputs = ForwardGraph(graph, modules, input);
    INFO(outputs.status().ToString());
    REQUIRE(outputs.ok());
    io.emplace_back("input", input);
    for (size_t i = 0; i < outputs->size(); ++i) {
      io.emplace_back("output." + graph.outputs()[i].layer, (*outputs)[i]);
    }
  }
  REQUIRE(SaveCheckpoint(dir.File("io.pt"), io).ok());

  std::string why;
  if (!PythonWithTorchvision(&why)) {
    WARN("skipping the torchvision check of " << name << ": " << why);
    return;
  }
  const fs::path script =
      fs::path(DEEPOOL_SOURCE_DIR) / "tests/runtime/checkpoint_torchvision_check.py";
  REQUIRE(fs::exists(script));
  std::string command = std::string(kPython) + " " + script.string() + " " + checkpoint + " " +
                        name + " --num-classes " + std::to_string(options.num_classes) + " --io " +
                        dir.File("io.pt");
  if (reverse) command += " --export " + dir.File("tv.pt");
  if (!options.aux_logits) command += " --no-aux";
  std::string output;
  int rc = RunCommand(command, &output);
  INFO(command << "\n" << output);
  REQUIRE(rc == 0);
  if (!reverse) return;

  auto torchvision_state = LoadCheckpoint(dir.File("tv.pt"));
  INFO(torchvision_state.status().ToString());
  REQUIRE(torchvision_state.ok());
  auto fresh = MustBuildModules(graph, 12);
  Status loaded = LoadStateDictInto(*torchvision_state, graph, fresh);
  INFO(loaded.ToString());
  REQUIRE(loaded.ok());
  CHECK(torchvision_state->size() == MustCollect(graph, fresh).size());
}

// One test case per model so that they run in parallel under ctest. The two biggest (about
// 0.5 GB of weights each) skip the reverse direction (torchvision's weights into ours) to save
// a gigabyte of disk traffic; resnet50 and inception_v3 cover it.
planner::zoo::ModelOptions Options(int64_t image_size, int64_t num_classes, bool aux_logits) {
  planner::zoo::ModelOptions options;
  options.image_size = image_size;
  options.num_classes = num_classes;
  options.aux_logits = aux_logits;
  return options;
}

TEST_CASE("resnet50 checkpoints load into torchvision and compute the same outputs",
          "[checkpoint][torchvision]") {
  CheckAgainstTorchvision("resnet50", Options(64, 1000, true), /*reverse=*/true);
}

TEST_CASE("vgg16 checkpoints load into torchvision and compute the same outputs",
          "[checkpoint][torchvision]") {
  CheckAgainstTorchvision("vgg16", Options(32, 10, true), /*reverse=*/false);
}

TEST_CASE("wide_resnet101_2 checkpoints load into torchvision and compute the same outputs",
          "[checkpoint][torchvision]") {
  CheckAgainstTorchvision("wide_resnet101_2", Options(32, 10, true), /*reverse=*/false);
}

TEST_CASE("inception_v3 checkpoints load into torchvision and compute the same outputs",
          "[checkpoint][torchvision]") {
  SECTION("without aux logits") {
    CheckAgainstTorchvision("inception_v3", Options(75, 10, false), /*reverse=*/true);
  }
  SECTION("with aux logits") {
    CheckAgainstTorchvision("inception_v3", Options(299, 10, true), /*reverse=*/true);
  }
}

TEST_CASE("vit_b_16 checkpoints load into torchvision and compute the same outputs",
          "[checkpoint][torchvision][vit]") {
  // Bare parameters (class_token, encoder.pos_embedding) are keys of their own.
  CheckAgainstTorchvision("vit_b_16", Options(224, 10, true), /*reverse=*/true);
}

}  // namespace
}  // namespace deepool::worker
