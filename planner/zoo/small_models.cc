// Two tiny models for fast tests on CPU: an MLP, and a small CNN that still has every structural
// feature the runtime must handle (batch norm, a branch-and-concat, a residual add, pools,
// flatten, a linear head).
#include <string>

#include "planner/zoo/layer_list_builder.h"
#include "planner/zoo/models.h"

namespace deepool::planner::zoo::internal {

StatusOr<Graph> BuildMlp(int64_t input_features, int64_t num_classes) {
  constexpr int64_t kHidden = 64;
  LayerListBuilder b;
  std::string x = b.Linear("fc1", std::string(kGraphInputName), input_features, kHidden);
  x = b.Relu("relu1", x);
  x = b.Linear("fc2", x, kHidden, kHidden);
  x = b.Relu("relu2", x);
  x = b.Linear("fc3", x, kHidden, num_classes);
  return Graph::Create("mlp", Shape{input_features}, std::move(b).Take(), {GraphOutput{x, 1.0}});
}

StatusOr<Graph> BuildSmallCnn(int64_t image_size, int64_t num_classes) {
  LayerListBuilder b;
  // A stride-2 stem keeps the rest at 8x8 (for a 16x16 input), so a step costs little.
  std::string x = b.Conv2d("stem.conv", std::string(kGraphInputName),
                           ConvSpec(3, 16, Sq(3)).Stride(Sq(2)).Padding(Sq(1)).NoBias());
  x = b.BatchNorm2d("stem.bn", x);
  x = b.Relu("stem.relu", x);
  // Branch and concat: a 1x1 and a 3x3 branch of 8 channels each, back to 16 channels.
  std::string left = b.Conv2d("branch1x1.conv", x, ConvSpec(16, 8, Sq(1)));
  left = b.Relu("branch1x1.relu", left);
  std::string right = b.Conv2d("branch3x3.conv", x, ConvSpec(16, 8, Sq(3)).Padding(Sq(1)));
  right = b.Relu("branch3x3.relu", right);
  x = b.Concat("concat", {left, right});
  // Residual block: conv-bn added to its own input.
  std::string y = b.Conv2d("res.conv", x, ConvSpec(16, 16, Sq(3)).Padding(Sq(1)).NoBias());
  y = b.BatchNorm2d("res.bn", y);
  y = b.Add("res.add", {y, x});
  x = b.Relu("res.relu", y);
  x = b.MaxPool2d("maxpool", x, Sq(2), Sq(2));
  x = b.AdaptiveAvgPool2d("avgpool", x, Sq(1));
  x = b.Flatten("flatten", x);
  x = b.Linear("fc", x, 16, num_classes);
  return Graph::Create("small_cnn", Shape{3, image_size, image_size}, std::move(b).Take(),
                       {GraphOutput{x, 1.0}});
}

}  // namespace deepool::planner::zoo::internal
