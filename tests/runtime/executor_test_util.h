// Helpers for the executor tests: hand-made plans, a single-device reference trainer, and ranks
// run as threads over a FakeNetwork (NCCL's matching rules) or over Gloo on loopback.
#pragma once

#include <torch/torch.h>

#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "planner/zoo/layer_list_builder.h"
#include "planner/zoo/zoo.h"
#include "tests/runtime/fake_communicator.h"
#include "worker/runtime/communication/communicator_gloo.h"
#include "worker/runtime/data/data.h"
#include "worker/runtime/executor.h"
#include "worker/runtime/layers/layer_module.h"
#include "worker/runtime/layers/loss.h"

namespace deepool::worker::testing {

// A zoo model with `classes` outputs.
inline planner::Graph Zoo(const std::string& name, int64_t classes = 5) {
  planner::zoo::ModelOptions options;
  options.num_classes = classes;
  auto graph = planner::zoo::BuildModel(name, options);
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

inline OptimizerSpec Adam() {
  OptimizerSpec spec;
  spec.name = "adam";
  spec.lr = 0.01;
  spec.weight_decay = 1e-4;
  return spec;
}

// AdamW with a weight decay large enough that decoupling it shows (torch's default is 0.01).
inline OptimizerSpec AdamW() {
  OptimizerSpec spec = Adam();
  spec.name = "adamw";
  spec.weight_decay = 0.05;
  return spec;
}

// Equivalence tests that check batch norm train with synchronised statistics unless
// DEEPOOL_TEST_BN_SYNC_OFF is set, which shows that they fail without it.
inline bool SyncInEquivalenceRuns() { return std::getenv("DEEPOOL_TEST_BN_SYNC_OFF") == nullptr; }

// SGD with momentum and weight decay: the optimizer most equivalence tests train with.
inline OptimizerSpec Sgd() {
  OptimizerSpec spec;
  spec.lr = 0.1;
  spec.momentum = 0.9;
  spec.weight_decay = 1e-3;
  return spec;
}

using ParamMap = std::map<std::string, torch::Tensor>;

// A plan with the given device set per layer (by name; unnamed layers use `default_devices`)
// and near-equal shares.
inline planner::Plan MakePlan(const planner::Graph& graph, int64_t global_batch, int world,
                              const std::vector<int>& default_devices,
                              const std::map<std::string, std::vector<int>>& devices = {}) {
  planner::Plan plan;
  plan.model = graph.name();
  plan.global_batch = global_batch;
  plan.num_devices = world;
  for (const auto& layer : graph.layers()) {
    planner::LayerPlacement placement;
    placement.layer = layer.name;
    auto found = devices.find(layer.name);
    placement.devices = found != devices.end() ? found->second : default_devices;
    placement.samples =
        planner::NearEqualShares(global_batch, static_cast<int>(placement.devices.size()));
    plan.layers.push_back(placement);
  }
  return plan;
}

// small_cnn with its two batch-norm layers on one device each (so batch statistics are the
// single-device ones) and the branches, the concat and the residual add on different sets.
inline std::map<std::string, std::vector<int>> SmallCnnBurst() {
  return {{"stem.conv", {0, 1, 2}},   {"stem.bn", {0}},
          {"stem.relu", {1, 2}},      {"branch1x1.conv", {0, 1}},
          {"branch1x1.relu", {2}},    {"branch3x3.conv", {1}},
          {"branch3x3.relu", {0, 2}}, {"concat", {0, 1, 2}},
          {"res.conv", {2}},          {"res.bn", {2}},
          {"res.add", {0, 1}},        {"res.relu", {1, 2}},
          {"maxpool", {0, 1, 2}},     {"avgpool", {0}},
          {"flatten", {1, 2}},        {"fc", {0, 2}}};
}

// A validated graph from a layer list with one output of weight 1.
inline planner::Graph BuildGraph(const std::string& name, planner::Shape input,
                                 planner::zoo::LayerListBuilder builder,
                                 const std::string& output) {
  auto graph = planner::Graph::Create(name, std::move(input), std::move(builder).Take(),
                                      {planner::GraphOutput{output, 1.0}});
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

// conv-bn-relu stem, then a basic residual block: conv-bn-relu-conv-bn added to the stem's
// output (the add lists the later producer first), relu, pool, linear.
inline planner::Graph ResidualBlock() {
  planner::zoo::LayerListBuilder b;
  std::string x = b.Conv2d(
      "stem.conv", "input",
      planner::zoo::ConvSpec(3, 8, planner::zoo::Sq(3)).Padding(planner::zoo::Sq(1)).NoBias());
  x = b.BatchNorm2d("stem.bn", x);
  x = b.Relu("stem.relu", x);
  std::string y = b.Conv2d(
      "block.conv1", x,
      planner::zoo::ConvSpec(8, 8, planner::zoo::Sq(3)).Padding(planner::zoo::Sq(1)).NoBias());
  y = b.BatchNorm2d("block.bn1", y);
  y = b.Relu("block.relu1", y);
  y = b.Conv2d(
      "block.conv2", y,
      planner::zoo::ConvSpec(8, 8, planner::zoo::Sq(3)).Padding(planner::zoo::Sq(1)).NoBias());
  y = b.BatchNorm2d("block.bn2", y);
  y = b.Add("block.add", {y, x});
  y = b.Relu("block.relu", y);
  y = b.AdaptiveAvgPool2d("pool", y, planner::zoo::Sq(1));
  y = b.Flatten("flatten", y);
  y = b.Linear("fc", y, 8, 5);
  return BuildGraph("residual_block", {3, 6, 6}, std::move(b), y);
}

// A stem, three parallel towers (1x1; 1x1 then 3x3; pool then 1x1), their concat (in another
// order than the towers are computed) and a linear head. With batch_norm, the stem and the 3x3
// conv are followed by batch norm (and lose their bias).
inline planner::Graph InceptionBlock(bool batch_norm) {
  using planner::zoo::ConvSpec;
  using planner::zoo::Sq;
  planner::zoo::LayerListBuilder b;
  ConvSpec stem = ConvSpec(3, 8, Sq(3)).Padding(Sq(1));
  ConvSpec tower = ConvSpec(4, 4, Sq(3)).Padding(Sq(1));
  if (batch_norm) {
    stem = stem.NoBias();
    tower = tower.NoBias();
  }
  std::string x = b.Conv2d("stem.conv", "input", stem);
  if (batch_norm) x = b.BatchNorm2d("stem.bn", x);
  x = b.Relu("stem.relu", x);
  std::string t1 = b.Conv2d("t1.conv", x, ConvSpec(8, 4, Sq(1)));
  t1 = b.Relu("t1.relu", t1);
  std::string t2 = b.Conv2d("t2.reduce", x, ConvSpec(8, 4, Sq(1)));
  t2 = b.Relu("t2.relu1", t2);
  t2 = b.Conv2d("t2.conv", t2, tower);
  if (batch_norm) t2 = b.BatchNorm2d("t2.bn", t2);
  t2 = b.Relu("t2.relu2", t2);
  std::string t3 = b.MaxPool2d("t3.pool", x, Sq(3), Sq(1), Sq(1));
  t3 = b.Conv2d("t3.conv", t3, ConvSpec(8, 4, Sq(1)));
  t3 = b.Relu("t3.relu", t3);
  std::string y = b.Concat("concat", {t3, t1, t2});
  y = b.AdaptiveAvgPool2d("pool", y, Sq(1));
  y = b.Flatten("flatten", y);
  y = b.Linear("fc", y, 12, 5);
  return BuildGraph(batch_norm ? "inception_bn_block" : "inception_block", {3, 6, 6}, std::move(b),
                    y);
}

struct TrainResult {
  ParamMap params;
  ParamMap buffers;  // "<layer>.<buffer>": batch norm's running statistics and counter
  std::vector<double> losses;
};

// "<layer>.<buffer>" -> a copy, for the modules of the given layers.
inline void CollectBuffers(const planner::Graph& graph,
                           const std::map<int, std::shared_ptr<LayerModule>>& modules,
                           ParamMap& out) {
  for (const auto& [id, module] : modules) {
    for (const auto& item : module->named_buffers()) {
      out[graph.layer(id).name + "." + item.key()] = item.value().detach().clone();
    }
  }
}

// A fresh data source for one rank (or the single-device reference); each call makes its own.
using DataMaker = std::function<StatusOr<std::unique_ptr<DataSource>>()>;

// Runs between a reference iteration's backward and its optimizer step (gradient clipping, a
// scheduled learning rate), as a user's PyTorch loop would.
using BeforeStep = std::function<void(int iteration, std::vector<torch::Tensor>& params,
                                      torch::optim::Optimizer&)>;

// The whole graph on one device, as a user's PyTorch loop holds it: every layer's module (seeded
// as the executor seeds its own) in training mode, their parameters in layer order, and the
// optimizer over them. The single-device references below all start from it.
struct ReferenceModel {
  std::vector<std::shared_ptr<LayerModule>> modules;  // by layer id
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

inline ReferenceModel MakeReferenceModel(const planner::Graph& graph, uint64_t seed,
                                         const OptimizerSpec& optimizer) {
  auto modules = BuildAllLayerModules(graph, seed);
  INFO(modules.status().ToString());
  REQUIRE(modules.ok());
  ReferenceModel model;
  model.modules = std::move(modules).value();
  for (auto& module : model.modules) {
    module->train();
    for (auto& p : module->parameters()) model.params.push_back(p);
  }
  auto opt = MakeOptimizer(optimizer, model.params);
  INFO(opt.status().ToString());
  REQUIRE(opt.ok());
  model.optimizer = std::move(opt).value();
  return model;
}

// The graph's loss on the outputs of some rows: each output's mean loss over `loss_batch` rows
// (LossPart) weighted by its loss_weight, summed over the outputs.
inline torch::Tensor GraphLoss(const planner::Graph& graph,
                               const std::vector<torch::Tensor>& outputs,
                               const torch::Tensor& labels, int64_t loss_batch) {
  torch::Tensor loss;
  for (size_t o = 0; o < outputs.size(); ++o) {
    auto part = LossPart(outputs[o], labels, graph.outputs()[o].loss_weight, loss_batch);
    loss = loss.defined() ? loss + part : part;
  }
  return loss;
}

// One reference iteration's forwards and backwards on `batch`, the iteration's global batch:
// leaves the iteration's gradients in the parameters' .grad and returns its loss.
using ReferencePasses =
    std::function<double(int iteration, const Batch& batch, ReferenceModel& model)>;

// A user's training loop on one device: per iteration, the global batch from `make_data`, the
// gradients zeroed, `passes`, `before_step`, one optimizer step. The result holds each
// iteration's loss and, after the last, every parameter and buffer by "<layer>.<name>".
inline TrainResult TrainReference(const planner::Graph& graph, int iterations,
                                  const OptimizerSpec& optimizer, uint64_t seed,
                                  const DataMaker& make_data, const ReferencePasses& passes,
                                  const BeforeStep& before_step = nullptr) {
  ReferenceModel model = MakeReferenceModel(graph, seed, optimizer);
  auto data = make_data();
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  TrainResult result;
  for (int i = 0; i < iterations; ++i) {
    auto batch = (*data)->GlobalBatch(i);
    REQUIRE(batch.ok());
    model.optimizer->zero_grad();
    const double loss = passes(i, *batch, model);
    if (before_step) before_step(i, model.params, *model.optimizer);
    model.optimizer->step();
    result.losses.push_back(loss);
  }
  std::map<int, std::shared_ptr<LayerModule>> by_id;
  for (size_t id = 0; id < model.modules.size(); ++id) {
    by_id[static_cast<int>(id)] = model.modules[id];
    for (const auto& item : model.modules[id]->named_parameters()) {
      result.params[graph.layer(static_cast<int>(id)).name + "." + item.key()] =
          item.value().detach().clone();
    }
  }
  CollectBuffers(graph, by_id, result.buffers);
  return result;
}

// Plain single-device training of the whole graph on the whole batch: the ground truth.
inline TrainResult TrainSingleDevice(const planner::Graph& graph, int64_t global_batch,
                                     int iterations, const OptimizerSpec& optimizer, uint64_t seed,
                                     const DataMaker& make_data,
                                     const BeforeStep& before_step = nullptr) {
  return TrainReference(
      graph, iterations, optimizer, seed, make_data,
      [&](int i, const Batch& batch, ReferenceModel& model) {
        auto outputs =
            ForwardGraph(graph, model.modules, ModelInputs(batch.inputs), StepContext{i, 0});
        REQUIRE(outputs.ok());
        torch::Tensor loss = GraphLoss(graph, *outputs, batch.labels, global_batch);
        loss.backward();
        return loss.item<double>();
      },
      before_step);
}

// The same on the data source a run spec names.
inline TrainResult TrainSingleDevice(const planner::Graph& graph, int64_t global_batch,
                                     int iterations, const OptimizerSpec& optimizer, uint64_t seed,
                                     const DataSpec& data_spec) {
  return TrainSingleDevice(graph, global_batch, iterations, optimizer, seed,
                           [&] { return MakeDataSource(data_spec, graph, global_batch); });
}

// The same on synthetic data seeded with data_seed.
inline TrainResult TrainSingleDevice(const planner::Graph& graph, int64_t global_batch,
                                     int iterations, const OptimizerSpec& optimizer, uint64_t seed,
                                     uint64_t data_seed) {
  return TrainSingleDevice(graph, global_batch, iterations, optimizer, seed,
                           DataSpec{"synthetic", data_seed, ""});
}

struct RankRun {
  Status status;
  TrainResult result;
  std::vector<protocol::TraceEvent> traces;  // with RankOptions::spans
};

using CommMaker = std::function<StatusOr<std::unique_ptr<Communicator>>(int rank)>;

struct RankOptions {
  bool sync_batch_norm = true;                               // ExecutorOptions::sync_batch_norm
  planner::Precision precision = planner::Precision::kFp32;  // ExecutorOptions::precision
  // Runs on each rank's options last, before the executor is made (e.g. to set a test hook).
  std::function<void(int rank, ExecutorOptions& options)> configure;
  int64_t gradient_bucket_bytes = planner::GradientBucketBytes(planner::kDefaultGradientBucketMb);
  // The ranks' data; unset: synthetic data seeded with RunRanks' data_seed.
  std::optional<DataSpec> data;
  // Makes each rank's data source instead of `data` when set (test-only sources, e.g. tokens).
  DataMaker make_data;
  // Runs on each rank's thread after its last step (e.g. to write a checkpoint); an error
  // becomes the rank's status.
  std::function<Status(int rank, Executor& executor)> after;
  // Runs on each rank's thread after each step, with the number of steps done (e.g. to
  // evaluate between steps); an error becomes the rank's status.
  std::function<Status(int rank, int done, Executor& executor)> after_step;
  // Per rank, a recorder the executor marks its spans in (ExecutorOptions::spans), told of each
  // iteration as the executor process does; empty: none.
  std::vector<SpanRecorder*> spans;
};

// Runs every rank of `plan` on its own thread, each with its own communicator from make_comm.
inline std::vector<RankRun> RunRanks(const planner::Graph& graph, const planner::Plan& plan,
                                     int iterations, const OptimizerSpec& optimizer, uint64_t seed,
                                     uint64_t data_seed, const CommMaker& make_comm,
                                     const RankOptions& rank_options = {}) {
  std::vector<RankRun> runs(static_cast<size_t>(plan.num_devices));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < plan.num_devices; ++rank) {
    threads.emplace_back([&, rank] {
      RankRun& run = runs[static_cast<size_t>(rank)];
      auto comm = make_comm(rank);
      if (!comm.ok()) {
        run.status = comm.status();
        return;
      }
      auto data =
          rank_options.make_data
              ? rank_options.make_data()
              : MakeDataSource(rank_options.data.value_or(DataSpec{"synthetic", data_seed, ""}),
                               graph, plan.global_batch);
      if (!data.ok()) {
        run.status = data.status();
        return;
      }
      ExecutorOptions options;
      options.seed = seed;
      options.optimizer = optimizer;
      options.sync_batch_norm = rank_options.sync_batch_norm;
      options.precision = rank_options.precision;
      if (rank_options.configure) rank_options.configure(rank, options);
      options.gradient_bucket_bytes = rank_options.gradient_bucket_bytes;
      SpanRecorder* spans =
          rank_options.spans.empty() ? nullptr : rank_options.spans[static_cast<size_t>(rank)];
      options.spans = spans;
      auto executor = Executor::Create(graph, plan, comm->get(), data->get(), BuildLayerModule,
                                       options, SystemClock::Get());
      if (!executor.ok()) {
        run.status = executor.status();
        return;
      }
      for (int i = 0; i < iterations; ++i) {
        if (spans) spans->BeginIteration(i);
        auto stats = (*executor)->Step(i);
        if (!stats.ok()) {
          run.status = stats.status();
          return;
        }
        run.result.losses.push_back(stats->loss);
        if (rank_options.after_step) {
          run.status = rank_options.after_step(rank, i + 1, **executor);
          if (!run.status.ok()) return;
        }
        if (spans) {
          for (auto& e : spans->TakeFinished(rank)) run.traces.push_back(std::move(e));
        }
      }
      if (spans) {
        for (auto& e : spans->Finish(rank)) run.traces.push_back(std::move(e));
      }
      for (auto& [name, tensor] : (*executor)->NamedParameters()) {
        run.result.params[name] = tensor.detach().clone();
      }
      CollectBuffers(graph, (*executor)->modules(), run.result.buffers);
      if (rank_options.after) run.status = rank_options.after(rank, **executor);
    });
  }
  for (auto& thread : threads) thread.join();
  return runs;
}

// Ranks over a FakeNetwork with NCCL's matching rules (the strictest backend's): an executor that
// passes here posts its transfers in an order NCCL can run (fake_communicator.h).
inline CommMaker FakeComms(int world,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto net = std::make_shared<FakeNetwork>(world, FakeSemantics::kNccl);
  return [net, timeout](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
    return net->Join(rank, timeout);
  };
}

// Gloo on loopback: rank 0 binds a free port and hands it to the others.
inline CommMaker GlooComms(int world,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto port = std::make_shared<std::promise<int>>();
  auto port_future = std::make_shared<std::shared_future<int>>(port->get_future().share());
  return [=](int rank) -> StatusOr<std::unique_ptr<Communicator>> {
    CommOptions options;
    options.rank = rank;
    options.world_size = world;
    options.timeout = timeout;
    if (rank == 0) {
      auto comm = ConnectGloo(options, [port](int p) { port->set_value(p); });
      if (!comm.ok()) {
        try {
          port->set_value(-1);
        } catch (...) {
        }
      }
      return comm;
    }
    options.store_port = port_future->get();
    if (options.store_port < 0) return UnavailableError("rank 0 could not host the store");
    return ConnectGloo(options);
  };
}

// Checks that every rank ran, that replicas of a layer agree, and that every parameter and
// buffer of the reference is held by some rank and matches it within fp32 tolerance:
// |got - want| <= atol + tolerance |want| in float64, atol = tolerance unless given.
inline void RequireMatchesReference(const std::vector<RankRun>& runs, const TrainResult& reference,
                                    double tolerance = 1e-4,
                                    std::optional<double> atol = std::nullopt) {
  ParamMap merged;
  for (size_t r = 0; r < runs.size(); ++r) {
    INFO("rank " << r << ": " << runs[r].status.ToString());
    REQUIRE(runs[r].status.ok());
    for (const ParamMap* tensors : {&runs[r].result.params, &runs[r].result.buffers}) {
      for (const auto& [name, tensor] : *tensors) {
        auto found = merged.find(name);
        if (found == merged.end()) {
          merged[name] = tensor;
        } else {
          INFO("replicas of " << name << " differ");
          REQUIRE(torch::allclose(found->second, tensor, 1e-6, 1e-6));
        }
      }
    }
  }
  REQUIRE(merged.size() == reference.params.size() + reference.buffers.size());
  for (const ParamMap* tensors : {&reference.params, &reference.buffers}) {
    for (const auto& [name, expected] : *tensors) {
      torch::Tensor got = merged.at(name).to(torch::kFloat64);
      INFO(name << " max diff " << (got - expected.to(torch::kFloat64)).abs().max().item<double>());
      REQUIRE(
          torch::allclose(got, expected.to(torch::kFloat64), tolerance, atol.value_or(tolerance)));
    }
  }
  for (const auto& run : runs) {
    REQUIRE(run.result.losses.size() == reference.losses.size());
    for (size_t i = 0; i < reference.losses.size(); ++i) {
      REQUIRE(run.result.losses[i] == Approx(reference.losses[i]).epsilon(1e-4));
    }
  }
}

}  // namespace deepool::worker::testing
