// One list of a graph's state_dict (planner/state_dict_shapes.h) for the check at submission and
// the modules the ranks build: every zoo model's modules register exactly its keys and shapes,
// in its order, and the checkpoint libtorch writes for them is indexed without libtorch
// (weights/weights_index.h) to the same keys, shapes and dtypes; the ranks refuse what the
// check refuses (a key under a layer's name that the layer does not have).
#include "planner/state_dict_shapes.h"

#include <torch/torch.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "planner/zoo/zoo.h"
#include "tests/source_dir.h"
#include "weights/state_dict_check.h"
#include "weights/weights_index.h"
#include "worker/runtime/checkpoints/checkpoint.h"
#include "worker/runtime/checkpoints/safetensors.h"
#include "worker/runtime/layers/layer_module.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;

planner::Graph TiedGptTiny() {
  auto base = planner::zoo::BuildModel("gpt_tiny");
  REQUIRE(base.ok());
  std::vector<planner::Layer> layers = base->layers();
  for (planner::Layer& layer : layers) {
    if (layer.name == "lm_head") layer.tied.push_back({"weight", "transformer.wte.weight"});
  }
  auto graph = planner::Graph::Create("gpt_tiny_tied", base->input_shape(), std::move(layers),
                                      base->outputs(), base->input_dtype());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

std::string Listed(const std::vector<planner::StateTensorShape>& state) {
  std::string text;
  for (const auto& t : state) text += t.key + weights::ShapeText(t.shape) + "\n";
  return text;
}

std::string Listed(const StateDict& state) {
  std::string text;
  for (const auto& [key, tensor] : state) {
    text += key + weights::ShapeText(tensor.sizes().vec()) + "\n";
  }
  return text;
}

std::string Listed(const weights::WeightsIndex& index) {
  std::string text;
  for (const auto& t : index) text += t.key + weights::ShapeText(t.shape) + "\n";
  return text;
}

TEST_CASE(
    "Every small zoo model's modules register the planner's state_dict and libtorch's "
    "checkpoint of them is indexed to it") {
  std::vector<std::pair<std::string, planner::Graph>> graphs;
  for (const char* name : {"mlp", "small_cnn", "gpt_tiny", "vit_tiny"}) {
    auto graph = planner::zoo::BuildModel(name);
    REQUIRE(graph.ok());
    graphs.emplace_back(name, *graph);
  }
  graphs.emplace_back("gpt_tiny_tied", TiedGptTiny());
  const fs::path dir =
      fs::temp_directory_path() / ("deepool_state_dict_shapes_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& [name, graph] : graphs) {
    INFO(name);
    auto modules = BuildAllLayerModules(graph, 3);
    REQUIRE(modules.ok());
    auto state = CollectStateDict(graph, *modules);
    REQUIRE(state.ok());
    const std::string expected = Listed(planner::GraphStateShapes(graph));
    CHECK(Listed(*state) == expected);

    const std::string path = (dir / (name + ".pt")).string();
    REQUIRE(SaveCheckpoint(path, *state).ok());
    auto index = weights::ReadWeightsIndex(path);
    INFO(index.status().ToString());
    REQUIRE(index.ok());
    CHECK(Listed(*index) == expected);
    for (size_t k = 0; k < index->size() && k < state->size(); ++k) {
      const at::ScalarType type = (*state)[k].second.scalar_type();
      CHECK((*index)[k].dtype == (type == at::kLong ? "int64" : "float32"));
    }
    CHECK(weights::CheckStateDict(*index, graph).ok());
  }
  fs::remove_all(dir);
}

TEST_CASE("A rank refuses a key under a layer's name that the layer does not have") {
  auto graph = planner::zoo::BuildModel("mlp");
  REQUIRE(graph.ok());
  auto modules = BuildAllLayerModules(*graph, 1);
  REQUIRE(modules.ok());
  auto state = CollectStateDict(*graph, *modules);
  REQUIRE(state.ok());
  state->emplace_back(graph->layer(0).name + ".extra", torch::zeros({1}));
  const Status status = LoadStateDictInto(*state, *graph, *modules);
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK(status.message() == "checkpoint has 1 key(s) that graph 'mlp' does not have: " +
                                graph->layer(0).name + ".extra");
}

}  // namespace
}  // namespace deepool::worker

namespace deepool::worker {
namespace {

TEST_CASE("The ranks load the files the index reads to its keys and shapes") {
  for (const char* name : {"tiny_cnn_ordered.pt", "tiny_cnn_dict.pt", "tiny_cnn.safetensors"}) {
    INFO(name);
    const std::string path = std::string(DEEPOOL_SOURCE_DIR) + "/tests/data/weights/" + name;
    auto state = LoadStateDictFile(path);
    INFO(state.status().ToString());
    REQUIRE(state.ok());
    auto index = weights::ReadWeightsIndex(path);
    REQUIRE(index.ok());
    CHECK(Listed(*state) == Listed(*index));
  }
}

}  // namespace
}  // namespace deepool::worker
