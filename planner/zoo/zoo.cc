#include "planner/zoo/zoo.h"

#include <functional>
#include <string>
#include <utility>

#include "planner/zoo/models.h"

namespace deepool::planner::zoo {
namespace {

struct ModelEntry {
  const char* name;
  const char* description;
  int64_t default_image_size;
  // The smallest input (image side, or features for mlp) whose shapes stay positive through
  // every layer; smaller inputs are refused with a message instead of a shape error deep inside.
  int64_t (*min_image_size)(const ModelOptions& options);
  std::function<StatusOr<Graph>(int64_t image_size, const ModelOptions& options)> build;
};

const std::vector<ModelEntry>& Entries() {
  static const std::vector<ModelEntry> entries = {
      {"vgg16", "VGG-16 (torchvision vgg16): 13 3x3 convs, 5 max pools, 3 linear layers", 224,
       [](const ModelOptions&) -> int64_t { return 32; },
       [](int64_t size, const ModelOptions& o) {
         return internal::BuildVgg16(size, o.num_classes);
       }},
      {"resnet50", "ResNet-50 v1.5 (torchvision resnet50): bottleneck blocks 3-4-6-3", 224,
       [](const ModelOptions&) -> int64_t { return 1; },
       [](int64_t size, const ModelOptions& o) {
         return internal::BuildBottleneckResnet("resnet50", {3, 4, 6, 3}, 64, size, o.num_classes);
       }},
      {"wide_resnet101_2",
       "Wide ResNet-101-2 (torchvision wide_resnet101_2): bottleneck blocks 3-4-23-3, 2x width",
       224, [](const ModelOptions&) -> int64_t { return 1; },
       [](int64_t size, const ModelOptions& o) {
         return internal::BuildBottleneckResnet("wide_resnet101_2", {3, 4, 23, 3}, 128, size,
                                                o.num_classes);
       }},
      {"inception_v3",
       "Inception-v3 (torchvision inception_v3), optional auxiliary classifier (weight 0.4)", 299,
       // The aux head's 5x5 conv needs Mixed_6e at 17x17 or more, which takes 299 pixels.
       [](const ModelOptions& o) -> int64_t { return o.aux_logits ? 299 : 75; },
       [](int64_t size, const ModelOptions& o) {
         return internal::BuildInceptionV3(size, o.num_classes, o.aux_logits);
       }},
      {"mlp", "Tiny MLP for tests: features -> 64 -> relu -> 64 -> relu -> classes", 32,
       [](const ModelOptions&) -> int64_t { return 1; },
       [](int64_t size, const ModelOptions& o) { return internal::BuildMlp(size, o.num_classes); }},
      {"small_cnn",
       "Tiny CNN for tests (3x16x16 input): stride-2 conv-bn-relu, branch-and-concat, "
       "residual add, pools, linear",
       16, [](const ModelOptions&) -> int64_t { return 3; },
       [](int64_t size, const ModelOptions& o) {
         return internal::BuildSmallCnn(size, o.num_classes);
       }},
      {"gpt_tiny",
       "Tiny GPT for tests: 256 byte tokens, context 64 (image_size), 2 pre-LN blocks of causal "
       "4-head attention and a GELU MLP, D=64, untied lm_head; num_classes is ignored",
       64, [](const ModelOptions&) -> int64_t { return 1; },
       [](int64_t context, const ModelOptions&) { return internal::BuildGptTiny(context); }},
      {"gpt2",
       "GPT-2 small: vocabulary 50,257, context 1,024 (image_size; at most 1,024), 12 pre-LN "
       "blocks of causal 12-head attention and a GELU-tanh MLP, D=768, lm_head tied to wte; "
       "num_classes is ignored",
       1024, [](const ModelOptions&) -> int64_t { return 1; },
       [](int64_t context, const ModelOptions&) { return internal::BuildGpt2(context); }},
      {"vit_b_16",
       "ViT-B/16 (torchvision vit_b_16): 16x16 patches, class token, 12 blocks of 12-head "
       "attention, D=768, MLP 3072; image_size a multiple of 16",
       224, [](const ModelOptions&) -> int64_t { return 16; },
       [](int64_t size, const ModelOptions& o) {
         return internal::BuildVisionTransformer(internal::kVitB16, size, o.num_classes);
       }},
      {"vit_tiny",
       "Tiny ViT for tests (3x32x32 input): 8x8 patches, class token, 2 blocks of 2-head "
       "attention, D=32, MLP 64; torchvision's VisionTransformer layout",
       32, [](const ModelOptions&) -> int64_t { return 8; },
       [](int64_t size, const ModelOptions& o) {
         return internal::BuildVisionTransformer(internal::kVitTiny, size, o.num_classes);
       }},
  };
  return entries;
}

const ModelEntry* FindEntry(std::string_view name) {
  for (const ModelEntry& entry : Entries()) {
    if (name == entry.name) return &entry;
  }
  return nullptr;
}

std::string JoinedNames() {
  std::string joined;
  for (const ModelEntry& entry : Entries()) {
    if (!joined.empty()) joined += ", ";
    joined += entry.name;
  }
  return joined;
}

}  // namespace

ModelOptions JobModelOptions(int64_t num_classes, int64_t image_size, std::string_view data_kind) {
  ModelOptions options;
  if (num_classes > 0) {
    options.num_classes = num_classes;
  } else if (data_kind == "cifar10") {
    options.num_classes = 10;
  }
  options.image_size = image_size;
  return options;
}

std::string ModelKey(std::string_view name, const ModelOptions& options) {
  const ModelEntry* entry = FindEntry(name);
  const int64_t image_size =
      options.image_size == 0 && entry != nullptr ? entry->default_image_size : options.image_size;
  return std::string(name) + "/classes=" + std::to_string(options.num_classes) +
         "/image=" + std::to_string(image_size) + "/aux_logits=" + (options.aux_logits ? "1" : "0");
}

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const ModelEntry& entry : Entries()) names.emplace_back(entry.name);
  return names;
}

std::string ModelDescription(std::string_view name) {
  const ModelEntry* entry = FindEntry(name);
  return entry == nullptr ? std::string() : std::string(entry->description);
}

StatusOr<Graph> BuildModel(std::string_view name, const ModelOptions& options) {
  const ModelEntry* entry = FindEntry(name);
  if (entry == nullptr) {
    return NotFoundError("unknown model \"" + std::string(name) +
                         "\"; valid models: " + JoinedNames());
  }
  if (options.num_classes <= 0) {
    return InvalidArgumentError(std::string(name) + ": num_classes must be positive, got " +
                                std::to_string(options.num_classes));
  }
  if (options.image_size < 0) {
    return InvalidArgumentError(std::string(name) +
                                ": image_size must be positive (or 0 for the default), got " +
                                std::to_string(options.image_size));
  }
  const int64_t image_size =
      options.image_size == 0 ? entry->default_image_size : options.image_size;
  if (image_size < entry->min_image_size(options)) {
    std::string message = std::string(name) + ": image_size " + std::to_string(image_size) +
                          " is too small; the smallest this model takes is " +
                          std::to_string(entry->min_image_size(options));
    if (name == "inception_v3" && options.aux_logits) {
      message += " with the auxiliary classifier (75 without it)";
    }
    return InvalidArgumentError(std::move(message));
  }
  StatusOr<Graph> graph = entry->build(image_size, options);
  if (!graph.ok()) {
    return graph.status().WithContext(std::string(name) + " with image_size " +
                                      std::to_string(image_size));
  }
  return graph;
}

}  // namespace deepool::planner::zoo
