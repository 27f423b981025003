#include "worker/runtime/layers/batch_norm.h"

#include <ATen/AccumulateType.h>

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
// sums [count * mean, count * E[x^2], count] and summed over the group: the global variance
// E[x^2] - mean^2 then cancels in float64, not in float32.
torch::Tensor SummedMoments(const torch::Tensor& input, const GroupSum& sum) {
  const int64_t channels = input.size(1);
  const double count = static_cast<double>(input.numel() / channels);
  auto [local_mean, local_var] = at::batch_norm_update_stats(input, {}, {}, /*momentum=*/0.0);
  torch::Tensor stats =
      torch::empty({2 * channels + 1}, local_mean.options().dtype(torch::kFloat64));
  torch::Tensor moments = stats.narrow(0, 0, 2 * channels).view({2, channels});
  moments.copy_(torch::stack({local_mean, local_var}));
  moments[1].addcmul_(moments[0], moments[0]);  // E[x^2] = var + mean^2
  moments.mul_(count);
  stats.narrow(0, 2 * channels, 1).fill_(count);
  SumOrThrow(sum, stats);
  return stats;
}

// The group's mean and biased variance from SummedMoments.
GroupMoments SumMoments(const torch::Tensor& input, const GroupSum& sum) {
  const int64_t channels = input.size(1);
  torch::Tensor stats = SummedMoments(input, sum);
  GroupMoments moments;
  moments.count = stats.narrow(0, 2 * channels, 1);
  moments.mean = stats.narrow(0, 0, channels) / moments.count;
  moments.var =
      (stats.narrow(0, channels, channels) / moments.count - moments.mean.square()).clamp_min(0.0);
  return moments;
}

// CUDA: torch's fused kernels of torch.nn.SyncBatchNorm (statistics with the running update,
// elementwise forward, backward reduction and elementwise backward): about twenty launches a
// layer where the generic path below issues about fifty small ones; the group's moments are
// still summed in float64. State saved for FusedBackward: mean and invstd (accumulate type), count
// (int32).
torch::Tensor FusedForward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                           const torch::Tensor& weight, const torch::Tensor& bias,
                           const SyncBatchNormState& state) {
  const BatchNormArgs& args = state.args;
  const int64_t channels = input.size(1);
  torch::Tensor stats = SummedMoments(input, state.sum);
  torch::Tensor count = stats.narrow(0, 2 * channels, 1);
  // Rows mean and E[x^2], then mean and invstd, in float64.
  torch::Tensor global = stats.narrow(0, 0, 2 * channels).view({2, channels}) / count;
  global[1].addcmul_(global[0], global[0], -1).clamp_min_(0.0).add_(args.eps).rsqrt_();
  const auto acc = at::toAccumulateType(input.scalar_type(), /*is_cuda=*/true);
  torch::Tensor group = global.to(acc);
  // As one "rank" holding the group's n samples: the kernel moves the running statistics towards
  // the mean and the unbiased variance var * n / (n - 1), as torch's batch norm does.
  const auto counts_type = args.running_mean.defined() ? args.running_mean.scalar_type() : acc;
  auto [mean, invstd] = at::batch_norm_gather_stats_with_counts(
      input, group.narrow(0, 0, 1), group.narrow(0, 1, 1), args.running_mean, args.running_var,
      args.momentum, args.eps, count.to(counts_type));
  ctx->saved_data["mean"] = mean;
  ctx->saved_data["invstd"] = invstd;
  ctx->saved_data["count"] = count.to(torch::kInt);
  return at::batch_norm_elemt(input, weight, bias, mean, invstd, args.eps);
}

// dx from the group's sums of dy and dy * (x - mean) (summed in the accumulate type, as torch's
// SyncBatchNorm does); dweight and dbias are this rank's own.
torch::autograd::variable_list FusedBackward(torch::autograd::AutogradContext* ctx,
                                             const torch::Tensor& input,
                                             const torch::Tensor& weight, const torch::Tensor& dy,
                                             const GroupSum& sum) {
  const int64_t channels = input.size(1);
  const torch::Tensor mean = ctx->saved_data["mean"].toTensor();
  const torch::Tensor invstd = ctx->saved_data["invstd"].toTensor();
  const torch::Tensor w = weight.to(mean.scalar_type());
  auto [sum_dy, sum_dy_xmu, dweight, dbias] =
      at::batch_norm_backward_reduce(dy, input, mean, invstd, w, true, true, true);
  torch::Tensor sums = torch::cat({sum_dy, sum_dy_xmu});
  SumOrThrow(sum, sums);
  torch::Tensor dx = at::batch_norm_backward_elemt(
      dy, input, mean, invstd, w, sums.narrow(0, 0, channels), sums.narrow(0, channels, channels),
      ctx->saved_data["count"].toTensor());
  return {dx, dweight.to(weight.scalar_type()), dbias.to(weight.scalar_type())};
}

// Forward and backward of synchronised batch norm as one autograd node. On CUDA, FusedForward
// and FusedBackward. Elsewhere on torch's fused inference kernels: the forward is an inference-mode
// batch norm with the group's statistics, the backward an inference-mode batch norm backward (which
// yields this rank's sums of dy and dy * (x - mean)) plus the two terms that flow through the
// statistics, from the group's sums.
class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const c10::intrusive_ptr<SyncBatchNormState>& state) {
    ctx->save_for_backward({input, weight});
    ctx->saved_data["state"] =
        c10::IValue::make_capsule(c10::intrusive_ptr<torch::CustomClassHolder>(state));
    if (input.is_cuda()) return FusedForward(ctx, input, weight, bias, *state);
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
    const BatchNormArgs& args = state->args;
    if (input.is_cuda()) {
      torch::autograd::variable_list fused = FusedBackward(ctx, input, weight, dy, state->sum);
      return {fused[0], args.weight.defined() ? fused[1] : torch::Tensor(),
              args.bias.defined() ? fused[2] : torch::Tensor(), torch::Tensor()};
    }
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

    // dx = k * (dy - mean_dy - (x - mean) * invstd * mean_dy_xhat), k = weight * invstd, with
    // x - mean formed first, as torch's CPU kernel does: folded into a * x + b per channel, the
    // two terms cancel where a channel's mean is large against its spread, and the rounding of
    // a * x (relative to mean / std) reached 5e-5 of a CNN's weights after 5 SGD steps on two
    // ranks (tests/python/exact_training_test.py).
    const auto shape = ChannelShape(input.dim(), channels);
    const auto dtype = input.scalar_type();
    torch::Tensor k = weight.to(torch::kFloat64) * invstd;
    torch::Tensor projection = invstd * mean_dy_xhat;
    torch::Tensor dx = dy - mean_dy.to(dtype).view(shape);
    dx.sub_((input - mean.to(dtype).view(shape)).mul_(projection.to(dtype).view(shape)));
    dx.mul_(k.to(dtype).view(shape));

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
