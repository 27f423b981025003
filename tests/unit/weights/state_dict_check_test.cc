// The strict check of a weights file against a graph (weights/state_dict_check.h) and the
// graph's state_dict it checks against (planner/state_dict_shapes.h).
#include "weights/state_dict_check.h"

#include <catch2/catch.hpp>
#include <string>

#include "planner/graph.h"
#include "planner/state_dict_shapes.h"
#include "planner/zoo/zoo.h"
#include "tests/source_dir.h"
#include "weights/weights_index.h"

namespace deepool::weights {
namespace {

// The module tests/data/weights/make_weights.py saves: conv 3 -> 4 (3x3), batch norm, linear
// 4 -> 2 (after a flatten, which has no tensors).
planner::Graph TinyCnn() {
  auto graph = planner::ParseGraphJson(R"({
    "format": "deepool.graph", "version": 1, "name": "tiny_cnn", "input": {"shape": [3, 3, 3]},
    "layers": [
      {"name": "conv", "op": "conv2d", "inputs": ["input"], "out_channels": 4,
       "kernel_size": [3, 3]},
      {"name": "bn", "op": "batchnorm2d", "inputs": ["conv"]},
      {"name": "flatten", "op": "flatten", "inputs": ["bn"]},
      {"name": "fc", "op": "linear", "inputs": ["flatten"], "out_features": 2}]})");
  REQUIRE(graph.ok());
  return *graph;
}

WeightsIndex TinyCnnFile() {
  auto index =
      ReadWeightsIndex(std::string(DEEPOOL_SOURCE_DIR) + "/tests/data/weights/tiny_cnn_dict.pt");
  REQUIRE(index.ok());
  return *index;
}

void Erase(WeightsIndex& index, const std::string& key) {
  for (auto it = index.begin(); it != index.end(); ++it) {
    if (it->key == key) {
      index.erase(it);
      return;
    }
  }
  FAIL("no key " << key);
}

TEST_CASE("A graph's state_dict lists parameters then buffers with their shapes") {
  std::string text;
  for (const auto& t : planner::GraphStateShapes(TinyCnn())) {
    text += t.key + ShapeText(t.shape) + (t.trainable ? "" : " buffer") + "\n";
  }
  CHECK(text ==
        "conv.weight[4,3,3,3]\nconv.bias[4]\nbn.weight[4]\nbn.bias[4]\n"
        "bn.running_mean[4] buffer\nbn.running_var[4] buffer\nbn.num_batches_tracked[] buffer\n"
        "fc.weight[2,4]\nfc.bias[2]\n");
}

TEST_CASE("The file torch.save wrote for the graph's module passes the strict check") {
  CHECK(CheckStateDict(TinyCnnFile(), TinyCnn()).ok());
}

TEST_CASE("A missing tensor is refused naming it") {
  WeightsIndex file = TinyCnnFile();
  Erase(file, "bn.num_batches_tracked");
  const Status status = CheckStateDict(file, TinyCnn());
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK(status.message() ==
        "checkpoint lacks 1 tensor(s) of graph 'tiny_cnn': "
        "bn.num_batches_tracked");
}

TEST_CASE("A key the graph does not have is refused even under a layer's name") {
  WeightsIndex file = TinyCnnFile();
  file.push_back({"fc.extra", "float32", {2}});
  file.push_back({"head.weight", "float32", {2}});
  const Status status = CheckStateDict(file, TinyCnn());
  CHECK(status.message() ==
        "checkpoint has 2 key(s) that graph 'tiny_cnn' does not have: "
        "fc.extra, head.weight");
}

TEST_CASE("A tensor of another shape is refused with both shapes") {
  WeightsIndex file = TinyCnnFile();
  file[7].shape = {3, 3};  // fc.weight
  const Status status = CheckStateDict(file, TinyCnn());
  CHECK(status.message() ==
        "checkpoint tensor 'fc.weight' has shape [3,3], the model expects "
        "[2,4]");
}

TEST_CASE("A rank checks only the tensors of the layers it holds") {
  WeightsIndex file = TinyCnnFile();
  Erase(file, "fc.bias");
  const std::vector<bool> without_fc = {true, true, true, false};
  CHECK(CheckStateDict(file, TinyCnn(), &without_fc).ok());
  const std::vector<bool> with_fc = {false, false, false, true};
  CHECK_FALSE(CheckStateDict(file, TinyCnn(), &with_fc).ok());
}

TEST_CASE("A tied parameter is expected under both keys, as torch.save stores it") {
  auto graph = planner::zoo::BuildModel("gpt2");
  REQUIRE(graph.ok());
  WeightsIndex file;
  for (const auto& t : planner::GraphStateShapes(*graph))
    file.push_back({t.key, "float32", t.shape});
  CHECK(CheckStateDict(file, *graph).ok());
  bool tied = false;
  for (const auto& layer : graph->layers()) {
    for (const auto& tie : layer.tied) {
      tied = true;
      WeightsIndex lacking = file;
      Erase(lacking, layer.name + "." + tie.parameter);
      CHECK_THAT(CheckStateDict(lacking, *graph).message(), Catch::Contains("lacks 1 tensor(s)"));
    }
  }
  CHECK(tied);
}

}  // namespace
}  // namespace deepool::weights
