// Channels-last training (ExecutorOptions::memory_format; layers/memory_format.h): a burst plan
// with re-splits and an uneven plan with synchronised batch norm, both in channels_last over
// Gloo, end with the same parameters, buffers and losses as one device training the default
// NCHW layout, within fp32 rounding; every rank's 4-D parameters really are channels_last at the
// end (so the run did not fall back to NCHW). Checkpoints written in channels_last are NCHW
// files and resume in either format.
//
// How each can fail (seen, then restored): receive buffers allocated NCHW (NewBuffer without
// the format: the wire view then copies, the receive fills the copy, and the consumer reads
// garbage), gradients unflattened from their bucket with view_as (NHWC-ordered sums read as
// NCHW: the conv weights scramble), and checkpoints saved without making tensors contiguous
// (an NHWC storage written as NCHW).
#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>

#include "tests/runtime/executor_test_util.h"
#include "tests/temp_dir.h"
#include "worker/runtime/checkpoints/checkpoint.h"

namespace deepool::worker::testing {
namespace {

using deepool::testing::TempDir;
using planner::MemoryFormat;

// fp32 in float64, as the batch norm equivalence tests compare: channels_last convolutions use
// other kernels (and summation orders) than the NCHW reference's, so the results agree to fp32
// rounding. SGD keeps that within 1e-6 + 1e-5 |want|. Adam divides each gradient by its running
// RMS, which turns a rounding difference in a near-zero gradient into one of the step's size:
// measured 2.5e-6 absolute on small_cnn's res.conv weight after 4 steps (the same plan NCHW stays
// inside 1e-6), so Adam's runs get 1e-5 absolute.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;
constexpr double kAdamAtol = 1e-5;

// "" when every parameter, buffer and loss of the reference is matched within
// kAtol + kRtol |want| by every rank holding it; else what differs first and by how much.
std::string Mismatch(const std::vector<RankRun>& runs, const TrainResult& reference,
                     double atol = kAtol) {
  std::ostringstream out;
  for (size_t r = 0; r < runs.size(); ++r) {
    if (!runs[r].status.ok()) return "rank " + std::to_string(r) + ": " + runs[r].status.ToString();
  }
  for (ParamMap TrainResult::*kind : {&TrainResult::params, &TrainResult::buffers}) {
    for (const auto& [name, expected] : reference.*kind) {
      bool held = false;
      for (const RankRun& run : runs) {
        auto found = (run.result.*kind).find(name);
        if (found == (run.result.*kind).end()) continue;
        held = true;
        torch::Tensor want = expected.to(torch::kFloat64);
        torch::Tensor diff = (found->second.to(torch::kFloat64) - want).abs();
        if ((diff - (atol + kRtol * want.abs())).max().item<double>() > 0) {
          out << name << ": max |diff| " << diff.max().item<double>() << " (max |want| "
              << want.abs().max().item<double>() << ")";
          return out.str();
        }
      }
      if (!held) return "no rank holds " + name;
    }
  }
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    const double got = runs[0].result.losses.at(i), want = reference.losses[i];
    if (std::abs(got - want) > atol + kRtol * std::abs(want)) {
      out << "loss of iteration " << i << ": " << got << " vs " << want;
      return out.str();
    }
  }
  return "";
}

// An error unless every 4-D parameter of the executor is channels_last and at least one is not
// also NCHW (a 1x1 kernel is both, so only a larger one shows the layout).
Status RequireChannelsLastParameters(Executor& executor) {
  int nhwc_only = 0;
  for (const auto& [name, param] : executor.NamedParameters()) {
    if (param.dim() != 4) continue;
    if (!param.is_contiguous(torch::MemoryFormat::ChannelsLast)) {
      return InternalError(name + " is not channels_last");
    }
    if (!param.is_contiguous()) ++nhwc_only;
  }
  return nhwc_only > 0 ? Status::Ok() : InternalError("no parameter here shows the layout");
}

RankOptions ChannelsLast() {
  RankOptions options;
  options.configure = [](int, ExecutorOptions& executor) {
    executor.memory_format = MemoryFormat::kChannelsLast;
  };
  options.after = [](int, Executor& executor) { return RequireChannelsLastParameters(executor); };
  return options;
}

TEST_CASE("small_cnn burst plan with re-splits in channels_last equals one device (Gloo)",
          "[executor][memory_format][gloo]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  auto plan = MakePlan(graph, 8, 3, {0, 1, 2}, SmallCnnBurst());
  for (const OptimizerSpec& optimizer : {Sgd(), Adam()}) {
    auto reference = TrainSingleDevice(graph, 8, 4, optimizer, 5, 9);
    auto runs = RunRanks(graph, plan, 4, optimizer, 5, 9, GlooComms(3), ChannelsLast());
    const std::string mismatch =
        Mismatch(runs, reference, optimizer.name == "adam" ? kAdamAtol : kAtol);
    INFO(optimizer.name << ": " << mismatch);
    REQUIRE(mismatch.empty());
  }
}

TEST_CASE(
    "residual block with synchronised batch norm on uneven sets in channels_last equals "
    "one device (Gloo)",
    "[executor][memory_format][batchnorm][gloo]") {
  torch::set_num_threads(1);
  auto graph = ResidualBlock();
  // Batch 7: 3/2/2 on three ranks, 4/3 on two; batch norm on 2 and 3 ranks.
  auto plan = MakePlan(graph, 7, 3, {0, 1, 2},
                       {{"stem.conv", {0, 1, 2}},
                        {"stem.bn", {0, 1, 2}},
                        {"stem.relu", {1, 2}},
                        {"block.conv1", {0}},
                        {"block.bn1", {1, 2}},
                        {"block.relu1", {0, 1, 2}},
                        {"block.conv2", {0, 1}},
                        {"block.bn2", {0, 2}},
                        {"block.add", {0, 1, 2}},
                        {"block.relu", {1}},
                        {"pool", {0, 1}},
                        {"flatten", {2}},
                        {"fc", {0, 2}}});
  auto reference = TrainSingleDevice(graph, 7, 4, Sgd(), 6, 8);
  auto runs = RunRanks(graph, plan, 4, Sgd(), 6, 8, GlooComms(3), ChannelsLast());
  const std::string mismatch = Mismatch(runs, reference);
  INFO(mismatch);
  REQUIRE(mismatch.empty());
}

// Trains `graph` on one rank in `format`, from `start` (a checkpoint's state, or empty: the
// seed's initial weights), for iterations [first, last); returns the state dict at the end
// (aliasing nothing: copied).
StatusOr<StateDict> TrainOneRank(const planner::Graph& graph, MemoryFormat format,
                                 const StateDict* start, int first, int last) {
  auto plan = MakePlan(graph, 6, 1, {0});
  auto comm = FakeComms(1)(0);
  if (!comm.ok()) return comm.status();
  ASSIGN_OR_RETURN(auto data, MakeDataSource(DataSpec{"synthetic", 3, ""}, graph, 6));
  ExecutorOptions options;
  options.seed = 2;
  options.optimizer = OptimizerSpec{};  // plain SGD: the weights are the whole training state
  options.optimizer.lr = 0.05;
  options.memory_format = format;
  ASSIGN_OR_RETURN(auto executor, Executor::Create(graph, plan, comm->get(), data.get(),
                                                   BuildLayerModule, options, SystemClock::Get()));
  std::vector<std::shared_ptr<LayerModule>> modules(static_cast<size_t>(graph.num_layers()));
  for (const auto& [id, module] : executor->modules()) modules[static_cast<size_t>(id)] = module;
  if (start) RETURN_IF_ERROR(LoadStateDictInto(*start, graph, modules));
  for (int i = first; i < last; ++i) RETURN_IF_ERROR(executor->Step(i).status());
  if (format == MemoryFormat::kChannelsLast)
    RETURN_IF_ERROR(RequireChannelsLastParameters(*executor));
  ASSIGN_OR_RETURN(StateDict state, CollectStateDict(graph, modules));
  for (auto& [key, tensor] : state) tensor = tensor.detach().clone();
  return state;
}

TEST_CASE("a checkpoint written in channels_last resumes in contiguous and the reverse",
          "[executor][memory_format][checkpoint]") {
  torch::set_num_threads(1);
  auto graph = Zoo("small_cnn");
  TempDir dir;
  auto straight = TrainOneRank(graph, MemoryFormat::kContiguous, nullptr, 0, 5);
  REQUIRE(straight.ok());
  for (auto [written, resumed] :
       {std::pair{MemoryFormat::kChannelsLast, MemoryFormat::kContiguous},
        std::pair{MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}}) {
    INFO("written " << planner::MemoryFormatName(written) << ", resumed "
                    << planner::MemoryFormatName(resumed));
    auto halfway = TrainOneRank(graph, written, nullptr, 0, 3);
    REQUIRE(halfway.ok());
    const std::string path = dir.File("model.pt");
    REQUIRE(SaveCheckpoint(path, *halfway).ok());
    auto loaded = LoadCheckpoint(path);
    REQUIRE(loaded.ok());
    for (const auto& [key, tensor] : *loaded) {
      INFO(key);
      REQUIRE(tensor.is_contiguous());  // an NCHW file whatever the run's format
    }
    auto finished = TrainOneRank(graph, resumed, &*loaded, 3, 5);
    INFO(finished.status().ToString());
    REQUIRE(finished.ok());
    REQUIRE(finished->size() == straight->size());
    for (size_t k = 0; k < straight->size(); ++k) {
      const auto& [key, want] = (*straight)[k];
      INFO(key << " max |diff| "
               << ((*finished)[k].second.to(torch::kFloat64) - want.to(torch::kFloat64))
                      .abs()
                      .max()
                      .item<double>());
      REQUIRE((*finished)[k].first == key);
      REQUIRE(torch::allclose((*finished)[k].second.to(torch::kFloat64), want.to(torch::kFloat64),
                              kRtol, kAtol));
    }
  }
}

}  // namespace
}  // namespace deepool::worker::testing
