#include "planner/graph.h"

#include <algorithm>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "planner/tied_parameters.h"

namespace deepool::planner {
namespace {

// Sizes are bounded so that every derived quantity (FLOPs, bytes) fits in int64 with room:
// no dimension above 2^24 and no tensor above 2^40 elements per sample.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxElements = int64_t{1} << 40;

struct OpInfo {
  Op op;
  const char* name;
};

constexpr OpInfo kOps[] = {
    {Op::kConv2d, "conv2d"},
    {Op::kBatchNorm2d, "batchnorm2d"},
    {Op::kRelu, "relu"},
    {Op::kMaxPool2d, "maxpool2d"},
    {Op::kAvgPool2d, "avgpool2d"},
    {Op::kAdaptiveAvgPool2d, "adaptive_avgpool2d"},
    {Op::kLinear, "linear"},
    {Op::kFlatten, "flatten"},
    {Op::kDropout, "dropout"},
    {Op::kConcat, "concat"},
    {Op::kAdd, "add"},
    {Op::kLayerNorm, "layernorm"},
    {Op::kGelu, "gelu"},
    {Op::kEmbedding, "embedding"},
    {Op::kPositionEmbedding, "position_embedding"},
    {Op::kMultiheadAttention, "multihead_attention"},
    {Op::kTranspose, "transpose"},
    {Op::kClassToken, "class_token"},
    {Op::kSelect, "select"},
    {Op::kMean, "mean"},
};

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

Status LayerError(const Layer& layer, const std::string& field, const std::string& what) {
  std::string where = "layer " + Quote(layer.name) + " (" + OpName(layer.op) + ")";
  if (!field.empty()) where += ": field " + Quote(field);
  return InvalidArgumentError(where + ": " + what);
}

Status CheckPositive(const Layer& layer, const std::string& field, int64_t value) {
  if (value <= 0) return LayerError(layer, field, "must be positive, got " + std::to_string(value));
  if (value > kMaxDim) return LayerError(layer, field, "too large: " + std::to_string(value));
  return Status::Ok();
}

Status CheckPair(const Layer& layer, const std::string& field, const std::array<int64_t, 2>& v,
                 bool allow_zero) {
  for (int64_t x : v) {
    if (allow_zero ? x < 0 : x <= 0) {
      return LayerError(layer, field,
                        std::string(allow_zero ? "must be non-negative" : "must be positive") +
                            ", got [" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + "]");
    }
    if (x > kMaxDim) return LayerError(layer, field, "too large: " + std::to_string(x));
  }
  return Status::Ok();
}

// a * b, or an error if it exceeds the per-sample element bound.
StatusOr<int64_t> BoundedProduct(const Layer& layer, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return LayerError(layer, "", "output shape " + ShapeToString(shape) + " is empty");
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements) {
      return LayerError(layer, "", "output shape " + ShapeToString(shape) + " is too large");
    }
  }
  return n;
}

Status RequireRank(const Layer& layer, const Shape& in, size_t rank, const char* what) {
  if (in.size() != rank) {
    return LayerError(layer, "inputs",
                      std::string("expects ") + what + ", got input shape " + ShapeToString(in));
  }
  return Status::Ok();
}

// Output length of a sliding window (conv or pool), as torch computes it.
int64_t WindowOutput(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                     bool ceil_mode) {
  int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // With ceil_mode the last window must start inside the input or its left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

struct Inferred {
  Shape shape;
  int64_t params = 0;
  int64_t flops = 0;
};

StatusOr<Inferred> InferWindow2d(const Layer& layer, const Shape& in, bool is_conv) {
  const LayerAttrs& a = layer.attrs;
  RETURN_IF_ERROR(RequireRank(layer, in, 3, "a [channels, height, width] input"));
  RETURN_IF_ERROR(CheckPair(layer, "kernel_size", a.kernel_size, false));
  RETURN_IF_ERROR(CheckPair(layer, "stride", a.stride, false));
  RETURN_IF_ERROR(CheckPair(layer, "padding", a.padding, true));
  RETURN_IF_ERROR(CheckPair(layer, "dilation", a.dilation, false));
  if (!is_conv) {
    for (int i = 0; i < 2; ++i) {
      if (a.padding[i] * 2 > a.kernel_size[i]) {
        return LayerError(layer, "padding", "must be at most half the kernel size");
      }
    }
  }
  Shape out(3);
  for (int i = 0; i < 2; ++i) {
    out[1 + i] = WindowOutput(in[1 + i], a.kernel_size[i], a.stride[i], a.padding[i], a.dilation[i],
                              !is_conv && a.ceil_mode);
    if (out[1 + i] <= 0) {
      return LayerError(layer, "kernel_size",
                        "window larger than the padded input " + ShapeToString(in));
    }
  }
  out[0] = in[0];
  return Inferred{out, 0, 0};
}

// A parameter tensor of rows x cols elements, or an error naming `field` if it is too large.
StatusOr<int64_t> TableSize(const Layer& layer, const std::string& field, int64_t rows,
                            int64_t cols) {
  int64_t n = 0;
  if (__builtin_mul_overflow(rows, cols, &n) || n > kMaxElements) {
    return LayerError(layer, field, "parameter table too large");
  }
  return n;
}

// nn.Embedding: token ids of any shape -> that shape + [embedding_dim]; a gather, no math.
StatusOr<Inferred> InferEmbedding(const Layer& layer, const Shape& in) {
  const LayerAttrs& a = layer.attrs;
  RETURN_IF_ERROR(CheckPositive(layer, "num_embeddings", a.num_embeddings));
  RETURN_IF_ERROR(CheckPositive(layer, "embedding_dim", a.embedding_dim));
  Inferred r;
  r.shape = in;
  r.shape.push_back(a.embedding_dim);
  ASSIGN_OR_RETURN(r.params, TableSize(layer, "num_embeddings", a.num_embeddings, a.embedding_dim));
  return r;
}

// GPT-2's wpe added to its input: [T, D] + weight[:T], so T <= max_positions.
StatusOr<Inferred> InferPositionEmbedding(const Layer& layer, const Shape& in) {
  const LayerAttrs& a = layer.attrs;
  RETURN_IF_ERROR(RequireRank(layer, in, 2, "a [tokens, features] input"));
  RETURN_IF_ERROR(CheckPositive(layer, "max_positions", a.max_positions));
  if (a.embedding_dim < 0) return LayerError(layer, "embedding_dim", "must not be negative");
  if (a.embedding_dim != 0 && a.embedding_dim != in[1]) {
    return LayerError(layer, "embedding_dim",
                      "is " + std::to_string(a.embedding_dim) + " but the input " +
                          ShapeToString(in) + " has " + std::to_string(in[1]) + " features");
  }
  if (in[0] > a.max_positions || (a.bare_parameter && in[0] != a.max_positions)) {
    return LayerError(layer, "max_positions",
                      "is " + std::to_string(a.max_positions) + " but the input " +
                          ShapeToString(in) + " has " + std::to_string(in[0]) + " tokens" +
                          (a.bare_parameter ? " (a bare parameter is added whole)" : ""));
  }
  Inferred r;
  r.shape = in;
  ASSIGN_OR_RETURN(r.params, TableSize(layer, "max_positions", a.max_positions, in[1]));
  r.flops = NumElements(in);
  return r;
}

// A dimension as torch numbers it (the batch is 0; negative counts from the end) of a tensor with
// per-sample shape `in`, as an index into `in`; the batch and dimensions past the end are refused.
StatusOr<size_t> PerSampleDim(const Layer& layer, const std::string& field, int64_t dim,
                              const Shape& in) {
  const int64_t rank = static_cast<int64_t>(in.size()) + 1;  // with the batch
  const int64_t d = dim < 0 ? dim + rank : dim;
  if (d < 1 || d >= rank) {
    return LayerError(layer, field,
                      std::to_string(dim) + " does not name a dimension after the batch of a " +
                          "tensor of per-sample shape " + ShapeToString(in) +
                          " (dimensions count the batch as 0)");
  }
  return static_cast<size_t>(d - 1);
}

// torch.flatten(x, start_dim, end_dim): a view, no work.
StatusOr<Inferred> InferFlatten(const Layer& layer, const Shape& in) {
  ASSIGN_OR_RETURN(const size_t first, PerSampleDim(layer, "start_dim", layer.attrs.start_dim, in));
  ASSIGN_OR_RETURN(const size_t last, PerSampleDim(layer, "end_dim", layer.attrs.end_dim, in));
  if (first > last) return LayerError(layer, "end_dim", "comes before start_dim");
  Inferred r;
  r.shape.assign(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(first));
  int64_t joined = 1;
  for (size_t i = first; i <= last; ++i) joined *= in[i];
  r.shape.push_back(joined);
  r.shape.insert(r.shape.end(), in.begin() + static_cast<std::ptrdiff_t>(last) + 1, in.end());
  return r;
}

// torch.transpose(x, dim0, dim1) (materialised: the runtime makes it contiguous).
StatusOr<Inferred> InferTranspose(const Layer& layer, const Shape& in) {
  ASSIGN_OR_RETURN(const size_t d0, PerSampleDim(layer, "dim0", layer.attrs.dim0, in));
  ASSIGN_OR_RETURN(const size_t d1, PerSampleDim(layer, "dim1", layer.attrs.dim1, in));
  Inferred r;
  r.shape = in;
  std::swap(r.shape[d0], r.shape[d1]);
  return r;
}

// torch.select(x, dim, index) and torch.mean(x, dim): the dimension goes away. The input keeps at
// least one other dimension, so the output is never a per-sample scalar.
StatusOr<Inferred> InferReduceDim(const Layer& layer, const Shape& in) {
  if (in.size() < 2) {
    return LayerError(layer, "inputs",
                      "expects at least 2 dimensions per sample, got " + ShapeToString(in));
  }
  ASSIGN_OR_RETURN(const size_t d, PerSampleDim(layer, "dim", layer.attrs.dim, in));
  Inferred r;
  r.shape = in;
  r.shape.erase(r.shape.begin() + static_cast<std::ptrdiff_t>(d));
  if (layer.op == Op::kSelect) {
    const int64_t size = in[d];
    if (layer.attrs.index < -size || layer.attrs.index >= size) {
      return LayerError(layer, "index",
                        std::to_string(layer.attrs.index) + " is outside a dimension of size " +
                            std::to_string(size));
    }
  } else {
    r.flops = NumElements(in);
  }
  return r;
}

// torchvision ViT's class token: a learned [1, 1, D] prepended to [T, D] -> [T + 1, D].
StatusOr<Inferred> InferClassToken(const Layer& layer, const Shape& in) {
  RETURN_IF_ERROR(RequireRank(layer, in, 2, "a [tokens, embed_dim] input"));
  const int64_t embed_dim = layer.attrs.embed_dim;
  if (embed_dim < 0) return LayerError(layer, "embed_dim", "must not be negative");
  if (embed_dim != 0 && embed_dim != in[1]) {
    return LayerError(layer, "embed_dim",
                      "is " + std::to_string(embed_dim) + " but the input " + ShapeToString(in) +
                          " has " + std::to_string(in[1]) + " features");
  }
  Inferred r;
  r.shape = {in[0] + 1, in[1]};
  r.params = in[1];
  return r;
}

// nn.MultiheadAttention(embed_dim, num_heads, dropout, bias, batch_first=True) as self-attention
// on [T, D]. FLOPs per sample: the in-projection 2*T*D*3D, QK^T and AV 2*T*T*D each (all of
// T x T even when causal: the mask is applied, not skipped), scale and softmax 4*H*T*T, the
// out-projection 2*T*D*D, and the biases 3*T*D + T*D.
StatusOr<Inferred> InferMultiheadAttention(const Layer& layer, const Shape& in) {
  const LayerAttrs& a = layer.attrs;
  RETURN_IF_ERROR(RequireRank(layer, in, 2, "a [tokens, embed_dim] input"));
  const int64_t tokens = in[0];
  const int64_t dim = in[1];
  if (a.embed_dim < 0) return LayerError(layer, "embed_dim", "must not be negative");
  if (a.embed_dim != 0 && a.embed_dim != dim) {
    return LayerError(layer, "embed_dim",
                      "is " + std::to_string(a.embed_dim) + " but the input " + ShapeToString(in) +
                          " has " + std::to_string(dim) + " features");
  }
  RETURN_IF_ERROR(CheckPositive(layer, "num_heads", a.num_heads));
  if (dim % a.num_heads != 0) {
    return LayerError(
        layer, "num_heads",
        std::to_string(a.num_heads) + " does not divide embed_dim " + std::to_string(dim));
  }
  if (!(a.dropout >= 0 && a.dropout < 1)) return LayerError(layer, "dropout", "must be in [0, 1)");
  const long double t = static_cast<long double>(tokens), d = static_cast<long double>(dim);
  if (8.0L * t * d * d + 4.0L * t * t * d + 4.0L * a.num_heads * t * t > 1e18L) {
    return LayerError(layer, "inputs", "attention over " + ShapeToString(in) + " is too large");
  }
  ASSIGN_OR_RETURN(const int64_t square, TableSize(layer, "embed_dim", dim, dim));
  if (square > kMaxElements / 4) return LayerError(layer, "embed_dim", "weights too large");
  Inferred r;
  r.shape = in;
  r.params = 4 * square + (a.bias ? 4 * dim : 0);
  r.flops = 8 * tokens * square + 4 * tokens * tokens * dim + 4 * a.num_heads * tokens * tokens +
            (a.bias ? 4 * tokens * dim : 0);
  return r;
}

StatusOr<Inferred> InferLayer(const Layer& layer, const std::vector<const Shape*>& inputs) {
  const LayerAttrs& a = layer.attrs;
  const Shape& in = *inputs.front();
  Inferred r;
  switch (layer.op) {
    case Op::kConv2d: {
      RETURN_IF_ERROR(CheckPositive(layer, "out_channels", a.out_channels));
      RETURN_IF_ERROR(CheckPositive(layer, "groups", a.groups));
      if (a.in_channels < 0) return LayerError(layer, "in_channels", "must not be negative");
      ASSIGN_OR_RETURN(r, InferWindow2d(layer, in, /*is_conv=*/true));
      const int64_t channels = in[0];
      if (a.in_channels != 0 && a.in_channels != channels) {
        return LayerError(layer, "in_channels",
                          "is " + std::to_string(a.in_channels) + " but the input has " +
                              std::to_string(channels) + " channels " + ShapeToString(in));
      }
      if (channels % a.groups != 0 || a.out_channels % a.groups != 0) {
        return LayerError(layer, "groups", "must divide in and out channels");
      }
      r.shape[0] = a.out_channels;
      const int64_t channels_per_group = channels / a.groups;  // exact: checked above
      const long double approx_flops = 2.0L * channels_per_group * a.kernel_size[0] *
                                       a.kernel_size[1] * a.out_channels * r.shape[1] * r.shape[2];
      if (approx_flops > 1e18L) return LayerError(layer, "kernel_size", "layer too large");
      const int64_t per_output = channels_per_group * a.kernel_size[0] * a.kernel_size[1];
      r.params = a.out_channels * per_output + (a.bias ? a.out_channels : 0);
      const int64_t out_positions = r.shape[1] * r.shape[2];
      r.flops = 2 * per_output * a.out_channels * out_positions +
                (a.bias ? a.out_channels * out_positions : 0);
      break;
    }
    case Op::kMaxPool2d:
    case Op::kAvgPool2d: {
      ASSIGN_OR_RETURN(r, InferWindow2d(layer, in, /*is_conv=*/false));
      if (layer.op == Op::kAvgPool2d && a.dilation != std::array<int64_t, 2>{1, 1}) {
        return LayerError(layer, "dilation", "avgpool2d has no dilation");
      }
      r.flops = r.shape[0] * r.shape[1] * r.shape[2] * a.kernel_size[0] * a.kernel_size[1];
      break;
    }
    case Op::kAdaptiveAvgPool2d: {
      RETURN_IF_ERROR(RequireRank(layer, in, 3, "a [channels, height, width] input"));
      RETURN_IF_ERROR(CheckPair(layer, "output_size", a.output_size, false));
      r.shape = {in[0], a.output_size[0], a.output_size[1]};
      r.flops = NumElements(in);
      break;
    }
    case Op::kBatchNorm2d: {
      RETURN_IF_ERROR(RequireRank(layer, in, 3, "a [channels, height, width] input"));
      if (!(a.eps > 0)) return LayerError(layer, "eps", "must be positive");
      if (!(a.momentum >= 0 && a.momentum <= 1)) {
        return LayerError(layer, "momentum", "must be in [0, 1]");
      }
      r.shape = in;
      r.params = a.affine ? 2 * in[0] : 0;
      r.flops = 4 * NumElements(in);
      break;
    }
    case Op::kLayerNorm: {
      if (!(a.eps > 0)) return LayerError(layer, "eps", "must be positive");
      if (a.normalized_shape.empty() || a.normalized_shape.size() > in.size()) {
        return LayerError(layer, "normalized_shape",
                          "must name 1 to " + std::to_string(in.size()) +
                              " trailing dimensions of the input " + ShapeToString(in));
      }
      const size_t offset = in.size() - a.normalized_shape.size();
      int64_t normalized = 1;
      for (size_t i = 0; i < a.normalized_shape.size(); ++i) {
        if (a.normalized_shape[i] != in[offset + i]) {
          return LayerError(
              layer, "normalized_shape",
              "does not match the trailing dimensions of the input " + ShapeToString(in));
        }
        normalized *= in[offset + i];
      }
      r.shape = in;
      r.params = a.affine ? 2 * normalized : 0;
      r.flops = 5 * NumElements(in);
      break;
    }
    case Op::kLinear: {
      RETURN_IF_ERROR(CheckPositive(layer, "out_features", a.out_features));
      if (a.in_features < 0) return LayerError(layer, "in_features", "must not be negative");
      const int64_t features = in.back();
      if (a.in_features != 0 && a.in_features != features) {
        return LayerError(layer, "in_features",
                          "is " + std::to_string(a.in_features) + " but the input " +
                              ShapeToString(in) + " has " + std::to_string(features));
      }
      r.shape = in;
      r.shape.back() = a.out_features;
      int64_t rows = NumElements(in) / features;
      int64_t params = 0;
      if (__builtin_mul_overflow(features, a.out_features, &params) || params > kMaxElements) {
        return LayerError(layer, "out_features", "weight matrix too large");
      }
      r.params = params + (a.bias ? a.out_features : 0);
      r.flops = 2 * rows * params + (a.bias ? rows * a.out_features : 0);
      break;
    }
    case Op::kFlatten:
      return InferFlatten(layer, in);
    case Op::kTranspose:
      return InferTranspose(layer, in);
    case Op::kSelect:
    case Op::kMean:
      return InferReduceDim(layer, in);
    case Op::kClassToken:
      return InferClassToken(layer, in);
    case Op::kRelu:
      r.shape = in;
      r.flops = NumElements(in);
      break;
    case Op::kGelu:
      if (a.approximate != "none" && a.approximate != "tanh") {
        return LayerError(layer, "approximate",
                          "must be \"none\" or \"tanh\", got " + Quote(a.approximate));
      }
      r.shape = in;
      r.flops = 8 * NumElements(in);
      break;
    case Op::kEmbedding:
      return InferEmbedding(layer, in);
    case Op::kPositionEmbedding:
      return InferPositionEmbedding(layer, in);
    case Op::kMultiheadAttention:
      return InferMultiheadAttention(layer, in);
    case Op::kDropout:
      if (!(a.p >= 0 && a.p < 1)) return LayerError(layer, "p", "must be in [0, 1)");
      r.shape = in;
      r.flops = a.p > 0 ? NumElements(in) : 0;  // p = 0 hands the input on
      break;
    case Op::kConcat: {
      r.shape = in;
      r.shape[0] = 0;
      for (const Shape* s : inputs) {
        bool same_rest =
            s->size() == in.size() && std::equal(s->begin() + 1, s->end(), in.begin() + 1);
        if (!same_rest) {
          return LayerError(layer, "inputs",
                            "concat needs inputs equal in all but the channel dimension, got " +
                                ShapeToString(in) + " and " + ShapeToString(*s));
        }
        r.shape[0] += (*s)[0];
      }
      break;
    }
    case Op::kAdd:
      for (const Shape* s : inputs) {
        if (*s != in) {
          return LayerError(layer, "inputs",
                            "add needs inputs of equal shape, got " + ShapeToString(in) + " and " +
                                ShapeToString(*s));
        }
      }
      r.shape = in;
      r.flops = static_cast<int64_t>(inputs.size() - 1) * NumElements(in);
      break;
  }
  return r;
}

Status CheckArity(const Layer& layer) {
  const size_t n = layer.inputs.size();
  const bool variadic = layer.op == Op::kConcat || layer.op == Op::kAdd;
  if (n == 0) return LayerError(layer, "inputs", "missing: the layer names no input");
  if (variadic && n < 2) {
    return LayerError(layer, "inputs", "needs at least 2 inputs, got " + std::to_string(n));
  }
  if (!variadic && n != 1) {
    return LayerError(layer, "inputs", "takes exactly 1 input, got " + std::to_string(n));
  }
  return Status::Ok();
}

}  // namespace

const char* OpName(Op op) {
  for (const auto& info : kOps) {
    if (info.op == op) return info.name;
  }
  return "unknown";
}

std::optional<Op> OpFromName(std::string_view name) {
  for (const auto& info : kOps) {
    if (name == info.name) return info.op;
  }
  return std::nullopt;
}

std::vector<Op> AllOps() {
  std::vector<Op> ops;
  for (const auto& info : kOps) ops.push_back(info.op);
  return ops;
}

std::string ShapeToString(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kInt64:
      return "int64";
  }
  return "unknown";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  if (name == "float32") return DType::kFloat32;
  if (name == "int64") return DType::kInt64;
  return std::nullopt;
}

int64_t DTypeBytes(DType dtype) { return dtype == DType::kInt64 ? 8 : 4; }

bool LayerAttrs::operator==(const LayerAttrs& o) const {
  return in_channels == o.in_channels && out_channels == o.out_channels &&
         kernel_size == o.kernel_size && stride == o.stride && padding == o.padding &&
         dilation == o.dilation && groups == o.groups && bias == o.bias &&
         ceil_mode == o.ceil_mode && count_include_pad == o.count_include_pad &&
         output_size == o.output_size && in_features == o.in_features &&
         out_features == o.out_features && eps == o.eps && momentum == o.momentum &&
         affine == o.affine && normalized_shape == o.normalized_shape && p == o.p &&
         approximate == o.approximate && num_embeddings == o.num_embeddings &&
         embedding_dim == o.embedding_dim && max_positions == o.max_positions &&
         embed_dim == o.embed_dim && num_heads == o.num_heads && causal == o.causal &&
         dropout == o.dropout && start_dim == o.start_dim && end_dim == o.end_dim &&
         dim0 == o.dim0 && dim1 == o.dim1 && dim == o.dim && index == o.index &&
         bare_parameter == o.bare_parameter;
}

namespace {

Status CheckInputShape(const Shape& input_shape) {
  if (input_shape.empty()) {
    return InvalidArgumentError("graph input: field \"shape\": must have at least 1 dimension");
  }
  for (int64_t d : input_shape) {
    if (d <= 0 || d > kMaxDim) {
      return InvalidArgumentError("graph input: field \"shape\": dimensions must be in [1, " +
                                  std::to_string(kMaxDim) + "], got " + ShapeToString(input_shape));
    }
  }
  int64_t n = 1;
  for (int64_t d : input_shape) {
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements) {
      return InvalidArgumentError("graph input: field \"shape\": too large");
    }
  }
  return Status::Ok();
}

// Names: present, unique, distinct from the graph input's name. Fills *index_of.
Status IndexNames(const std::vector<Layer>& layers,
                  std::unordered_map<std::string, int>* index_of) {
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = layers[i];
    if (layer.name.empty()) {
      return InvalidArgumentError("layer #" + std::to_string(i) + " (" + OpName(layer.op) +
                                  "): field \"name\": missing");
    }
    if (layer.name == kGraphInputName) {
      return LayerError(layer, "name", "\"input\" is reserved for the graph input");
    }
    if (!index_of->emplace(layer.name, static_cast<int>(i)).second) {
      return LayerError(layer, "name",
                        "duplicate name: another layer is also called " + Quote(layer.name));
    }
  }
  return Status::Ok();
}

// Topological order, stable: a min-heap of ready layers by their given position. Counts
// *pending down; layers left with inputs pending are on (or behind) a cycle.
std::vector<int> StableTopologicalOrder(const std::vector<std::vector<int>>& given_consumers,
                                        std::vector<int>* pending) {
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < pending->size(); ++i) {
    if ((*pending)[i] == 0) ready.push(static_cast<int>(i));
  }
  std::vector<int> order;
  order.reserve(pending->size());
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int consumer : given_consumers[i]) {
      if (--(*pending)[consumer] == 0) ready.push(consumer);
    }
  }
  return order;
}

// Names one cycle: walks back along unfinished inputs from any stuck layer until one repeats.
Status CycleError(const std::vector<Layer>& layers,
                  const std::vector<std::vector<int>>& given_inputs,
                  const std::vector<int>& pending) {
  int at = 0;
  while (pending[at] == 0) ++at;
  std::vector<int> path;
  std::unordered_map<int, size_t> seen;
  while (!seen.count(at)) {
    seen[at] = path.size();
    path.push_back(at);
    for (int input : given_inputs[at]) {
      if (input != kGraphInputId && pending[input] != 0) {
        at = input;
        break;
      }
    }
  }
  std::string cycle;
  for (size_t k = seen[at]; k < path.size(); ++k) {
    cycle.insert(0, " <- ").insert(0, layers[path[k]].name);
  }
  cycle += layers[at].name;
  return LayerError(layers[at], "inputs", "cycle: " + cycle);
}

// Token ids (an int64 input) go to embeddings only, and embeddings read nothing else.
Status CheckInputDtype(const Layer& layer, const std::vector<int>& input_ids, DType input_dtype) {
  const bool reads_input =
      std::find(input_ids.begin(), input_ids.end(), kGraphInputId) != input_ids.end();
  if (layer.op == Op::kEmbedding) {
    if (!reads_input || input_dtype != DType::kInt64) {
      return LayerError(layer, "inputs",
                        "an embedding reads int64 token ids: its input must be the graph input "
                        "with input_dtype int64");
    }
  } else if (reads_input && input_dtype == DType::kInt64) {
    return LayerError(layer, "inputs",
                      "reads the graph's int64 token ids, which only embedding layers take");
  }
  return Status::Ok();
}

Status CheckOutputs(const Graph& graph, const std::vector<GraphOutput>& outputs) {
  std::unordered_set<std::string> output_names;
  for (const GraphOutput& output : outputs) {
    if (!graph.FindLayer(output.layer)) {
      return InvalidArgumentError("graph: field \"outputs\": unknown layer " + Quote(output.layer));
    }
    if (!output_names.insert(output.layer).second) {
      return InvalidArgumentError("graph: field \"outputs\": " + Quote(output.layer) +
                                  " is listed twice");
    }
    if (!(output.loss_weight > 0)) {
      return InvalidArgumentError("graph: field \"outputs\": loss_weight of " +
                                  Quote(output.layer) + " must be positive");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Graph> Graph::Create(std::string name, Shape input_shape, std::vector<Layer> layers,
                              std::vector<GraphOutput> outputs, DType input_dtype) {
  RETURN_IF_ERROR(CheckInputShape(input_shape));
  if (layers.empty()) return InvalidArgumentError("graph: field \"layers\": no layers");
  std::unordered_map<std::string, int> index_of;
  RETURN_IF_ERROR(IndexNames(layers, &index_of));

  // Inputs exist; arity matches the op.
  std::vector<std::vector<int>> given_inputs(layers.size());
  std::vector<int> pending(layers.size(), 0);
  std::vector<std::vector<int>> given_consumers(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = layers[i];
    RETURN_IF_ERROR(CheckArity(layer));
    for (const std::string& input : layer.inputs) {
      if (input == kGraphInputName) {
        given_inputs[i].push_back(kGraphInputId);
        continue;
      }
      auto it = index_of.find(input);
      if (it == index_of.end()) {
        return LayerError(layer, "inputs", "unknown input " + Quote(input));
      }
      if (it->second == static_cast<int>(i)) {
        return LayerError(layer, "inputs", "cycle: the layer reads its own output");
      }
      given_inputs[i].push_back(it->second);
      given_consumers[it->second].push_back(static_cast<int>(i));
      ++pending[i];
    }
  }

  std::vector<int> order = StableTopologicalOrder(given_consumers, &pending);
  if (order.size() != layers.size()) return CycleError(layers, given_inputs, pending);

  Graph graph;
  graph.name_ = std::move(name);
  graph.input_shape_ = std::move(input_shape);
  graph.input_dtype_ = input_dtype;
  std::vector<int> new_id(layers.size());
  for (size_t k = 0; k < order.size(); ++k) new_id[order[k]] = static_cast<int>(k);
  graph.layers_.reserve(layers.size());
  for (int old : order) {
    Layer layer = std::move(layers[old]);
    layer.input_ids.clear();
    for (int input : given_inputs[old]) {
      layer.input_ids.push_back(input == kGraphInputId ? kGraphInputId : new_id[input]);
    }
    graph.layers_.push_back(std::move(layer));
  }

  // Shapes and costs, in topological order.
  for (Layer& layer : graph.layers_) {
    RETURN_IF_ERROR(CheckInputDtype(layer, layer.input_ids, input_dtype));
    std::vector<const Shape*> input_shapes;
    for (int id : layer.input_ids) {
      input_shapes.push_back(id == kGraphInputId ? &graph.input_shape_
                                                 : &graph.layers_[id].output_shape);
    }
    ASSIGN_OR_RETURN(Inferred inferred, InferLayer(layer, input_shapes));
    ASSIGN_OR_RETURN(int64_t elements, BoundedProduct(layer, inferred.shape));
    layer.output_shape = std::move(inferred.shape);
    layer.params = inferred.params;
    layer.forward_flops = inferred.flops;
    layer.output_bytes = elements * 4;
  }

  RETURN_IF_ERROR(ResolveTiedParameters(graph.layers_, graph.input_shape_));
  for (size_t i = 0; i < graph.layers_.size(); ++i) {
    graph.index_.emplace(graph.layers_[i].name, static_cast<int>(i));
  }
  graph.consumers_.assign(graph.layers_.size(), {});
  for (size_t i = 0; i < graph.layers_.size(); ++i) {
    for (int id : graph.layers_[i].input_ids) {
      if (id != kGraphInputId) graph.consumers_[id].push_back(static_cast<int>(i));
    }
  }

  if (outputs.empty()) {
    std::vector<int> sinks;
    for (size_t i = 0; i < graph.layers_.size(); ++i) {
      if (graph.consumers_[i].empty()) sinks.push_back(static_cast<int>(i));
    }
    if (sinks.size() != 1) {
      return InvalidArgumentError("graph: field \"outputs\": " + std::to_string(sinks.size()) +
                                  " layers have no consumer; name the outputs explicitly");
    }
    outputs.push_back({graph.layers_[sinks[0]].name, 1.0});
  }
  RETURN_IF_ERROR(CheckOutputs(graph, outputs));
  graph.outputs_ = std::move(outputs);
  return graph;
}

std::optional<int> Graph::FindLayer(std::string_view name) const {
  auto it = index_.find(std::string(name));
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

std::vector<int> Graph::output_ids() const {
  std::vector<int> ids;
  for (const GraphOutput& output : outputs_) ids.push_back(*FindLayer(output.layer));
  return ids;
}

int64_t Graph::total_params() const {
  int64_t total = 0;
  for (const Layer& layer : layers_) {
    total += layer.params;
    for (const TiedParameter& tie : layer.tied) total -= tie.elements;
  }
  return total;
}

int64_t Graph::total_forward_flops() const {
  int64_t total = 0;
  for (const Layer& layer : layers_) total += layer.forward_flops;
  return total;
}

}  // namespace deepool::planner
