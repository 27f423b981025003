// Weights to start from checked at submission (issue 41, point 5): the scheduler with the real
// InProcessPlanningBackend refuses a job whose init file the coordinator can read and that does
// not fit the job's graph, naming the file and the first differing key; a fitting file, and one
// the coordinator cannot see (on the workers only), are accepted.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "coordinator/in_process_planning.h"
#include "tests/service/scheduler_harness.h"
#include "tests/source_dir.h"

namespace deepool::coordinator::testing {
namespace {

// The module tests/data/weights/make_weights.py saves for these files.
constexpr const char* kTinyCnnGraph = R"({
  "format": "deepool.graph", "version": 1, "name": "tiny_cnn", "input": {"shape": [3, 3, 3]},
  "layers": [
    {"name": "conv", "op": "conv2d", "inputs": ["input"], "out_channels": 4, "kernel_size": [3, 3]},
    {"name": "bn", "op": "batchnorm2d", "inputs": ["conv"]},
    {"name": "flatten", "op": "flatten", "inputs": ["bn"]},
    {"name": "fc", "op": "linear", "inputs": ["flatten"], "out_features": 2}]})";

std::string Weights(const std::string& name) {
  return std::string(DEEPOOL_SOURCE_DIR) + "/tests/data/weights/" + name;
}

JobSpec TinyCnnFrom(const std::string& init, const std::string& graph = kTinyCnnGraph) {
  JobSpec spec = Fg(1);
  spec.model.clear();
  spec.graph_json = graph;
  spec.init_path = init;
  return spec;
}

TEST_CASE("A job whose init file fits its graph is accepted, in either format",
          "[scheduler][init]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  // tiny_cnn_ordered.pt is torch.save(module.state_dict()): a collections.OrderedDict.
  for (const char* name : {"tiny_cnn_ordered.pt", "tiny_cnn_dict.pt", "tiny_cnn.safetensors"}) {
    INFO(name);
    StatusOr<JobRecord> job = h.scheduler.Submit(TinyCnnFrom(Weights(name)));
    INFO(job.status().ToString());
    CHECK(job.ok());
  }
}

TEST_CASE("A job whose init file does not fit its graph is refused naming the file and key",
          "[scheduler][init]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  const std::string file = Weights("tiny_cnn_dict.pt");

  SECTION("a tensor of another shape") {
    std::string wider = kTinyCnnGraph;
    wider.replace(wider.find("\"out_features\": 2"), 17, "\"out_features\": 3");
    StatusOr<JobRecord> refused = h.scheduler.Submit(TinyCnnFrom(file, wider));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == StatusCode::kInvalidArgument);
    CHECK(refused.status().message() ==
          "init.path: " + file +
              ": checkpoint tensor 'fc.weight' has shape [2,4], the model expects [3,4]");
  }
  SECTION("a tensor the file lacks") {
    std::string with_head = kTinyCnnGraph;
    with_head.replace(with_head.rfind("]}"), 2,
                      R"(, {"name": "head", "op": "linear", "inputs": ["fc"],
                          "out_features": 2}]})");
    StatusOr<JobRecord> refused = h.scheduler.Submit(TinyCnnFrom(file, with_head));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().message() == "init.path: " + file +
                                            ": checkpoint lacks 2 tensor(s) of graph 'tiny_cnn': "
                                            "head.weight, head.bias");
  }
  SECTION("a key the graph does not have") {
    const std::string without_bn = R"({"format": "deepool.graph", "version": 1, "name": "tiny_cnn",
      "input": {"shape": [3, 3, 3]}, "layers": [
      {"name": "conv", "op": "conv2d", "inputs": ["input"], "out_channels": 4,
       "kernel_size": [3, 3]},
      {"name": "flatten", "op": "flatten", "inputs": ["conv"]},
      {"name": "fc", "op": "linear", "inputs": ["flatten"], "out_features": 2}]})";
    StatusOr<JobRecord> refused = h.scheduler.Submit(TinyCnnFrom(file, without_bn));
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.status().message(),
               Catch::StartsWith("init.path: " + file +
                                 ": checkpoint has 5 key(s) that graph "
                                 "'tiny_cnn' does not have: bn.weight, bn.bias"));
  }
  SECTION("a damaged file") {
    const std::string cut = (std::filesystem::temp_directory_path() /
                             ("deepool_cut_" + std::to_string(::getpid()) + ".pt"))
                                .string();
    std::filesystem::copy_file(file, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, 1000);
    StatusOr<JobRecord> refused = h.scheduler.Submit(TinyCnnFrom(cut));
    std::filesystem::remove(cut);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(refused.status().message(),
               Catch::StartsWith("init.path: weights file '" + cut + "'"));
  }
}

TEST_CASE("An init file the coordinator cannot see is left to the ranks", "[scheduler][init]") {
  InProcessPlanningBackend backend;
  Harness h(nullptr, &backend);
  StatusOr<JobRecord> job = h.scheduler.Submit(TinyCnnFrom("/on/the/workers/only/model.pt"));
  INFO(job.status().ToString());
  CHECK(job.ok());
}

}  // namespace
}  // namespace deepool::coordinator::testing
