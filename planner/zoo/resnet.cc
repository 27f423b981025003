// ResNets built from torchvision's Bottleneck block (ResNet v1.5: the stride sits on conv2).
// resnet50 is blocks {3, 4, 6, 3} with width_per_group 64; wide_resnet101_2 is {3, 4, 23, 3}
// with width_per_group 128 (twice as wide inner 3x3 convolutions).
#include <string>
#include <utility>

#include "planner/zoo/layer_list_builder.h"
#include "planner/zoo/models.h"

namespace deepool::planner::zoo::internal {
namespace {

constexpr int64_t kExpansion = 4;

// One Bottleneck block named `prefix` (e.g. "layer2.0"); returns the name of its output.
// torchvision reuses one nn.ReLU module three times in the block; the calls are named the way
// torch.fx names repeated calls: relu, relu_1, relu_2.
std::string Bottleneck(LayerListBuilder& b, const std::string& prefix, const std::string& input,
                       int64_t in_planes, int64_t planes, int64_t stride, int64_t width_per_group) {
  const int64_t width = planes * width_per_group / 64;
  const int64_t out_planes = planes * kExpansion;
  std::string x = b.Conv2d(prefix + ".conv1", input, ConvSpec(in_planes, width, Sq(1)).NoBias());
  x = b.BatchNorm2d(prefix + ".bn1", x);
  x = b.Relu(prefix + ".relu", x);
  x = b.Conv2d(prefix + ".conv2", x,
               ConvSpec(width, width, Sq(3)).Stride(Sq(stride)).Padding(Sq(1)).NoBias());
  x = b.BatchNorm2d(prefix + ".bn2", x);
  x = b.Relu(prefix + ".relu_1", x);
  x = b.Conv2d(prefix + ".conv3", x, ConvSpec(width, out_planes, Sq(1)).NoBias());
  x = b.BatchNorm2d(prefix + ".bn3", x);
  std::string identity = input;
  if (stride != 1 || in_planes != out_planes) {
    identity = b.Conv2d(prefix + ".downsample.0", input,
                        ConvSpec(in_planes, out_planes, Sq(1)).Stride(Sq(stride)).NoBias());
    identity = b.BatchNorm2d(prefix + ".downsample.1", identity);
  }
  x = b.Add(prefix + ".add", {x, identity});
  return b.Relu(prefix + ".relu_2", x);
}

}  // namespace

StatusOr<Graph> BuildBottleneckResnet(std::string name, const std::array<int, 4>& blocks,
                                      int64_t width_per_group, int64_t image_size,
                                      int64_t num_classes) {
  LayerListBuilder b;
  std::string x = b.Conv2d("conv1", std::string(kGraphInputName),
                           ConvSpec(3, 64, Sq(7)).Stride(Sq(2)).Padding(Sq(3)).NoBias());
  x = b.BatchNorm2d("bn1", x);
  x = b.Relu("relu", x);
  x = b.MaxPool2d("maxpool", x, Sq(3), Sq(2), Sq(1));
  int64_t in_planes = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = int64_t{64} << stage;
    const int64_t stage_stride = stage == 0 ? 1 : 2;
    const std::string stage_name = "layer" + std::to_string(stage + 1) + ".";
    for (int block = 0; block < blocks[static_cast<size_t>(stage)]; ++block) {
      std::string block_name = stage_name;
      block_name += std::to_string(block);
      x = Bottleneck(b, block_name, x, in_planes, planes,
                     block == 0 ? stage_stride : 1, width_per_group);
      in_planes = planes * kExpansion;
    }
  }
  x = b.AdaptiveAvgPool2d("avgpool", x, Sq(1));
  x = b.Flatten("flatten", x);
  x = b.Linear("fc", x, 512 * kExpansion, num_classes);
  return Graph::Create(std::move(name), Shape{3, image_size, image_size}, std::move(b).Take(),
                       {GraphOutput{x, 1.0}});
}

}  // namespace deepool::planner::zoo::internal
