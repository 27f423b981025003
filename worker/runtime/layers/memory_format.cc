#include "worker/runtime/layers/memory_format.h"

namespace deepool::worker {
namespace {

bool ChannelsLast(const torch::Tensor& tensor, planner::MemoryFormat format) {
  return format == planner::MemoryFormat::kChannelsLast && tensor.dim() == 4;
}

}  // namespace

torch::Tensor InMemoryFormat(const torch::Tensor& tensor, planner::MemoryFormat format) {
  if (!ChannelsLast(tensor, format)) return tensor;
  return tensor.contiguous(torch::MemoryFormat::ChannelsLast);
}

void ModuleToMemoryFormat(torch::nn::Module& module, planner::MemoryFormat format) {
  if (format != planner::MemoryFormat::kChannelsLast) return;
  torch::NoGradGuard no_grad;
  // set_data keeps each parameter's identity (and requires_grad) and swaps its storage.
  for (auto& param : module.parameters()) {
    if (param.dim() == 4) param.set_data(InMemoryFormat(param.data(), format));
  }
  for (auto& buffer : module.buffers()) {
    if (buffer.dim() == 4) buffer.set_data(InMemoryFormat(buffer.data(), format));
  }
}

torch::Tensor EmptyInMemoryFormat(at::IntArrayRef sizes, const torch::TensorOptions& options,
                                  planner::MemoryFormat format) {
  const bool channels_last = format == planner::MemoryFormat::kChannelsLast && sizes.size() == 4;
  return torch::empty(sizes,
                      options.memory_format(channels_last ? torch::MemoryFormat::ChannelsLast
                                                          : torch::MemoryFormat::Contiguous));
}

torch::Tensor WireView(const torch::Tensor& tensor, planner::MemoryFormat format) {
  if (!ChannelsLast(tensor, format)) return tensor.contiguous();
  // NCHW sizes over NHWC storage, permuted to NHWC sizes: contiguous in the default sense.
  return InMemoryFormat(tensor, format).permute({0, 2, 3, 1});
}

torch::Tensor FlattenInMemoryOrder(const torch::Tensor& tensor, planner::MemoryFormat format) {
  return WireView(tensor, format).reshape({-1});
}

torch::Tensor UnflattenLike(const torch::Tensor& flat, const torch::Tensor& like,
                            planner::MemoryFormat format) {
  if (!ChannelsLast(like, format)) return flat.view(like.sizes());
  return flat.view({like.size(0), like.size(2), like.size(3), like.size(1)}).permute({0, 3, 1, 2});
}

}  // namespace deepool::worker
