// Executor::Evaluate: a held-out set evaluated under a plan equals one device's evaluation of the
// same parameters, computed here directly from the modules.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "planner/zoo/zoo.h"
#include "tests/runtime/executor_test_util.h"
#include "tests/runtime/image_files.h"
#include "tests/temp_dir.h"

namespace deepool::worker::testing {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;

constexpr int kIterations = 8;
constexpr int64_t kBatch = 16;
constexpr uint64_t kSeed = 31;

struct Folders {
  DataSpec train;
  DataSpec held_out;
  int64_t held_out_samples = 0;
};

// In `root`, a learnable training folder and a held-out folder of other images of the same
// classes, 45 of them: three passes of the batch of 16, the last one 13 rows.
Folders MakeFolders(const fs::path& root) {
  Folders folders;
  WriteLearnableFolder(root / "train", 3, 32, 36, 5);
  WriteLearnableFolder(root / "val", 3, 15, 36, 6);
  folders.train = DataSpec{"image_folder", 9, (root / "train").string()};
  folders.held_out = DataSpec{"image_folder", 0, (root / "val").string()};
  folders.held_out_samples = 45;
  return folders;
}

planner::Graph SmallCnn() {
  planner::zoo::ModelOptions options;
  options.num_classes = 10;
  options.image_size = 32;
  auto graph = planner::zoo::BuildModel("small_cnn", options);
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

// One device: the trained parameters and buffers loaded into fresh modules in eval mode, the
// whole held-out set in one forward pass, the counts taken from a full sort of the logits.
EvaluationStats EvaluateOnOneDevice(const planner::Graph& graph, const TrainResult& trained,
                                    const Folders& folders) {
  auto modules = BuildAllLayerModules(graph, 0);
  REQUIRE(modules.ok());
  torch::NoGradGuard no_grad;
  for (size_t id = 0; id < modules->size(); ++id) {
    const std::string layer = graph.layer(static_cast<int>(id)).name;
    auto& module = *(*modules)[id];
    for (auto& item : module.named_parameters()) {
      item.value().copy_(trained.params.at(layer + "." + item.key()));
    }
    for (auto& item : module.named_buffers()) {
      item.value().copy_(trained.buffers.at(layer + "." + item.key()));
    }
    module.eval();
  }
  const int64_t n = folders.held_out_samples;
  auto data = MakeDataSource(folders.held_out, graph, n, DataUse::kEvaluation);
  REQUIRE(data.ok());
  REQUIRE((*data)->num_samples() == n);
  auto batch = (*data)->GlobalBatch(0);
  REQUIRE(batch.ok());
  auto outputs = ForwardGraph(graph, *modules, ModelInputs(batch->inputs), StepContext{0, 0});
  REQUIRE(outputs.ok());
  // A sequence output ([n, T, V]) is scored on every token.
  const torch::Tensor logits =
      (*outputs)[0].to(torch::kFloat64).reshape({-1, (*outputs)[0].size(-1)});
  const torch::Tensor labels = batch->labels.reshape({-1});
  const int64_t predictions = labels.size(0);
  const torch::Tensor order = logits.argsort(1, /*descending=*/true);
  EvaluationStats stats;
  stats.samples = n;
  stats.predictions = predictions;
  for (int64_t row = 0; row < predictions; ++row) {
    const int64_t label = labels[row].item<int64_t>();
    for (int64_t k = 0; k < 5; ++k) {
      if (order[row][k].item<int64_t>() != label) continue;
      stats.top1 += k == 0 ? 1.0 / predictions : 0;
      stats.top5 += 1.0 / predictions;
    }
  }
  stats.loss = torch::nn::functional::cross_entropy(logits, labels).item<double>();
  return stats;
}

// Trains `plan` for kIterations and evaluates the held-out set on every rank, in passes of each
// of `batches` in turn: results[b][rank].
std::vector<std::vector<EvaluationStats>> EvaluateUnderPlan(const planner::Graph& graph,
                                                            const planner::Plan& plan,
                                                            const Folders& folders,
                                                            const std::vector<int64_t>& batches,
                                                            std::vector<RankRun>* runs) {
  std::vector<std::vector<EvaluationStats>> results(
      batches.size(), std::vector<EvaluationStats>(static_cast<size_t>(plan.num_devices)));
  RankOptions options;
  options.sync_batch_norm = SyncInEquivalenceRuns();
  options.data = folders.train;
  options.after = [&](int rank, Executor& executor) -> Status {
    for (size_t b = 0; b < batches.size(); ++b) {
      ASSIGN_OR_RETURN(auto held_out,
                       MakeDataSource(folders.held_out, graph, batches[b], DataUse::kEvaluation));
      ASSIGN_OR_RETURN(results[b][static_cast<size_t>(rank)],
                       executor.Evaluate(held_out.get(), folders.held_out_samples));
    }
    return Status::Ok();
  };
  *runs = RunRanks(graph, plan, kIterations, Sgd(), kSeed, 0, FakeComms(plan.num_devices), options);
  for (size_t r = 0; r < runs->size(); ++r) {
    INFO("rank " << r << ": " << (*runs)[r].status.ToString());
    REQUIRE((*runs)[r].status.ok());
  }
  return results;
}

// Trains `graph` under `plan` and on one device, and requires every rank's evaluation, in passes
// of each of `batches` (default: the global batch), to equal one device's; its top-1 must pass
// `min_top1` (the model learned something).
void RequireEvaluationMatchesOneDevice(const planner::Graph& graph, const planner::Plan& plan,
                                       const Folders& folders, double min_top1,
                                       std::vector<int64_t> batches = {}) {
  if (batches.empty()) batches = {plan.global_batch};
  torch::set_num_threads(1);
  const TrainResult trained =
      TrainSingleDevice(graph, plan.global_batch, kIterations, Sgd(), kSeed, folders.train);
  const EvaluationStats expected = EvaluateOnOneDevice(graph, trained, folders);
  std::vector<RankRun> runs;
  const auto results = EvaluateUnderPlan(graph, plan, folders, batches, &runs);
  // The training followed one device's, so the parameters evaluated are the same.
  RequireMatchesReference(runs, trained, 1e-4, 1e-5);
  INFO("one device: top-1 " << expected.top1 << ", top-5 " << expected.top5 << ", loss "
                            << expected.loss);
  REQUIRE(expected.top1 > min_top1);
  for (size_t b = 0; b < batches.size(); ++b) {
    for (size_t r = 0; r < results[b].size(); ++r) {
      INFO("passes of " << batches[b] << ", rank " << r);
      CHECK(results[b][r].samples == expected.samples);
      CHECK(results[b][r].predictions == expected.predictions);
      CHECK(results[b][r].top1 == Approx(expected.top1).epsilon(1e-12));
      CHECK(results[b][r].top5 == Approx(expected.top5).epsilon(1e-12));
      CHECK(results[b][r].loss == Approx(expected.loss).epsilon(1e-5));
    }
  }
}

// The colours separate the classes: well above chance (1/3) after a few steps.
constexpr double kImageTop1 = 0.6;

TEST_CASE("evaluation under data parallelism over 3 ranks equals one device's",
          "[executor][evaluation]") {
  // Every batch norm layer on three ranks: in training their statistics are synchronised, in
  // evaluation the running statistics (the same on every rank) are used.
  TempDir dir;
  const Folders folders = MakeFolders(dir.path());
  const planner::Graph graph = SmallCnn();
  RequireEvaluationMatchesOneDevice(graph, MakePlan(graph, kBatch, 3, {0, 1, 2}), folders,
                                    kImageTop1);
}

TEST_CASE("evaluation under a hand-made burst plan equals one device's", "[executor][evaluation]") {
  // The output layer on ranks 0 and 2 only: the counts come from them and reach rank 1 through
  // the all-reduce.
  TempDir dir;
  const Folders folders = MakeFolders(dir.path());
  const planner::Graph graph = SmallCnn();
  RequireEvaluationMatchesOneDevice(graph, MakePlan(graph, kBatch, 3, {0, 1, 2}, SmallCnnBurst()),
                                    folders, kImageTop1);
}

// `count` tokens of a sequence that repeats every 7 ids, little-endian uint16.
void WriteRepeatingTokens(const fs::path& path, int64_t count) {
  std::ofstream out(path, std::ios::binary);
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t token = static_cast<uint16_t>((i % 7) * 31);
    out.put(static_cast<char>(token & 0xff));
    out.put(static_cast<char>(token >> 8));
  }
}

TEST_CASE("a GPT's evaluation on a token file under an uneven plan equals one device's",
          "[executor][evaluation][tokens]") {
  // Every token of every window is a prediction: 13 windows of 64 in two passes of 8, the
  // lm head on ranks 0 and 2, attention on rank 1 alone.
  TempDir dir;
  Folders files;
  WriteRepeatingTokens(dir.File("train.bin"), 64 * 40 + 1);
  WriteRepeatingTokens(dir.File("val.bin"), 64 * 13 + 1);
  files.train = DataSpec{"tokens", 5, dir.File("train.bin")};
  files.held_out = DataSpec{"tokens", 0, dir.File("val.bin")};
  files.held_out_samples = 13;
  auto graph = planner::zoo::BuildModel("gpt_tiny");
  REQUIRE(graph.ok());
  const planner::Plan plan =
      MakePlan(*graph, 8, 3, {0, 1, 2},
               {{"lm_head", {0, 2}}, {"transformer.h.0.attn", {1}}, {"transformer.h.1.attn", {1}}});
  // The sequence repeats: after a few steps most next tokens are right (chance: 1/256).
  // In passes of 8 (the global batch), 24 (one pass) and 5 (three, shares {2, 2, 1} and {3, 2}).
  RequireEvaluationMatchesOneDevice(*graph, plan, files, 0.2, {8, 24, 5});
}

// Passes of another batch than training's (ScalePlan): 48 (three times the global batch, one
// pass of 45 rows), 7 (uneven shares, seven passes, the last of 3 rows) and 2 (fewer samples
// than the three devices of a layer: one device gets none).
const std::vector<int64_t> kOtherBatches{3 * kBatch, 7, 2};

TEST_CASE("evaluation under data parallelism in passes of other batches equals one device's",
          "[executor][evaluation][batch]") {
  TempDir dir;
  const Folders folders = MakeFolders(dir.path());
  const planner::Graph graph = SmallCnn();
  RequireEvaluationMatchesOneDevice(graph, MakePlan(graph, kBatch, 3, {0, 1, 2}), folders,
                                    kImageTop1, kOtherBatches);
}

TEST_CASE("evaluation under a burst plan in passes of other batches equals one device's",
          "[executor][evaluation][batch]") {
  TempDir dir;
  const Folders folders = MakeFolders(dir.path());
  const planner::Graph graph = SmallCnn();
  RequireEvaluationMatchesOneDevice(graph, MakePlan(graph, kBatch, 3, {0, 1, 2}, SmallCnnBurst()),
                                    folders, kImageTop1, kOtherBatches);
}

// Every parameter and buffer of every rank, and the losses, exactly equal.
void RequireIdenticalRuns(const std::vector<RankRun>& a, const std::vector<RankRun>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    INFO("rank " << r << ": " << a[r].status.ToString() << " / " << b[r].status.ToString());
    REQUIRE(a[r].status.ok());
    REQUIRE(b[r].status.ok());
    CHECK(a[r].result.losses == b[r].result.losses);
    for (const ParamMap TrainResult::*tensors : {&TrainResult::params, &TrainResult::buffers}) {
      const ParamMap& want = a[r].result.*tensors;
      const ParamMap& got = b[r].result.*tensors;
      REQUIRE(want.size() == got.size());
      for (const auto& [name, tensor] : want) {
        INFO(name);
        CHECK(torch::equal(tensor, got.at(name)));
      }
    }
  }
}

TEST_CASE("evaluating between steps in passes of other batches leaves training unchanged",
          "[executor][evaluation][batch]") {
  // The evaluation executors share the training executor's modules: training with evaluations
  // after every step (at the global batch, 7 and 2) is bitwise the training without them.
  torch::set_num_threads(1);
  TempDir dir;
  const Folders folders = MakeFolders(dir.path());
  const planner::Graph graph = SmallCnn();
  const planner::Plan plan = MakePlan(graph, kBatch, 3, {0, 1, 2}, SmallCnnBurst());
  RankOptions options;
  options.data = folders.train;
  const std::vector<RankRun> plain =
      RunRanks(graph, plan, kIterations, Sgd(), kSeed, 0, FakeComms(3), options);
  options.after_step = [&](int, int, Executor& executor) -> Status {
    for (int64_t batch : {kBatch, int64_t{7}, int64_t{2}}) {
      ASSIGN_OR_RETURN(auto held_out,
                       MakeDataSource(folders.held_out, graph, batch, DataUse::kEvaluation));
      RETURN_IF_ERROR(executor.Evaluate(held_out.get(), folders.held_out_samples).status());
    }
    return Status::Ok();
  };
  const std::vector<RankRun> evaluated =
      RunRanks(graph, plan, kIterations, Sgd(), kSeed, 0, FakeComms(3), options);
  RequireIdenticalRuns(plain, evaluated);
}

}  // namespace
}  // namespace deepool::worker::testing
