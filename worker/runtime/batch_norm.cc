#include "worker/runtime/batch_norm.h"

#include <stdexcept>
#include <utility>
#include <vector>

namespace deepool::worker {
namespace {

// Carries the group sum into the autograd node (saved data holds only IValues).
struct GroupSumHolder final : torch::CustomClassHolder {
  explicit GroupSumHolder(GroupSum fn) : sum(std::move(fn)) {}
  GroupSum sum;
};

void SumOrThrow(const GroupSum& sum, torch::Tensor& tensor) {
  Status status = sum(tensor);
  if (!status.ok()) throw std::runtime_error(status.ToString());
}

// y = the sum of x over the group; its gradient is the sum of y's gradients over the group.
class GroupSumFunction : public torch::autograd::Function<GroupSumFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const c10::intrusive_ptr<GroupSumHolder>& holder) {
    ctx->saved_data["group_sum"] =
        c10::IValue::make_capsule(c10::intrusive_ptr<torch::CustomClassHolder>(holder));
    torch::Tensor summed = x.contiguous().clone();
    SumOrThrow(holder->sum, summed);
    return summed;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<GroupSumHolder>(
        ctx->saved_data["group_sum"].toCapsule());
    torch::Tensor summed = grads[0].contiguous().clone();
    SumOrThrow(holder->sum, summed);
    return {summed, torch::Tensor()};
  }
};

// Moves `running` towards `batch` by `momentum`, in float64 as torch's CPU kernel does.
void UpdateRunning(const torch::Tensor& running, const torch::Tensor& batch, double momentum) {
  if (!running.defined()) return;
  running.copy_(running.to(torch::kFloat64) * (1.0 - momentum) + batch * momentum);
}

}  // namespace

torch::Tensor SyncBatchNormTrain(const torch::Tensor& input, const BatchNormArgs& args,
                                 const GroupSum& group_sum) {
  TORCH_CHECK(input.dim() >= 2, "batch norm expects [N, C, ...], got ", input.sizes());
  const int64_t channels = input.size(1);
  std::vector<int64_t> dims{0};
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = channels;
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  const double count = static_cast<double>(input.numel() / channels);

  // Local moments in the input's dtype (two passes, accurate), sums in float64: the global
  // variance E[x^2] - mean^2 then cancels in float64, not in float32.
  auto [local_var, local_mean] = at::var_mean(input, dims, /*correction=*/0, /*keepdim=*/false);
  torch::Tensor mean64 = local_mean.to(torch::kFloat64);
  torch::Tensor var64 = local_var.to(torch::kFloat64);
  torch::Tensor stats = torch::cat({mean64 * count, (var64 + mean64.square()) * count,
                                    torch::full({1}, count, mean64.options())});
  torch::Tensor summed =
      GroupSumFunction::apply(stats, c10::make_intrusive<GroupSumHolder>(group_sum));
  torch::Tensor n = summed.narrow(0, 2 * channels, 1);
  torch::Tensor mean = summed.narrow(0, 0, channels) / n;
  torch::Tensor var = (summed.narrow(0, channels, channels) / n - mean.square()).clamp_min(0.0);
  torch::Tensor invstd = (var + args.eps).rsqrt();

  torch::Tensor output = (input - mean.to(input.scalar_type()).view(shape)) *
                         invstd.to(input.scalar_type()).view(shape);
  if (args.weight.defined()) output = output * args.weight.view(shape);
  if (args.bias.defined()) output = output + args.bias.view(shape);

  torch::NoGradGuard no_grad;
  // torch's running variance is unbiased over the batch it saw: here the group's n samples.
  UpdateRunning(args.running_mean, mean.detach(), args.momentum);
  torch::Tensor var_running = var.detach() * n.detach() / (n.detach() - 1.0);
  UpdateRunning(args.running_var, var_running, args.momentum);
  return output;
}

}  // namespace deepool::worker
