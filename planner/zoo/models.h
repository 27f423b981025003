// Private to the zoo: one builder per model family. zoo.cc resolves ModelOptions (default image
// sizes) and validates them before calling these, so each builder gets a concrete image size.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "planner/graph.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner::zoo::internal {

StatusOr<Graph> BuildVgg16(int64_t image_size, int64_t num_classes);
// torchvision's ResNet with Bottleneck blocks: blocks per stage and width_per_group
// (64 for resnet50, 128 for wide_resnet101_2).
StatusOr<Graph> BuildBottleneckResnet(std::string name, const std::array<int, 4>& blocks,
                                      int64_t width_per_group, int64_t image_size,
                                      int64_t num_classes);
StatusOr<Graph> BuildInceptionV3(int64_t image_size, int64_t num_classes, bool aux_logits);
StatusOr<Graph> BuildMlp(int64_t input_features, int64_t num_classes);
StatusOr<Graph> BuildSmallCnn(int64_t image_size, int64_t num_classes);
// A 2-block pre-LN GPT over `context` byte tokens (at most 64); its vocabulary is fixed at 256.
StatusOr<Graph> BuildGptTiny(int64_t context);
StatusOr<Graph> BuildGpt2(int64_t context);  // GPT-2 small, lm_head tied to wte

// torchvision's VisionTransformer (vit.cc): 3-channel square images cut into patch_size
// patches, a class token, num_layers encoder blocks, the class token's output classified.
struct VitConfig {
  const char* name;
  int64_t patch_size;
  int num_layers;
  int64_t num_heads;
  int64_t hidden_dim;
  int64_t mlp_dim;
};
inline constexpr VitConfig kVitB16{"vit_b_16", 16, 12, 12, 768, 3072};
inline constexpr VitConfig kVitTiny{"vit_tiny", 8, 2, 2, 32, 64};
// INVALID_ARGUMENT when image_size is not a multiple of the patch size.
StatusOr<Graph> BuildVisionTransformer(const VitConfig& config, int64_t image_size,
                                       int64_t num_classes);

}  // namespace deepool::planner::zoo::internal
