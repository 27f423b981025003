#include "worker/runtime/layers/layer_module.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <utility>

#include "worker/runtime/layers/batch_norm.h"

namespace deepool::worker {
namespace {

using planner::Graph;
using planner::Layer;
using planner::LayerAttrs;
using planner::Op;
using planner::Shape;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Mix(uint64_t a, uint64_t b) { return SplitMix64(a ^ SplitMix64(b)); }

// torch's CPU generator seeds its Mersenne Twister with 32 bits; fold the high half in so that
// all 64 bits of our seed count.
at::Generator MakeGenerator(uint64_t seed) {
  uint64_t folded = (seed ^ (seed >> 32)) & 0xffffffffULL;
  return at::make_generator<at::CPUGeneratorImpl>(folded);
}

// torch.nn's default init for conv and linear: kaiming_uniform_(a=sqrt(5)) on the weight, which
// is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
void InitLikeTorchNn(torch::Tensor& weight, torch::Tensor* bias, int64_t fan_in,
                     at::Generator& gen) {
  torch::NoGradGuard no_grad;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  weight.uniform_(-bound, bound, gen);
  if (bias != nullptr && bias->defined()) bias->uniform_(-bound, bound, gen);
}

void CheckInputs(const std::vector<torch::Tensor>& inputs, size_t expected, const char* op) {
  TORCH_CHECK(inputs.size() == expected, op, " expects ", expected, " input(s), got ",
              inputs.size());
}

class Conv2dLayer final : public LayerModule {
 public:
  Conv2dLayer(const LayerAttrs& attrs, int64_t in_channels, uint64_t seed) : attrs_(attrs) {
    const auto& k = attrs.kernel_size;
    weight_ = register_parameter(
        "weight", torch::empty({attrs.out_channels, in_channels / attrs.groups, k[0], k[1]}));
    if (attrs.bias) bias_ = register_parameter("bias", torch::empty({attrs.out_channels}));
    at::Generator gen = MakeGenerator(seed);
    InitLikeTorchNn(weight_, &bias_, (in_channels / attrs.groups) * k[0] * k[1], gen);
  }

  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "conv2d");
    return at::conv2d(inputs[0], weight_, bias_, attrs_.stride, attrs_.padding, attrs_.dilation,
                      attrs_.groups);
  }

 private:
  LayerAttrs attrs_;
  torch::Tensor weight_;
  torch::Tensor bias_;
};

class BatchNorm2dLayer final : public LayerModule {
 public:
  BatchNorm2dLayer(const LayerAttrs& attrs, int64_t channels) : attrs_(attrs) {
    if (attrs.affine) {
      weight_ = register_parameter("weight", torch::ones({channels}));
      bias_ = register_parameter("bias", torch::zeros({channels}));
    }
    running_mean_ = register_buffer("running_mean", torch::zeros({channels}));
    running_var_ = register_buffer("running_var", torch::ones({channels}));
    num_batches_tracked_ =
        register_buffer("num_batches_tracked", torch::zeros({}, torch::dtype(torch::kLong)));
  }

  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "batchnorm2d");
    if (is_training()) {
      torch::NoGradGuard no_grad;
      num_batches_tracked_.add_(1);
    }
    if (is_training() && group_sum_) {
      return SyncBatchNormTrain(
          inputs[0],
          BatchNormArgs{weight_, bias_, running_mean_, running_var_, attrs_.momentum, attrs_.eps},
          group_sum_);
    }
    return torch::batch_norm(inputs[0], weight_, bias_, running_mean_, running_var_, is_training(),
                             attrs_.momentum, attrs_.eps, at::globalContext().userEnabledCuDNN());
  }

 private:
  LayerAttrs attrs_;
  torch::Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

class ReluLayer final : public LayerModule {
 public:
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "relu");
    return torch::relu(inputs[0]);
  }
};

class GeluLayer final : public LayerModule {
 public:
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "gelu");
    return torch::gelu(inputs[0]);
  }
};

class MaxPool2dLayer final : public LayerModule {
 public:
  explicit MaxPool2dLayer(const LayerAttrs& attrs) : attrs_(attrs) {}
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "maxpool2d");
    return torch::max_pool2d(inputs[0], attrs_.kernel_size, attrs_.stride, attrs_.padding,
                             attrs_.dilation, attrs_.ceil_mode);
  }

 private:
  LayerAttrs attrs_;
};

class AvgPool2dLayer final : public LayerModule {
 public:
  explicit AvgPool2dLayer(const LayerAttrs& attrs) : attrs_(attrs) {}
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "avgpool2d");
    return torch::avg_pool2d(inputs[0], attrs_.kernel_size, attrs_.stride, attrs_.padding,
                             attrs_.ceil_mode, attrs_.count_include_pad);
  }

 private:
  LayerAttrs attrs_;
};

class AdaptiveAvgPool2dLayer final : public LayerModule {
 public:
  explicit AdaptiveAvgPool2dLayer(const LayerAttrs& attrs) : attrs_(attrs) {}
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "adaptive_avgpool2d");
    return torch::adaptive_avg_pool2d(inputs[0], attrs_.output_size);
  }

 private:
  LayerAttrs attrs_;
};

class LinearLayer final : public LayerModule {
 public:
  LinearLayer(const LayerAttrs& attrs, int64_t in_features, uint64_t seed) {
    weight_ = register_parameter("weight", torch::empty({attrs.out_features, in_features}));
    if (attrs.bias) bias_ = register_parameter("bias", torch::empty({attrs.out_features}));
    at::Generator gen = MakeGenerator(seed);
    InitLikeTorchNn(weight_, &bias_, in_features, gen);
  }

  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "linear");
    return torch::linear(inputs[0], weight_, bias_);
  }

 private:
  torch::Tensor weight_;
  torch::Tensor bias_;
};

class FlattenLayer final : public LayerModule {
 public:
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "flatten");
    return inputs[0].flatten(1);
  }
};

// Inverted dropout (scaled by 1/(1-p) in training, identity in eval) whose mask for a sample
// depends only on (seed, layer, iteration, global sample index), never on the batch split.
class DropoutLayer final : public LayerModule {
 public:
  DropoutLayer(const LayerAttrs& attrs, uint64_t layer_seed)
      : p_(attrs.p), layer_seed_(layer_seed) {}

  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "dropout");
    const torch::Tensor& x = inputs[0];
    if (!is_training() || p_ <= 0.0) return x;
    if (p_ >= 1.0) return x * 0.0;
    // For a GPU the mask is drawn into page-locked memory and its copy queued: a copy from
    // pageable memory would make the host wait for every kernel queued before it, and the GPU
    // then idle while the host draws the next mask and issues what follows.
    const bool queued = x.is_cuda();
    torch::Tensor mask =
        torch::empty(x.sizes(), torch::TensorOptions().dtype(torch::kFloat).pinned_memory(queued));
    const uint64_t step_seed = Mix(layer_seed_, static_cast<uint64_t>(step_.iteration));
    for (int64_t i = 0; i < x.size(0); ++i) {
      at::Generator gen =
          MakeGenerator(Mix(step_seed, static_cast<uint64_t>(step_.first_sample + i)));
      mask[i].bernoulli_(1.0 - p_, gen);
    }
    return x * mask.to(x.device(), x.scalar_type(), queued) * (1.0 / (1.0 - p_));
  }

 private:
  double p_;
  uint64_t layer_seed_;
};

class ConcatLayer final : public LayerModule {
 public:
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    TORCH_CHECK(!inputs.empty(), "concat expects at least one input");
    return torch::cat(inputs, 1);
  }
};

class AddLayer final : public LayerModule {
 public:
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    TORCH_CHECK(!inputs.empty(), "add expects at least one input");
    torch::Tensor sum = inputs[0];
    for (size_t i = 1; i < inputs.size(); ++i) sum = sum + inputs[i];
    return sum;
  }
};

class LayerNormLayer final : public LayerModule {
 public:
  LayerNormLayer(const LayerAttrs& attrs, std::vector<int64_t> normalized_shape)
      : eps_(attrs.eps), normalized_shape_(std::move(normalized_shape)) {
    if (attrs.affine) {
      weight_ = register_parameter("weight", torch::ones(normalized_shape_));
      bias_ = register_parameter("bias", torch::zeros(normalized_shape_));
    }
  }

  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "layernorm");
    return torch::layer_norm(inputs[0], normalized_shape_, weight_, bias_, eps_);
  }

 private:
  double eps_;
  std::vector<int64_t> normalized_shape_;
  torch::Tensor weight_, bias_;
};

const Shape& InputShape(const Graph& graph, const Layer& layer, size_t index) {
  int id = layer.input_ids.at(index);
  return id == planner::kGraphInputId ? graph.input_shape() : graph.layer(id).output_shape;
}

StatusOr<std::shared_ptr<LayerModule>> MakeModule(const Graph& graph, const Layer& layer,
                                                  uint64_t layer_seed) {
  const LayerAttrs& a = layer.attrs;
  if (layer.input_ids.empty()) {
    return InvalidArgumentError("layer '" + layer.name + "' has no inputs");
  }
  const Shape& in = InputShape(graph, layer, 0);
  auto need_rank = [&](size_t rank) -> Status {
    if (in.size() < rank) {
      return InvalidArgumentError("layer '" + layer.name + "' (" + planner::OpName(layer.op) +
                                  ") needs an input of at least " + std::to_string(rank) +
                                  " dims, got " + planner::ShapeToString(in));
    }
    return Status::Ok();
  };
  switch (layer.op) {
    case Op::kConv2d: {
      RETURN_IF_ERROR(need_rank(3));
      if (a.groups < 1 || in[0] % a.groups != 0) {
        return InvalidArgumentError("layer '" + layer.name + "': groups " +
                                    std::to_string(a.groups) + " does not divide " +
                                    std::to_string(in[0]) + " input channels");
      }
      return std::shared_ptr<LayerModule>(std::make_shared<Conv2dLayer>(a, in[0], layer_seed));
    }
    case Op::kBatchNorm2d:
      RETURN_IF_ERROR(need_rank(1));
      return std::shared_ptr<LayerModule>(std::make_shared<BatchNorm2dLayer>(a, in[0]));
    case Op::kRelu:
      return std::shared_ptr<LayerModule>(std::make_shared<ReluLayer>());
    case Op::kGelu:
      return std::shared_ptr<LayerModule>(std::make_shared<GeluLayer>());
    case Op::kMaxPool2d:
      return std::shared_ptr<LayerModule>(std::make_shared<MaxPool2dLayer>(a));
    case Op::kAvgPool2d:
      return std::shared_ptr<LayerModule>(std::make_shared<AvgPool2dLayer>(a));
    case Op::kAdaptiveAvgPool2d:
      return std::shared_ptr<LayerModule>(std::make_shared<AdaptiveAvgPool2dLayer>(a));
    case Op::kLinear:
      RETURN_IF_ERROR(need_rank(1));
      return std::shared_ptr<LayerModule>(std::make_shared<LinearLayer>(a, in.back(), layer_seed));
    case Op::kFlatten:
      return std::shared_ptr<LayerModule>(std::make_shared<FlattenLayer>());
    case Op::kDropout:
      return std::shared_ptr<LayerModule>(std::make_shared<DropoutLayer>(a, layer_seed));
    case Op::kConcat:
      return std::shared_ptr<LayerModule>(std::make_shared<ConcatLayer>());
    case Op::kAdd:
      return std::shared_ptr<LayerModule>(std::make_shared<AddLayer>());
    case Op::kLayerNorm:
      if (a.normalized_shape.empty()) {
        return InvalidArgumentError("layer '" + layer.name + "': layernorm needs normalized_shape");
      }
      return std::shared_ptr<LayerModule>(std::make_shared<LayerNormLayer>(a, a.normalized_shape));
  }
  return UnimplementedError("layer '" + layer.name + "': no runtime module for op " +
                            std::to_string(static_cast<int>(layer.op)));
}

}  // namespace

uint64_t LayerSeed(uint64_t seed, std::string_view layer_name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the name's bytes
  for (unsigned char c : layer_name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return Mix(SplitMix64(seed), h);
}

StatusOr<std::shared_ptr<LayerModule>> BuildLayerModule(const planner::Graph& graph, int layer_id,
                                                        uint64_t seed) {
  if (layer_id < 0 || layer_id >= graph.num_layers()) {
    return OutOfRangeError("layer id " + std::to_string(layer_id) + " is outside graph '" +
                           graph.name() + "' of " + std::to_string(graph.num_layers()) + " layers");
  }
  const Layer& layer = graph.layer(layer_id);
  try {
    return MakeModule(graph, layer, LayerSeed(seed, layer.name));
  } catch (const std::exception& e) {
    return InternalError("building layer '" + layer.name + "': " + e.what());
  }
}

StatusOr<std::vector<std::shared_ptr<LayerModule>>> BuildAllLayerModules(
    const planner::Graph& graph, uint64_t seed) {
  std::vector<std::shared_ptr<LayerModule>> modules;
  modules.reserve(static_cast<size_t>(graph.num_layers()));
  for (int id = 0; id < graph.num_layers(); ++id) {
    ASSIGN_OR_RETURN(auto module, BuildLayerModule(graph, id, seed));
    modules.push_back(std::move(module));
  }
  return modules;
}

StatusOr<std::vector<torch::Tensor>> ForwardGraph(
    const planner::Graph& graph, const std::vector<std::shared_ptr<LayerModule>>& modules,
    const torch::Tensor& input, const StepContext& step) {
  if (modules.size() != static_cast<size_t>(graph.num_layers())) {
    return InvalidArgumentError("ForwardGraph: " + std::to_string(modules.size()) +
                                " modules for " + std::to_string(graph.num_layers()) + " layers");
  }
  std::vector<torch::Tensor> outputs(modules.size());
  for (int id = 0; id < graph.num_layers(); ++id) {
    const Layer& layer = graph.layer(id);
    std::vector<torch::Tensor> inputs;
    inputs.reserve(layer.input_ids.size());
    for (int in : layer.input_ids) {
      inputs.push_back(in == planner::kGraphInputId ? input : outputs[static_cast<size_t>(in)]);
    }
    try {
      modules[static_cast<size_t>(id)]->set_step(step);
      outputs[static_cast<size_t>(id)] = modules[static_cast<size_t>(id)]->Forward(inputs);
    } catch (const std::exception& e) {
      return InternalError("forward of layer '" + layer.name + "': " + e.what());
    }
  }
  std::vector<torch::Tensor> result;
  for (int id : graph.output_ids()) result.push_back(outputs[static_cast<size_t>(id)]);
  return result;
}

}  // namespace deepool::worker
