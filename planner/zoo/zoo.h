// The model zoo: layer graphs of torchvision 0.14 architectures (vit_b_16 as torchvision 0.27
// builds it) and four tiny test models (gpt_tiny's names follow Hugging Face's GPT-2 instead).
//
// Layer names follow torchvision's module paths, so "<layer>.<param>" is exactly torchvision's
// state_dict key for every parameter and buffer (weight, bias, running_mean, running_var,
// num_batches_tracked). Functional ops that have no module in torchvision (F.avg_pool2d,
// torch.cat, residual adds, functional relus, torch.flatten) are layers too, named after the
// module that calls them, e.g. "Mixed_5b.branch_pool_avg", "Mixed_5b.concat", "layer1.0.add",
// "flatten". docs/models.md lists the models and the naming rules.
// Threading: every function here is pure and may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"

namespace deepool::planner::zoo {

struct ModelOptions {
  int64_t num_classes = 1000;
  // Height and width of the square input image; 0 means the model's default (224, 299 for
  // inception_v3, 16 for small_cnn). For mlp it is the number of input features (default 32),
  // for gpt_tiny the number of tokens per sample (default and most 64).
  int64_t image_size = 0;
  // inception_v3 only: add the auxiliary classifier as a second graph output (loss weight 0.4).
  bool aux_logits = true;
};

// The one rule for a job's model options, used by the coordinator (planning, profiling, the
// profile cache key) and deepool-train alike; 0 means "not given":
//   num_classes: as given; else 10 when the data set is "cifar10"; else the zoo's 1000.
//   image_size:  as given; else 0, the model's default (data are resized to the graph's input).
//   aux_logits:  the zoo's default (true).
ModelOptions JobModelOptions(int64_t num_classes, int64_t image_size, std::string_view data_kind);

// A stable key naming a zoo model and every option its graph depends on, with the model's
// defaults filled in, e.g. "resnet50/classes=10/image=224/aux_logits=1": two option sets that
// build the same graph get the same key, two that build different graphs different keys.
std::string ModelKey(std::string_view name, const ModelOptions& options);

// The zoo's model names, in a stable order.
std::vector<std::string> ModelNames();

// A one-line description of a zoo model; empty for an unknown name.
std::string ModelDescription(std::string_view name);

// Builds a zoo model. NOT_FOUND (listing the valid names) for an unknown name,
// INVALID_ARGUMENT for options the model cannot take (e.g. an image too small for its pools).
StatusOr<Graph> BuildModel(std::string_view name, const ModelOptions& options = {});

}  // namespace deepool::planner::zoo
