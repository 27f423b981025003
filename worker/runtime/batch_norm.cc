#include "worker/runtime/batch_norm.h"

#include <stdexcept>
#include <utility>
#include <vector>

namespace deepool::worker {
namespace {

// What the autograd node needs beyond its differentiable inputs: the group sum and the layer's
// running statistics and constants.
struct SyncBatchNormState final : torch::CustomClassHolder {
  SyncBatchNormState(GroupSum fn, const BatchNormArgs& batch_norm)
      : sum(std::move(fn)), args(batch_norm) {}
  GroupSum sum;
  BatchNormArgs args;
};

void SumOrThrow(const GroupSum& sum, torch::Tensor& tensor) {
  Status status = sum(tensor);
  if (!status.ok()) throw std::runtime_error(status.ToString());
}

// Moves `running` towards `batch` by `momentum`, in float64 as torch's CPU kernel does.
void UpdateRunning(const torch::Tensor& running, const torch::Tensor& batch, double momentum) {
  if (!running.defined()) return;
  running.copy_(running.to(torch::kFloat64) * (1.0 - momentum) + batch * momentum);
}

// [1, C, 1, ...] for broadcasting a per-channel vector against an input of `dims` dimensions.
std::vector<int64_t> ChannelShape(int64_t dims, int64_t channels) {
  std::vector<int64_t> shape(static_cast<size_t>(dims), 1);
  shape[1] = channels;
  return shape;
}

// The group's statistics for one call, in float64.
struct GroupMoments {
  torch::Tensor mean, var, count;  // [C], [C] (biased), [1]
};

// Local moments from torch's fused statistics kernel (accurate away from zero: at mean 1e4 and
// variance 1 its float32 variance matched float64's to the digits printed), turned into float64
// sums and summed over the group: the global variance E[x^2] - mean^2 then cancels in float64,
// not in float32.
GroupMoments SumMoments(const torch::Tensor& input, const GroupSum& sum) {
  const int64_t channels = input.size(1);
  const double count = static_cast<double>(input.numel() / channels);
  auto [local_mean, local_var] = at::batch_norm_update_stats(input, {}, {}, /*momentum=*/0.0);
  torch::Tensor mean64 = local_mean.to(torch::kFloat64);
  torch::Tensor var64 = local_var.to(torch::kFloat64);
  torch::Tensor stats = torch::cat({mean64 * count, (var64 + mean64.square()) * count,
                                    torch::full({1}, count, mean64.options())});
  SumOrThrow(sum, stats);
  GroupMoments moments;
  moments.count = stats.narrow(0, 2 * channels, 1);
  moments.mean = stats.narrow(0, 0, channels) / moments.count;
  moments.var =
      (stats.narrow(0, channels, channels) / moments.count - moments.mean.square()).clamp_min(0.0);
  return moments;
}

// Forward and backward of synchronised batch norm as one autograd node, on torch's fused
// inference kernels: the forward is an inference-mode batch norm with the group's statistics,
// the backward an inference-mode batch norm backward (which yields this rank's sums of dy and
// dy * (x - mean)) plus the two terms that flow through the statistics, from the group's sums.
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const c10::intrusive_ptr<SyncBatchNormState>& state) {
    GroupMoments moments = SumMoments(input, state->sum);
    // In the parameters' dtype, as torch's kernels take statistics beside a lower-precision input.
    torch::Tensor mean = moments.mean.to(weight.scalar_type());
    torch::Tensor var = moments.var.to(weight.scalar_type());
    torch::Tensor output = std::get<0>(at::native_batch_norm(
        input, weight, bias, mean, var, /*training=*/false, /*momentum=*/0.0, state->args.eps));

    // torch's running variance is unbiased over the batch it saw: here the group's n samples.
    const double momentum = state->args.momentum;
    UpdateRunning(state->args.running_mean, moments.mean, momentum);
    UpdateRunning(state->args.running_var, moments.var * moments.count / (moments.count - 1.0),
                  momentum);

    ctx->save_for_backward({input, weight});
    ctx->saved_data["state"] =
        c10::IValue::make_capsule(c10::intrusive_ptr<torch::CustomClassHolder>(state));
    ctx->saved_data["mean"] = mean;
    ctx->saved_data["var"] = var;
    ctx->saved_data["mean64"] = moments.mean;
    ctx->saved_data["invstd64"] = (moments.var + state->args.eps).rsqrt();
    ctx->saved_data["count"] = moments.count;
    return output;
  }

  // With x_hat = (x - mean) * invstd over the group's n samples, and sums over the group:
  //   dx = weight * invstd * (dy - sum(dy) / n - x_hat * sum(dy * x_hat) / n)
  // dweight and dbias are this rank's sums (the executor sums parameter gradients over the set).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto state = c10::static_intrusive_pointer_cast<SyncBatchNormState>(
        ctx->saved_data["state"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor dy = grads[0].contiguous();
    const int64_t channels = input.size(1);
    const torch::Tensor invstd = ctx->saved_data["invstd64"].toTensor();
    const torch::Tensor mean = ctx->saved_data["mean64"].toTensor();
    const torch::Tensor count = ctx->saved_data["count"].toTensor();

    // The inference backward's weight gradient is sum(dy * x_hat), its bias gradient sum(dy).
    // Empty (not undefined) saved statistics: the CUDA kernel asserts they are defined and, when
    // empty, takes the running ones, as it does for cuDNN's inference batch norm.
    const torch::Tensor none = torch::empty({0}, invstd.options().dtype(weight.scalar_type()));
    auto [unused, dweight, dbias] = at::native_batch_norm_backward(
        dy, input, weight, ctx->saved_data["mean"].toTensor(), ctx->saved_data["var"].toTensor(),
        /*save_mean=*/none, /*save_invstd=*/none, /*train=*/false, state->args.eps,
        {false, true, true});
    torch::Tensor sums = torch::cat({dbias.to(torch::kFloat64), dweight.to(torch::kFloat64)});
    SumOrThrow(state->sum, sums);
    torch::Tensor mean_dy = sums.narrow(0, 0, channels) / count;
    torch::Tensor mean_dy_xhat = sums.narrow(0, channels, channels) / count;

    // dx = k * dy + a * x + b per channel, from the formula above with x_hat = (x - mean) * invstd.
    torch::Tensor k = weight.to(torch::kFloat64) * invstd;
    torch::Tensor a = -k * invstd * mean_dy_xhat;
    torch::Tensor b = -k * mean_dy - a * mean;
    const auto shape = ChannelShape(input.dim(), channels);
    const auto dtype = input.scalar_type();
    torch::Tensor dx = at::addcmul(b.to(dtype).view(shape), input, a.to(dtype).view(shape));
    dx.addcmul_(dy, k.to(dtype).view(shape));

    const BatchNormArgs& args = state->args;
    return {dx, args.weight.defined() ? dweight : torch::Tensor(),
            args.bias.defined() ? dbias : torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor SyncBatchNormTrain(const torch::Tensor& input, const BatchNormArgs& args,
                                 const GroupSum& group_sum) {
  TORCH_CHECK(input.dim() >= 2, "batch norm expects [N, C, ...], got ", input.sizes());
  // An autograd node's inputs must be defined: without affine parameters the layer is the
  // identity transform, whose gradients the node does not return.
  const int64_t channels = input.size(1);
  torch::Tensor weight =
      args.weight.defined() ? args.weight : torch::ones({channels}, input.options());
  torch::Tensor bias = args.bias.defined() ? args.bias : torch::zeros({channels}, input.options());
  auto state = c10::make_intrusive<SyncBatchNormState>(group_sum, args);
  return SyncBatchNormFunction::apply(input, weight, bias, state);
}

}  // namespace deepool::worker
