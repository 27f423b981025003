#include "worker/runtime/layers/layer_module.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "worker/runtime/layers/batch_norm.h"
#include "worker/runtime/layers/precision_scope.h"

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
    // Statistics (and their group sums) in fp32 whatever the precision; the output goes on in
    // the input's dtype, as a 16-bit activation under autocast (precision_scope.h).
    const torch::Tensor input = ToFloatIfHalf(inputs[0]);
    torch::Tensor output;
    if (is_training() && group_sum_) {
      output = SyncBatchNormTrain(
          input,
          BatchNormArgs{weight_, bias_, running_mean_, running_var_, attrs_.momentum, attrs_.eps},
          group_sum_);
    } else {
      output =
          torch::batch_norm(input, weight_, bias_, running_mean_, running_var_, is_training(),
                            attrs_.momentum, attrs_.eps, at::globalContext().userEnabledCuDNN());
    }
    return output.scalar_type() == inputs[0].scalar_type() ? output
                                                           : output.to(inputs[0].scalar_type());
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
  explicit GeluLayer(std::string approximate) : approximate_(std::move(approximate)) {}
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "gelu");
    return torch::gelu(inputs[0], approximate_);
  }

 private:
  std::string approximate_;  // "none" or "tanh"
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
  explicit FlattenLayer(const LayerAttrs& attrs) : start_(attrs.start_dim), end_(attrs.end_dim) {}
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "flatten");
    return inputs[0].flatten(start_, end_);
  }

 private:
  int64_t start_, end_;
};

// Contiguous, so the cost model's copy is what runs and later layers read rows in order.
class TransposeLayer final : public LayerModule {
 public:
  explicit TransposeLayer(const LayerAttrs& attrs) : dim0_(attrs.dim0), dim1_(attrs.dim1) {}
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "transpose");
    return inputs[0].transpose(dim0_, dim1_).contiguous();
  }

 private:
  int64_t dim0_, dim1_;
};

class SelectLayer final : public LayerModule {
 public:
  explicit SelectLayer(const LayerAttrs& attrs) : dim_(attrs.dim), index_(attrs.index) {}
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "select");
    return inputs[0].select(dim_, index_);
  }

 private:
  int64_t dim_, index_;
};

class MeanLayer final : public LayerModule {
 public:
  explicit MeanLayer(const LayerAttrs& attrs) : dim_(attrs.dim) {}
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "mean");
    return inputs[0].mean(dim_);
  }

 private:
  int64_t dim_;
};

// torchvision ViT's class_token: a bare [1, 1, D] parameter, zeros as torchvision initialises
// it, expanded over the batch and prepended to the tokens: [n, T, D] -> [n, T + 1, D].
class ClassTokenLayer final : public LayerModule {
 public:
  explicit ClassTokenLayer(int64_t dim) {
    token_ = register_parameter(kBareParameterName, torch::zeros({1, 1, dim}));
  }
  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "class_token");
    const torch::Tensor& x = inputs[0];
    return torch::cat({token_.expand({x.size(0), -1, -1}), x}, 1);
  }

 private:
  torch::Tensor token_;
};

// A keep-mask of x's shape (1 with probability keep) on x's device and dtype, whose rows depend
// only on (layer seed, iteration, global sample index), never on the batch split. For a GPU the
// mask is drawn into page-locked memory and its copy queued: a copy from pageable memory would
// make the host wait for every kernel queued before it, and the GPU then idle while the host
// draws the next mask and issues what follows.
torch::Tensor SampleKeepMask(const torch::Tensor& x, double keep, uint64_t layer_seed,
                             const StepContext& step) {
  const bool queued = x.is_cuda();
  torch::Tensor mask =
      torch::empty(x.sizes(), torch::TensorOptions().dtype(torch::kFloat).pinned_memory(queued));
  const uint64_t step_seed = Mix(layer_seed, static_cast<uint64_t>(step.iteration));
  for (int64_t i = 0; i < x.size(0); ++i) {
    at::Generator gen = MakeGenerator(Mix(step_seed, static_cast<uint64_t>(step.first_sample + i)));
    mask[i].bernoulli_(keep, gen);
  }
  return mask.to(x.device(), x.scalar_type(), queued);
}

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
    return x * SampleKeepMask(x, 1.0 - p_, layer_seed_, step_) * (1.0 / (1.0 - p_));
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

// nn.Embedding: weight [num_embeddings, embedding_dim] ~ N(0, 1) (torch.nn's default; GPT-2's
// own N(0, 0.02) is not applied). Reads int64 ids of any shape.
class EmbeddingLayer final : public LayerModule {
 public:
  EmbeddingLayer(const LayerAttrs& attrs, uint64_t seed) {
    weight_ =
        register_parameter("weight", torch::empty({attrs.num_embeddings, attrs.embedding_dim}));
    at::Generator gen = MakeGenerator(seed);
    torch::NoGradGuard no_grad;
    weight_.normal_(0.0, 1.0, gen);
  }

  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "embedding");
    TORCH_CHECK(inputs[0].scalar_type() == torch::kLong, "embedding expects int64 token ids, got ",
                inputs[0].scalar_type());
    return torch::embedding(weight_, inputs[0]);
  }

 private:
  torch::Tensor weight_;
};

// GPT-2's wpe added to the token embeddings: x [n, T, D] + weight[:T], weight [max_positions, D]
// ~ N(0, 1) as nn.Embedding's. With bare_parameter, torchvision ViT's pos_embedding instead: a
// bare [1, max_positions, D] parameter ~ N(0, 0.02) as torchvision draws it, added whole.
class PositionEmbeddingLayer final : public LayerModule {
 public:
  PositionEmbeddingLayer(int64_t max_positions, int64_t dim, bool bare, uint64_t seed)
      : bare_(bare) {
    weight_ = bare ? register_parameter(kBareParameterName, torch::empty({1, max_positions, dim}))
                   : register_parameter("weight", torch::empty({max_positions, dim}));
    at::Generator gen = MakeGenerator(seed);
    torch::NoGradGuard no_grad;
    weight_.normal_(0.0, bare ? 0.02 : 1.0, gen);
  }

  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "position_embedding");
    const int64_t tokens = inputs[0].size(1);
    const int64_t positions = weight_.size(bare_ ? 1 : 0);
    TORCH_CHECK(bare_ ? tokens == positions : tokens <= positions, "position_embedding: ", tokens,
                " tokens for max_positions ", positions);
    return inputs[0] + (bare_ ? weight_ : weight_.narrow(0, 0, tokens));
  }

 private:
  bool bare_;
  torch::Tensor weight_;
};

// nn.MultiheadAttention(D, H, dropout, bias, batch_first=True) as self-attention, need_weights
// False: its parameters, names and init (in_proj_weight xavier_uniform_, in_proj_bias and
// out_proj.bias zero, out_proj.weight as nn.Linear's). Without dropout (or in eval) it runs
// at::scaled_dot_product_attention (is_causal for causal); with dropout in training it computes
// the attention weights itself and drops them with a mask per sample drawn as the dropout
// layer's, so that the result does not depend on the batch split (SDPA's dropout draws from the
// global generator).
class MultiheadAttentionLayer final : public LayerModule {
 public:
  MultiheadAttentionLayer(const LayerAttrs& attrs, int64_t dim, uint64_t seed)
      : heads_(attrs.num_heads), causal_(attrs.causal), dropout_(attrs.dropout), layer_seed_(seed) {
    in_proj_weight_ = register_parameter("in_proj_weight", torch::empty({3 * dim, dim}));
    if (attrs.bias) in_proj_bias_ = register_parameter("in_proj_bias", torch::zeros({3 * dim}));
    auto out_proj = register_module("out_proj", std::make_shared<torch::nn::Module>("Linear"));
    out_weight_ = out_proj->register_parameter("weight", torch::empty({dim, dim}));
    if (attrs.bias) out_bias_ = out_proj->register_parameter("bias", torch::zeros({dim}));
    at::Generator gen = MakeGenerator(seed);
    torch::NoGradGuard no_grad;
    const double xavier = std::sqrt(6.0 / static_cast<double>(dim + 3 * dim));
    in_proj_weight_.uniform_(-xavier, xavier, gen);
    InitLikeTorchNn(out_weight_, nullptr, dim, gen);
  }

  torch::Tensor Forward(const std::vector<torch::Tensor>& inputs) override {
    CheckInputs(inputs, 1, "multihead_attention");
    const torch::Tensor& x = inputs[0];
    TORCH_CHECK(x.dim() == 3, "multihead_attention expects [batch, tokens, embed_dim], got ",
                x.sizes());
    const int64_t n = x.size(0), tokens = x.size(1), dim = x.size(2);
    auto split_heads = [&](const torch::Tensor& t) {
      return t.reshape({n, tokens, heads_, dim / heads_}).transpose(1, 2);
    };
    std::vector<torch::Tensor> qkv = torch::linear(x, in_proj_weight_, in_proj_bias_).chunk(3, -1);
    torch::Tensor q = split_heads(qkv[0]), k = split_heads(qkv[1]), v = split_heads(qkv[2]);
    torch::Tensor attended = is_training() && dropout_ > 0
                                 ? AttendWithDropout(q, k, v)
                                 : at::scaled_dot_product_attention(q, k, v, {}, 0.0, causal_);
    return torch::linear(attended.transpose(1, 2).reshape({n, tokens, dim}), out_weight_,
                         out_bias_);
  }

 private:
  // softmax(q k^T / sqrt(d) + causal mask), dropped per sample, times v.
  torch::Tensor AttendWithDropout(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v) {
    const int64_t tokens = q.size(2);
    torch::Tensor scores =
        torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
    if (causal_) {
      torch::Tensor future = torch::ones({tokens, tokens}, q.options().dtype(torch::kBool)).triu(1);
      scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
    }
    torch::Tensor weights = torch::softmax(scores, -1);
    weights = weights * SampleKeepMask(weights, 1.0 - dropout_, layer_seed_, step_) *
              (1.0 / (1.0 - dropout_));
    return torch::matmul(weights, v);
  }

  int64_t heads_;
  bool causal_;
  double dropout_;
  uint64_t layer_seed_;
  torch::Tensor in_proj_weight_, in_proj_bias_, out_weight_, out_bias_;
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
      return std::shared_ptr<LayerModule>(std::make_shared<GeluLayer>(a.approximate));
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
      return std::shared_ptr<LayerModule>(std::make_shared<FlattenLayer>(a));
    case Op::kTranspose:
      return std::shared_ptr<LayerModule>(std::make_shared<TransposeLayer>(a));
    case Op::kSelect:
      return std::shared_ptr<LayerModule>(std::make_shared<SelectLayer>(a));
    case Op::kMean:
      return std::shared_ptr<LayerModule>(std::make_shared<MeanLayer>(a));
    case Op::kClassToken:
      RETURN_IF_ERROR(need_rank(2));
      return std::shared_ptr<LayerModule>(std::make_shared<ClassTokenLayer>(in.back()));
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
    case Op::kEmbedding:
      return std::shared_ptr<LayerModule>(std::make_shared<EmbeddingLayer>(a, layer_seed));
    case Op::kPositionEmbedding:
      RETURN_IF_ERROR(need_rank(2));
      return std::shared_ptr<LayerModule>(std::make_shared<PositionEmbeddingLayer>(
          a.max_positions, in.back(), a.bare_parameter, layer_seed));
    case Op::kMultiheadAttention:
      RETURN_IF_ERROR(need_rank(2));
      if (a.num_heads < 1 || in.back() % a.num_heads != 0) {
        return InvalidArgumentError("layer '" + layer.name + "': num_heads " +
                                    std::to_string(a.num_heads) + " does not divide embed_dim " +
                                    std::to_string(in.back()));
      }
      return std::shared_ptr<LayerModule>(
          std::make_shared<MultiheadAttentionLayer>(a, in.back(), layer_seed));
  }
  return UnimplementedError("layer '" + layer.name + "': no runtime module for op " +
                            std::to_string(static_cast<int>(layer.op)));
}

}  // namespace

std::string StateKey(const std::string& layer_name, const std::string& tensor_name) {
  return tensor_name == kBareParameterName ? layer_name : layer_name + "." + tensor_name;
}

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
    ASSIGN_OR_RETURN(auto module, MakeModule(graph, layer, LayerSeed(seed, layer.name)));
    // A tied parameter starts as its source does, drawn as the source layer draws it, so the
    // copies on every rank start equal (the executor keeps them equal: executor_tied.cc).
    for (const planner::TiedParameter& tie : layer.tied) {
      const Layer& source_layer = graph.layer(tie.source_layer);
      ASSIGN_OR_RETURN(auto source,
                       MakeModule(graph, source_layer, LayerSeed(seed, source_layer.name)));
      torch::NoGradGuard no_grad;
      module->named_parameters()[tie.parameter].copy_(
          source->named_parameters()[tie.source_parameter]);
    }
    return module;
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
