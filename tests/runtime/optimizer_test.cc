// The run spec's optimizers as the runtime builds them: AdamW follows its own update rule
// (decoupled weight decay), not Adam's with weight decay added to the gradient; and every
// optimizer's state survives a checkpoint so that training resumed from it goes on bit for bit.
#include "worker/runtime/layers/optimizer.h"

#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor_test_util.h"
#include "worker/runtime/checkpoints/training_state.h"

namespace deepool::worker {
namespace {

constexpr double kLr = 0.1;
constexpr double kWeightDecay = 0.2;
constexpr double kBeta1 = 0.9;
constexpr double kBeta2 = 0.999;
constexpr double kEps = 1e-8;
constexpr int kSteps = 3;

OptimizerSpec Spec(const std::string& name) {
  OptimizerSpec spec;
  spec.name = name;
  spec.lr = kLr;
  spec.weight_decay = kWeightDecay;
  spec.betas = {kBeta1, kBeta2};
  spec.eps = kEps;
  return spec;
}

// The weights `optimizer` leaves after kSteps steps from `start` with the gradients `grads`.
std::vector<double> Stepped(const std::string& optimizer, const std::vector<double>& start,
                            const std::vector<std::vector<double>>& grads) {
  torch::Tensor w = torch::tensor(start, torch::kFloat64).requires_grad_();
  auto made = MakeOptimizer(Spec(optimizer), {w});
  REQUIRE(made.ok());
  for (int t = 0; t < kSteps; ++t) {
    (*made)->zero_grad();
    w.mutable_grad() = torch::tensor(grads[static_cast<size_t>(t)], torch::kFloat64);
    (*made)->step();
  }
  torch::Tensor out = w.detach().contiguous();
  return {out.data_ptr<double>(), out.data_ptr<double>() + out.numel()};
}

// torch.optim.AdamW's rule, written out: w <- w (1 - lr wd), then the bias-corrected Adam step
// on the gradient alone. (Adam's L2 decay adds wd w to the gradient the moments see instead.)
std::vector<double> AdamWRule(std::vector<double> w,
                              const std::vector<std::vector<double>>& grads) {
  std::vector<double> m(w.size(), 0.0), v(w.size(), 0.0);
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<double>& g = grads[static_cast<size_t>(t - 1)];
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] *= 1 - kLr * kWeightDecay;
      m[i] = kBeta1 * m[i] + (1 - kBeta1) * g[i];
      v[i] = kBeta2 * v[i] + (1 - kBeta2) * g[i] * g[i];
      const double m_hat = m[i] / (1 - std::pow(kBeta1, t));
      const double v_hat = v[i] / (1 - std::pow(kBeta2, t));
      w[i] -= kLr * m_hat / (std::sqrt(v_hat) + kEps);
    }
  }
  return w;
}

TEST_CASE("adamw steps by the AdamW rule, which Adam with weight decay does not", "[optimizer]") {
  const std::vector<double> start = {1.5, -2.0, 0.25, 3.0};
  const std::vector<std::vector<double>> grads = {
      {0.3, -0.1, 0.02, 1.0}, {-0.2, -0.4, 0.05, 0.5}, {0.1, 0.3, -0.01, 0.7}};
  const std::vector<double> want = AdamWRule(start, grads);
  const std::vector<double> adamw = Stepped("adamw", start, grads);
  const std::vector<double> adam = Stepped("adam", start, grads);
  for (size_t i = 0; i < start.size(); ++i) {
    INFO("weight " << i);
    CHECK(adamw[i] == Approx(want[i]).epsilon(1e-12).margin(1e-12));
    // The rules part by about lr * wd * w per step: far beyond the tolerance above, so AdamW
    // trained as Adam fails this test.
    CHECK(std::abs(adam[i] - want[i]) > 1e-3);
  }
}

TEST_CASE("adamw without a weight decay in the run spec decays by torch's 0.01", "[optimizer]") {
  auto parsed = protocol::ParseOptimizerJson(nlohmann::json{{"name", "adamw"}}, "optimizer.");
  REQUIRE(parsed.ok());
  torch::Tensor w = torch::ones({1}, torch::kFloat64).requires_grad_();
  auto made = MakeOptimizer(*parsed, {w});
  REQUIRE(made.ok());
  w.mutable_grad() = torch::zeros({1}, torch::kFloat64);
  (*made)->step();
  // A zero gradient leaves only the decay: 1 - lr * 0.01.
  CHECK(w.item<double>() == Approx(1 - parsed->lr * 0.01).epsilon(1e-12));
}

// An mlp with its optimizer, trained one synthetic batch at a time.
class Mlp {
 public:
  Mlp(const OptimizerSpec& optimizer, uint64_t seed)
      : graph_(testing::Zoo("mlp")), modules_(MustModules(graph_, seed)) {
    std::vector<torch::Tensor> params;
    for (size_t id = 0; id < modules_.size(); ++id) {
      by_id_[static_cast<int>(id)] = modules_[id];
      for (auto& p : modules_[id]->parameters()) params.push_back(p);
    }
    auto made = MakeOptimizer(optimizer, params);
    REQUIRE(made.ok());
    optimizer_ = std::move(*made);
    auto data = MakeDataSource(DataSpec{"synthetic", 5, ""}, graph_, kBatch);
    REQUIRE(data.ok());
    data_ = std::move(*data);
  }

  void Step(int iteration) {
    auto batch = data_->GlobalBatch(iteration);
    REQUIRE(batch.ok());
    auto outputs = ForwardGraph(graph_, modules_, batch->inputs, StepContext{iteration, 0});
    REQUIRE(outputs.ok());
    torch::Tensor loss = LossPart((*outputs)[0], batch->labels, 1.0, kBatch);
    optimizer_->zero_grad();
    loss.backward();
    optimizer_->step();
  }

  StateDict Save() const {
    std::vector<int> all;
    for (const auto& [id, module] : by_id_) all.push_back(id);
    auto state = CollectTrainingState(graph_, by_id_, all, optimizer_.get());
    REQUIRE(state.ok());
    return std::move(*state);
  }
  Status Load(const StateDict& state) {
    return LoadTrainingState(state, graph_, by_id_, optimizer_.get());
  }
  testing::ParamMap Params() const {
    testing::ParamMap params;
    for (const auto& [id, module] : by_id_) {
      for (const auto& p : module->named_parameters()) {
        params[graph_.layer(id).name + "." + p.key()] = p.value().detach().clone();
      }
    }
    return params;
  }

 private:
  static constexpr int64_t kBatch = 8;
  static std::vector<std::shared_ptr<LayerModule>> MustModules(const planner::Graph& graph,
                                                               uint64_t seed) {
    auto modules = BuildAllLayerModules(graph, seed);
    REQUIRE(modules.ok());
    return std::move(*modules);
  }

  planner::Graph graph_;
  std::vector<std::shared_ptr<LayerModule>> modules_;
  std::map<int, std::shared_ptr<LayerModule>> by_id_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<DataSource> data_;
};

TEST_CASE("training resumed from saved optimizer state goes on bit for bit",
          "[optimizer][checkpoint]") {
  torch::set_num_threads(1);
  for (const std::string name : {"sgd", "adam", "adamw"}) {
    INFO(name);
    OptimizerSpec optimizer = testing::Sgd();
    if (name == "adam") optimizer = testing::Adam();
    if (name == "adamw") optimizer = testing::AdamW();
    Mlp uninterrupted(optimizer, 3);
    for (int i = 0; i < 3; ++i) uninterrupted.Step(i);
    const StateDict saved = uninterrupted.Save();
    const std::string field = name == "sgd" ? "momentum_buffer" : "exp_avg_sq";
    size_t with_field = 0;
    for (const auto& [key, tensor] : saved) {
      with_field += key.size() > field.size() &&
                    key.compare(key.size() - field.size(), field.size(), field) == 0;
    }
    CHECK(with_field > 0);
    // Another seed: everything it ends with must come from the checkpoint.
    Mlp resumed(optimizer, 99);
    const Status loaded = resumed.Load(saved);
    INFO(loaded.ToString());
    REQUIRE(loaded.ok());
    for (int i = 3; i < 6; ++i) {
      uninterrupted.Step(i);
      resumed.Step(i);
    }
    const testing::ParamMap want = uninterrupted.Params();
    const testing::ParamMap got = resumed.Params();
    REQUIRE(got.size() == want.size());
    for (const auto& [key, tensor] : want) {
      INFO(key);
      CHECK(torch::equal(got.at(key), tensor));
    }
  }
}

}  // namespace
}  // namespace deepool::worker
