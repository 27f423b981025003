// VGG-16 (configuration "D" of torchvision.models.vgg, without batch norm).
#include <string>
#include <vector>

#include "planner/zoo/layer_list_builder.h"
#include "planner/zoo/models.h"

namespace deepool::planner::zoo::internal {

StatusOr<Graph> BuildVgg16(int64_t image_size, int64_t num_classes) {
  constexpr int kMaxPool = 0;
  // torchvision's cfgs["D"]; 0 stands for "M" (a 2x2 max pool).
  const std::vector<int64_t> config = {64,  64,       kMaxPool, 128,      128, kMaxPool,
                                       256, 256,      256,      kMaxPool, 512, 512,
                                       512, kMaxPool, 512,      512,      512, kMaxPool};
  LayerListBuilder b;
  std::string x(kGraphInputName);
  int64_t channels = 3;
  int index = 0;  // position in the features nn.Sequential
  auto next_name = [&index] { return "features." + std::to_string(index++); };
  for (int64_t v : config) {
    if (v == kMaxPool) {
      x = b.MaxPool2d(next_name(), x, Sq(2), Sq(2));
      continue;
    }
    x = b.Conv2d(next_name(), x, ConvSpec(channels, v, Sq(3)).Padding(Sq(1)));
    x = b.Relu(next_name(), x);
    channels = v;
  }
  x = b.AdaptiveAvgPool2d("avgpool", x, Pair{7, 7});
  x = b.Flatten("flatten", x);
  x = b.Linear("classifier.0", x, 512 * 7 * 7, 4096);
  x = b.Relu("classifier.1", x);
  x = b.Dropout("classifier.2", x, 0.5);
  x = b.Linear("classifier.3", x, 4096, 4096);
  x = b.Relu("classifier.4", x);
  x = b.Dropout("classifier.5", x, 0.5);
  x = b.Linear("classifier.6", x, 4096, num_classes);
  return Graph::Create("vgg16", Shape{3, image_size, image_size}, std::move(b).Take(),
                       {GraphOutput{x, 1.0}});
}

}  // namespace deepool::planner::zoo::internal
