// The model zoo against torchvision 0.14: parameter counts, state_dict keys with shapes,
// output shapes, naming of functional ops, Inception's auxiliary head, and option handling.
// Reference numbers were measured with torchvision 0.14 (tests/unit/torchvision_keys_check.py
// --print-signatures prints them again).
#include "planner/zoo/zoo.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/graph.h"

namespace deepool::planner::zoo {
namespace {

Graph Build(const std::string& name, const ModelOptions& options = {}) {
  StatusOr<Graph> graph = BuildModel(name, options);
  INFO(name << ": " << graph.status().ToString());
  REQUIRE(graph.ok());
  return std::move(graph).value();
}

ModelOptions Classes(int64_t num_classes) {
  ModelOptions options;
  options.num_classes = num_classes;
  return options;
}

ModelOptions NoAux() {
  ModelOptions options;
  options.aux_logits = false;
  return options;
}

const Layer& LayerNamed(const Graph& graph, const std::string& name) {
  std::optional<int> id = graph.FindLayer(name);
  INFO("layer " << name);
  REQUIRE(id.has_value());
  return graph.layer(*id);
}

Shape InputShapeOf(const Graph& graph, const Layer& layer) {
  const int input = layer.input_ids.at(0);
  return input == kGraphInputId ? graph.input_shape() : graph.layer(input).output_shape;
}

// torchvision's state_dict of the module a graph describes: "<layer>.<param>" -> shape.
// Trainable parameters and batch-norm buffers alike.
struct StateEntry {
  Shape shape;
  bool trainable = true;
};
std::map<std::string, StateEntry> StateDict(const Graph& graph) {
  std::map<std::string, StateEntry> state;
  for (const Layer& layer : graph.layers()) {
    const LayerAttrs& a = layer.attrs;
    const Shape in = InputShapeOf(graph, layer);
    switch (layer.op) {
      case Op::kConv2d:
        state[layer.name + ".weight"] = {
            {a.out_channels, in.at(0) / a.groups, a.kernel_size[0], a.kernel_size[1]}};
        if (a.bias) state[layer.name + ".bias"] = {{a.out_channels}};
        break;
      case Op::kBatchNorm2d:
        if (a.affine) {
          state[layer.name + ".weight"] = {{in.at(0)}};
          state[layer.name + ".bias"] = {{in.at(0)}};
        }
        state[layer.name + ".running_mean"] = {{in.at(0)}, false};
        state[layer.name + ".running_var"] = {{in.at(0)}, false};
        state[layer.name + ".num_batches_tracked"] = {{}, false};
        break;
      case Op::kLinear:
        state[layer.name + ".weight"] = {{a.out_features, in.back()}};
        if (a.bias) state[layer.name + ".bias"] = {{a.out_features}};
        break;
      case Op::kLayerNorm:
        if (a.affine) {
          state[layer.name + ".weight"] = {a.normalized_shape};
          state[layer.name + ".bias"] = {a.normalized_shape};
        }
        break;
      case Op::kEmbedding:
        state[layer.name + ".weight"] = {{a.num_embeddings, a.embedding_dim}};
        break;
      case Op::kPositionEmbedding:
        if (a.bare_parameter) {  // torchvision ViT's encoder.pos_embedding: the key is the layer
          state[layer.name] = {{1, a.max_positions, in.back()}};
        } else {
          state[layer.name + ".weight"] = {{a.max_positions, in.back()}};
        }
        break;
      case Op::kClassToken:  // a bare nn.Parameter: the key is the layer's name
        state[layer.name] = {{1, 1, in.back()}};
        break;
      case Op::kMultiheadAttention:  // nn.MultiheadAttention's keys
        state[layer.name + ".in_proj_weight"] = {{3 * in.back(), in.back()}};
        state[layer.name + ".out_proj.weight"] = {{in.back(), in.back()}};
        if (a.bias) {
          state[layer.name + ".in_proj_bias"] = {{3 * in.back()}};
          state[layer.name + ".out_proj.bias"] = {{in.back()}};
        }
        break;
      default:
        break;
    }
  }
  return state;
}

// FNV-1a 64 of the sorted "key:d0xd1x..." lines joined by newlines; the same function as
// signature() in tests/unit/torchvision_keys_check.py.
uint64_t Signature(const std::map<std::string, StateEntry>& state) {
  std::string text;
  for (const auto& [key, entry] : state) {  // std::map iterates in sorted order
    if (!text.empty()) text += '\n';
    text += key + ":";
    for (size_t i = 0; i < entry.shape.size(); ++i) {
      text += (i ? "x" : "") + std::to_string(entry.shape[i]);
    }
  }
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001B3ull;
  }
  return hash;
}

struct ReferenceCase {
  const char* label;
  const char* model;
  ModelOptions options;
  int64_t params;
  size_t state_keys;
  uint64_t state_signature;
};

const std::vector<ReferenceCase>& TorchvisionReferences() {
  static const std::vector<ReferenceCase> cases = {
      {"vgg16", "vgg16", {}, 138357544, 32, 0x10ad238191dda184ull},
      {"vgg16 num_classes=10", "vgg16", Classes(10), 134301514, 32, 0x6cf765682df68414ull},
      {"resnet50", "resnet50", {}, 25557032, 320, 0xe7b8b42fa115da22ull},
      {"resnet50 num_classes=10", "resnet50", Classes(10), 23528522, 320, 0x1c4231fa10bce5e2ull},
      {"wide_resnet101_2", "wide_resnet101_2", {}, 126886696, 626, 0xd01bb1dae56e6f5bull},
      {"inception_v3", "inception_v3", {}, 27161264, 580, 0x5694f6bdbd562d22ull},
      {"inception_v3 aux_logits=false", "inception_v3", NoAux(), 23834568, 566,
       0x0befdde88fdd427eull},
      // The small models against the torch modules written out in torchvision_keys_check.py.
      {"mlp num_classes=10", "mlp", Classes(10), 6922, 6, 0x9435254d86f9aa05ull},
      {"small_cnn num_classes=10", "small_cnn", Classes(10), 4266, 18, 0x9b0f910e21d54a65ull},
      // torchvision 0.27's vit_b_16, and VisionTransformer(image_size=32, patch_size=8,
      // num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10) for vit_tiny.
      {"vit_b_16", "vit_b_16", {}, 86567656, 152, 0x157457b1fbd56b8cull},
      {"vit_b_16 num_classes=10", "vit_b_16", Classes(10), 85806346, 152, 0x762a3206538d63ecull},
      {"vit_tiny num_classes=10", "vit_tiny", Classes(10), 24234, 32, 0x448fd18227211a33ull},
  };
  return cases;
}

TEST_CASE("zoo lists its models, each with a description", "[zoo]") {
  const std::vector<std::string> expected = {"vgg16",        "resnet50", "wide_resnet101_2",
                                             "inception_v3", "mlp",      "small_cnn",
                                             "gpt_tiny",     "gpt2",     "vit_b_16",
                                             "vit_tiny"};
  CHECK(ModelNames() == expected);
  for (const std::string& name : ModelNames()) {
    INFO(name);
    CHECK_FALSE(ModelDescription(name).empty());
    CHECK(Build(name).name() == name);
  }
  CHECK(ModelDescription("resnet18").empty());
}

TEST_CASE("zoo parameter counts equal torchvision's", "[zoo]") {
  for (const ReferenceCase& c : TorchvisionReferences()) {
    INFO(c.label);
    CHECK(Build(c.model, c.options).total_params() == c.params);
  }
}

TEST_CASE("zoo state_dict keys and shapes equal torchvision's", "[zoo]") {
  for (const ReferenceCase& c : TorchvisionReferences()) {
    INFO(c.label);
    const auto state = StateDict(Build(c.model, c.options));
    CHECK(state.size() == c.state_keys);
    CHECK(Signature(state) == c.state_signature);
  }
}

TEST_CASE("zoo state_dict keys name torchvision's modules", "[zoo]") {
  const auto vgg = StateDict(Build("vgg16"));
  for (const char* key : {"features.0.weight", "features.0.bias", "features.28.weight",
                          "classifier.0.weight", "classifier.3.bias", "classifier.6.weight"}) {
    CHECK(vgg.count(key) == 1);
  }
  CHECK(vgg.at("classifier.0.weight").shape == Shape{4096, 25088});

  const auto resnet = StateDict(Build("resnet50"));
  for (const char* key : {"conv1.weight", "bn1.running_mean", "layer1.0.conv1.weight",
                          "layer1.0.downsample.0.weight", "layer1.0.downsample.1.running_var",
                          "layer4.2.bn3.num_batches_tracked", "fc.weight", "fc.bias"}) {
    CHECK(resnet.count(key) == 1);
  }
  CHECK(resnet.count("conv1.bias") == 0);  // torchvision's convs have bias=False
  CHECK(resnet.count("layer1.1.downsample.0.weight") == 0);
  CHECK(resnet.at("layer2.0.conv2.weight").shape == Shape{128, 128, 3, 3});

  const auto wide = StateDict(Build("wide_resnet101_2"));
  CHECK(wide.at("layer1.0.conv2.weight").shape == Shape{128, 128, 3, 3});  // 2x width
  CHECK(wide.count("layer3.22.conv3.weight") == 1);

  const auto inception = StateDict(Build("inception_v3"));
  for (const char* key :
       {"Conv2d_1a_3x3.conv.weight", "Conv2d_1a_3x3.bn.running_var",
        "Mixed_5b.branch1x1.conv.weight", "Mixed_5b.branch_pool.bn.bias",
        "Mixed_6e.branch7x7dbl_5.conv.weight", "Mixed_7c.branch3x3dbl_3b.bn.num_batches_tracked",
        "AuxLogits.conv0.conv.weight", "AuxLogits.conv1.bn.weight", "AuxLogits.fc.weight",
        "fc.bias"}) {
    CHECK(inception.count(key) == 1);
  }
  CHECK(inception.at("Mixed_6b.branch7x7_2.conv.weight").shape == Shape{128, 128, 1, 7});
  CHECK(inception.at("AuxLogits.fc.weight").shape == Shape{1000, 768});
  CHECK(StateDict(Build("inception_v3", NoAux())).count("AuxLogits.fc.weight") == 0);
}

TEST_CASE("every parameterised layer's state_dict tensors hold its parameters", "[zoo]") {
  for (const std::string& name : ModelNames()) {
    const Graph graph = Build(name);
    const auto state = StateDict(graph);
    for (const Layer& layer : graph.layers()) {
      int64_t from_state = 0;
      for (const auto& [key, entry] : state) {
        // A bare parameter's key is its layer's name (class_token, encoder.pos_embedding).
        const bool owned = key == layer.name || key.rfind(layer.name + ".", 0) == 0;
        if (!entry.trainable || !owned) continue;
        // Keys of this layer only, not of a layer whose name extends it ("fc" vs "fc1", "mlp.c_fc"
        // vs "mlp"): the rest of the key is a parameter name, which may be a submodule's
        // ("out_proj.weight") but never names another layer.
        const std::string owner = key.substr(0, key.rfind('.'));
        if (owner != layer.name && graph.FindLayer(owner).has_value()) continue;
        from_state += NumElements(entry.shape);
      }
      INFO(name << " layer " << layer.name);
      CHECK(from_state == layer.params);
    }
  }
}

TEST_CASE("zoo output shapes follow torchvision", "[zoo]") {
  const Graph vgg = Build("vgg16");
  CHECK(vgg.input_shape() == Shape{3, 224, 224});
  CHECK(LayerNamed(vgg, "features.29").output_shape == Shape{512, 14, 14});
  CHECK(LayerNamed(vgg, "features.30").output_shape == Shape{512, 7, 7});
  CHECK(LayerNamed(vgg, "flatten").output_shape == Shape{25088});
  CHECK(LayerNamed(vgg, "classifier.6").output_shape == Shape{1000});
  CHECK(vgg.num_layers() == 31 + 2 + 7);

  const Graph resnet = Build("resnet50");
  CHECK(LayerNamed(resnet, "maxpool").output_shape == Shape{64, 56, 56});
  CHECK(LayerNamed(resnet, "layer1.0.relu_2").output_shape == Shape{256, 56, 56});
  CHECK(LayerNamed(resnet, "layer2.0.conv2").output_shape == Shape{128, 28, 28});
  CHECK(LayerNamed(resnet, "layer4.2.relu_2").output_shape == Shape{2048, 7, 7});
  CHECK(LayerNamed(resnet, "fc").output_shape == Shape{1000});

  const Graph inception = Build("inception_v3");
  CHECK(inception.input_shape() == Shape{3, 299, 299});
  // The shapes torchvision's Inception3._forward comments give.
  CHECK(LayerNamed(inception, "Conv2d_1a_3x3.relu").output_shape == Shape{32, 149, 149});
  CHECK(LayerNamed(inception, "Conv2d_2b_3x3.relu").output_shape == Shape{64, 147, 147});
  CHECK(LayerNamed(inception, "maxpool1").output_shape == Shape{64, 73, 73});
  CHECK(LayerNamed(inception, "Conv2d_4a_3x3.relu").output_shape == Shape{192, 71, 71});
  CHECK(LayerNamed(inception, "maxpool2").output_shape == Shape{192, 35, 35});
  CHECK(LayerNamed(inception, "Mixed_5b.concat").output_shape == Shape{256, 35, 35});
  CHECK(LayerNamed(inception, "Mixed_5d.concat").output_shape == Shape{288, 35, 35});
  CHECK(LayerNamed(inception, "Mixed_6a.concat").output_shape == Shape{768, 17, 17});
  CHECK(LayerNamed(inception, "Mixed_6e.concat").output_shape == Shape{768, 17, 17});
  CHECK(LayerNamed(inception, "AuxLogits.avg_pool").output_shape == Shape{768, 5, 5});
  CHECK(LayerNamed(inception, "AuxLogits.conv1.relu").output_shape == Shape{768, 1, 1});
  CHECK(LayerNamed(inception, "Mixed_7a.concat").output_shape == Shape{1280, 8, 8});
  CHECK(LayerNamed(inception, "Mixed_7b.branch3x3_concat").output_shape == Shape{768, 8, 8});
  CHECK(LayerNamed(inception, "Mixed_7c.concat").output_shape == Shape{2048, 8, 8});
  CHECK(LayerNamed(inception, "fc").output_shape == Shape{1000});
  CHECK(LayerNamed(inception, "AuxLogits.fc").output_shape == Shape{1000});
}

TEST_CASE("functional ops are layers named after the module that calls them", "[zoo]") {
  const Graph inception = Build("inception_v3");
  const Layer& avg = LayerNamed(inception, "Mixed_5b.branch_pool_avg");
  CHECK(avg.op == Op::kAvgPool2d);
  CHECK(avg.attrs.kernel_size == std::array<int64_t, 2>{3, 3});
  CHECK(avg.attrs.stride == std::array<int64_t, 2>{1, 1});
  CHECK(avg.attrs.padding == std::array<int64_t, 2>{1, 1});
  CHECK(LayerNamed(inception, "Mixed_5b.branch_pool.conv").inputs ==
        std::vector<std::string>{"Mixed_5b.branch_pool_avg"});
  CHECK(LayerNamed(inception, "Mixed_6a.branch_pool_max").op == Op::kMaxPool2d);
  CHECK(LayerNamed(inception, "Mixed_7a.branch_pool_max").op == Op::kMaxPool2d);
  CHECK(LayerNamed(inception, "Mixed_5b.branch1x1.relu").op == Op::kRelu);
  // torch.cat order is the order of torchvision's outputs list.
  CHECK(LayerNamed(inception, "Mixed_5b.concat").inputs ==
        std::vector<std::string>{"Mixed_5b.branch1x1.relu", "Mixed_5b.branch5x5_2.relu",
                                 "Mixed_5b.branch3x3dbl_3.relu", "Mixed_5b.branch_pool.relu"});
  CHECK(LayerNamed(inception, "Mixed_7b.concat").inputs ==
        std::vector<std::string>{"Mixed_7b.branch1x1.relu", "Mixed_7b.branch3x3_concat",
                                 "Mixed_7b.branch3x3dbl_concat", "Mixed_7b.branch_pool.relu"});
  // avgpool, then dropout, then flatten, as in Inception3._forward.
  CHECK(LayerNamed(inception, "dropout").inputs == std::vector<std::string>{"avgpool"});
  CHECK(LayerNamed(inception, "flatten").inputs == std::vector<std::string>{"dropout"});

  const Graph resnet = Build("resnet50");
  CHECK(LayerNamed(resnet, "layer1.0.add").op == Op::kAdd);
  CHECK(LayerNamed(resnet, "layer1.0.add").inputs ==
        std::vector<std::string>{"layer1.0.bn3", "layer1.0.downsample.1"});
  CHECK(LayerNamed(resnet, "layer1.1.add").inputs ==
        std::vector<std::string>{"layer1.1.bn3", "layer1.0.relu_2"});
  CHECK(LayerNamed(resnet, "layer1.0.relu").inputs == std::vector<std::string>{"layer1.0.bn1"});
  CHECK(LayerNamed(resnet, "layer1.0.relu_1").inputs == std::vector<std::string>{"layer1.0.bn2"});
  CHECK(LayerNamed(resnet, "flatten").op == Op::kFlatten);
  // v1.5: the stride sits on conv2, and on the downsample conv.
  CHECK(LayerNamed(resnet, "layer3.0.conv1").attrs.stride == std::array<int64_t, 2>{1, 1});
  CHECK(LayerNamed(resnet, "layer3.0.conv2").attrs.stride == std::array<int64_t, 2>{2, 2});
  CHECK(LayerNamed(resnet, "layer3.0.downsample.0").attrs.stride == std::array<int64_t, 2>{2, 2});
}

TEST_CASE("inception's auxiliary classifier is a second output after Mixed_6e", "[zoo]") {
  const Graph with_aux = Build("inception_v3");
  CHECK(with_aux.outputs() == std::vector<GraphOutput>{{"fc", 1.0}, {"AuxLogits.fc", 0.4}});
  CHECK(LayerNamed(with_aux, "AuxLogits.avg_pool").inputs ==
        std::vector<std::string>{"Mixed_6e.concat"});
  CHECK(LayerNamed(with_aux, "AuxLogits.avg_pool").attrs.kernel_size ==
        std::array<int64_t, 2>{5, 5});
  CHECK(LayerNamed(with_aux, "AuxLogits.avg_pool").attrs.stride == std::array<int64_t, 2>{3, 3});
  CHECK(LayerNamed(with_aux, "AuxLogits.fc").inputs ==
        std::vector<std::string>{"AuxLogits.flatten"});
  // Topological order keeps torchvision's: the aux head runs before Mixed_7a.
  CHECK(*with_aux.FindLayer("AuxLogits.fc") < *with_aux.FindLayer("Mixed_7a.branch3x3_1.conv"));

  const Graph without_aux = Build("inception_v3", NoAux());
  CHECK(without_aux.outputs() == std::vector<GraphOutput>{{"fc", 1.0}});
  for (const Layer& layer : without_aux.layers()) {
    INFO(layer.name);
    CHECK(layer.name.rfind("AuxLogits", 0) == std::string::npos);
  }
  CHECK(with_aux.num_layers() - without_aux.num_layers() == 10);
}

TEST_CASE("batch norm eps and conv bias follow torchvision", "[zoo]") {
  for (const std::string& name : ModelNames()) {
    const Graph graph = Build(name);
    for (const Layer& layer : graph.layers()) {
      INFO(name << " layer " << layer.name);
      if (layer.op == Op::kBatchNorm2d) {
        // Inception's BasicConv2d uses eps=0.001; every other batch norm the default 1e-5.
        CHECK(layer.attrs.eps == (name == "inception_v3" ? 1e-3 : 1e-5));
        CHECK(layer.attrs.momentum == 0.1);
      }
      if (layer.op == Op::kConv2d) {
        // small_cnn's two branch convs have a bias (they have no batch norm after them), and so
        // has a ViT's patch embedding.
        const bool has_bias = name == "vgg16" ||
                              (name == "small_cnn" && layer.name.rfind("branch", 0) == 0) ||
                              layer.name == "conv_proj";
        CHECK(layer.attrs.bias == has_bias);
      }
    }
  }
}

TEST_CASE("image size and class count are parameters", "[zoo]") {
  ModelOptions options;
  options.num_classes = 10;
  options.image_size = 128;
  const Graph resnet = Build("resnet50", options);
  CHECK(resnet.input_shape() == Shape{3, 128, 128});
  CHECK(LayerNamed(resnet, "layer4.2.relu_2").output_shape == Shape{2048, 4, 4});
  CHECK(LayerNamed(resnet, "fc").output_shape == Shape{10});
  CHECK(resnet.total_params() == 23528522);  // the image size changes no parameter

  options.image_size = 32;
  const Graph vgg = Build("vgg16", options);
  CHECK(LayerNamed(vgg, "features.30").output_shape == Shape{512, 1, 1});
  CHECK(LayerNamed(vgg, "avgpool").output_shape == Shape{512, 7, 7});
  CHECK(vgg.total_params() == 134301514);

  ModelOptions small;
  small.aux_logits = false;
  small.image_size = 75;
  const Graph inception = Build("inception_v3", small);
  CHECK(LayerNamed(inception, "Mixed_7c.concat").output_shape == Shape{2048, 1, 1});

  ModelOptions features;
  features.image_size = 100;
  features.num_classes = 3;
  const Graph mlp = Build("mlp", features);
  CHECK(mlp.input_shape() == Shape{100});
  CHECK(LayerNamed(mlp, "fc3").output_shape == Shape{3});
}

TEST_CASE("zoo refuses unknown names and impossible options", "[zoo]") {
  StatusOr<Graph> unknown = BuildModel("resnet18");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == StatusCode::kNotFound);
  for (const std::string& name : ModelNames()) {
    CHECK(unknown.status().message().find(name) != std::string::npos);
  }

  auto refused = [](const std::string& name, const ModelOptions& options) {
    StatusOr<Graph> graph = BuildModel(name, options);
    INFO(name << " num_classes " << options.num_classes << " image_size " << options.image_size);
    REQUIRE_FALSE(graph.ok());
    CHECK(graph.status().code() == StatusCode::kInvalidArgument);
    CHECK(graph.status().message().find(name) != std::string::npos);
  };
  refused("resnet50", Classes(0));
  refused("mlp", Classes(-3));
  ModelOptions options;
  options.image_size = -1;
  refused("vgg16", options);
  options.image_size = 31;  // five 2x2 max pools need 32 pixels
  refused("vgg16", options);
  options.image_size = 298;  // the aux head's 5x5 conv needs 299
  refused("inception_v3", options);
  options.aux_logits = false;
  options.image_size = 74;
  refused("inception_v3", options);
  options.image_size = 75;
  CHECK(BuildModel("inception_v3", options).ok());
  options.image_size = 2;  // the stride-2 stem leaves 1x1, too small for the 2x2 max pool
  refused("small_cnn", options);
  options.image_size = 3;
  CHECK(BuildModel("small_cnn", options).ok());
}

TEST_CASE("small test models are small and have a concat and a residual add", "[zoo]") {
  const Graph cnn = Build("small_cnn", Classes(10));
  CHECK(cnn.input_shape() == Shape{3, 16, 16});
  CHECK(cnn.total_params() < 50000);
  auto count_op = [&cnn](Op op) {
    return std::count_if(cnn.layers().begin(), cnn.layers().end(),
                         [op](const Layer& l) { return l.op == op; });
  };
  CHECK(count_op(Op::kConcat) == 1);
  CHECK(count_op(Op::kAdd) == 1);
  CHECK(count_op(Op::kBatchNorm2d) == 2);
  CHECK(LayerNamed(cnn, "concat").output_shape == Shape{16, 8, 8});
  CHECK(LayerNamed(cnn, "maxpool").output_shape == Shape{16, 4, 4});
  CHECK(LayerNamed(cnn, "res.add").inputs == std::vector<std::string>{"res.bn", "concat"});
  CHECK(LayerNamed(cnn, "fc").output_shape == Shape{10});

  const Graph mlp = Build("mlp", Classes(10));
  CHECK(mlp.input_shape() == Shape{32});
  CHECK(mlp.num_layers() == 5);
  CHECK(LayerNamed(mlp, "fc2").output_shape == Shape{64});
  CHECK(LayerNamed(mlp, "fc3").output_shape == Shape{10});
}

TEST_CASE("zoo graphs survive a JSON round trip", "[zoo]") {
  for (const std::string& name : ModelNames()) {
    INFO(name);
    const Graph graph = Build(name);
    StatusOr<Graph> parsed = ParseGraphJson(GraphToJson(graph));
    REQUIRE(parsed.ok());
    CHECK(parsed->num_layers() == graph.num_layers());
    CHECK(parsed->total_params() == graph.total_params());
    CHECK(parsed->total_forward_flops() == graph.total_forward_flops());
    CHECK(parsed->outputs() == graph.outputs());
    for (int id = 0; id < graph.num_layers(); ++id) {
      CHECK(parsed->layer(id).name == graph.layer(id).name);
      CHECK(parsed->layer(id).attrs == graph.layer(id).attrs);
      CHECK(parsed->layer(id).output_shape == graph.layer(id).output_shape);
    }
  }
}

TEST_CASE("one rule for a job's model options, and a key naming every option", "[zoo]") {
  CHECK(JobModelOptions(0, 0, "synthetic").num_classes == 1000);
  CHECK(JobModelOptions(0, 0, "cifar10").num_classes == 10);
  CHECK(JobModelOptions(7, 0, "cifar10").num_classes == 7);
  CHECK(JobModelOptions(0, 64, "cifar10").image_size == 64);
  CHECK(JobModelOptions(0, 0, "cifar10").image_size == 0);  // the model's; images are resized
  // The key resolves the model's defaults: equal graphs, equal keys; different graphs, not.
  const ModelOptions defaults;
  ModelOptions spelled_out;
  spelled_out.image_size = 224;
  CHECK(ModelKey("resnet50", defaults) == "resnet50/classes=1000/image=224/aux_logits=1");
  CHECK(ModelKey("resnet50", spelled_out) == ModelKey("resnet50", defaults));
  CHECK(ModelKey("resnet50", JobModelOptions(10, 0, "")) != ModelKey("resnet50", defaults));
  CHECK(ModelKey("resnet50", JobModelOptions(0, 128, "")) != ModelKey("resnet50", defaults));
  ModelOptions no_aux;
  no_aux.aux_logits = false;
  CHECK(ModelKey("inception_v3", no_aux) != ModelKey("inception_v3", defaults));
  CHECK(ModelKey("inception_v3", defaults) == "inception_v3/classes=1000/image=299/aux_logits=1");
}

TEST_CASE("gpt_tiny is a 2-block pre-LN GPT over 64 byte tokens", "[zoo][tokens]") {
  const Graph gpt = Build("gpt_tiny");
  CHECK(gpt.input_shape() == Shape{64});
  CHECK(gpt.input_dtype() == DType::kInt64);
  CHECK(gpt.outputs() == std::vector<GraphOutput>{{"lm_head", 1.0}});
  CHECK(LayerNamed(gpt, "lm_head").output_shape == Shape{64, 256});
  CHECK(LayerNamed(gpt, "transformer.wte").output_shape == Shape{64, 64});
  // Parameters by hand, D = 64, V = 256, 64 positions:
  //   wte 256 x 64 = 16384; wpe 64 x 64 = 4096;
  //   per block: ln_1 128, attn 4 D^2 + 4 D = 16640, ln_2 128, c_fc 64 x 256 + 256 = 16640,
  //   c_proj 256 x 64 + 64 = 16448: 49984, two blocks 99968;
  //   ln_f 128; lm_head 64 x 256 = 16384 (no bias).
  CHECK(LayerNamed(gpt, "transformer.h.0.attn").params == 16640);
  CHECK(LayerNamed(gpt, "transformer.h.1.mlp.c_fc").params == 16640);
  CHECK(gpt.total_params() == 16384 + 4096 + 2 * 49984 + 128 + 16384);
  CHECK(gpt.num_layers() == 2 + 2 * 8 + 2);
  const std::vector<std::string> block = {"transformer.h.0.ln_1",       "transformer.h.0.attn",
                                          "transformer.h.0.add_attn",   "transformer.h.0.ln_2",
                                          "transformer.h.0.mlp.c_fc",   "transformer.h.0.mlp.act",
                                          "transformer.h.0.mlp.c_proj", "transformer.h.0.add_mlp"};
  for (size_t i = 0; i < block.size(); ++i)
    CHECK(gpt.layer(static_cast<int>(2 + i)).name == block[i]);
  const Layer& attn = LayerNamed(gpt, "transformer.h.1.attn");
  CHECK(attn.attrs.causal);
  CHECK(attn.attrs.num_heads == 4);
  CHECK(attn.attrs.dropout == 0.0);
  CHECK(LayerNamed(gpt, "transformer.h.0.mlp.act").attrs.approximate == "tanh");
  CHECK(LayerNamed(gpt, "transformer.h.0.add_attn").inputs ==
        std::vector<std::string>{"transformer.wpe", "transformer.h.0.attn"});
  CHECK_FALSE(LayerNamed(gpt, "lm_head").attrs.bias);
  const auto state = StateDict(gpt);
  for (const char* key :
       {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.attn.in_proj_weight",
        "transformer.h.1.attn.out_proj.bias", "transformer.ln_f.weight", "lm_head.weight"}) {
    CHECK(state.count(key) == 1);
  }
  CHECK(state.count("lm_head.bias") == 0);

  // image_size is the context: shorter is fine, longer than the 64 positions is refused.
  ModelOptions context;
  context.image_size = 16;
  CHECK(Build("gpt_tiny", context).input_shape() == Shape{16});
  context.image_size = 65;
  StatusOr<Graph> too_long = BuildModel("gpt_tiny", context);
  REQUIRE_FALSE(too_long.ok());
  CHECK_THAT(too_long.status().message(),
             Catch::Contains("transformer.wpe") && Catch::Contains("max_positions"));
}

TEST_CASE("vit_b_16 is torchvision's VisionTransformer with its module paths", "[zoo][vit]") {
  const Graph vit = Build("vit_b_16");
  CHECK(vit.input_shape() == Shape{3, 224, 224});
  CHECK(vit.outputs() == std::vector<GraphOutput>{{"heads.head", 1.0}});
  CHECK(LayerNamed(vit, "conv_proj").output_shape == Shape{768, 14, 14});
  CHECK(LayerNamed(vit, "reshape").output_shape == Shape{768, 196});
  CHECK(LayerNamed(vit, "permute").output_shape == Shape{196, 768});
  CHECK(LayerNamed(vit, "class_token").output_shape == Shape{197, 768});
  CHECK(LayerNamed(vit, "encoder.pos_embedding").attrs.bare_parameter);
  CHECK(LayerNamed(vit, "encoder.ln").output_shape == Shape{197, 768});
  CHECK(LayerNamed(vit, "getitem").output_shape == Shape{768});
  CHECK(LayerNamed(vit, "heads.head").output_shape == Shape{1000});
  // Per block, in torchvision's order: ln_1, self_attention, dropout, add, ln_2, mlp.0-4, add_1.
  const std::string p = "encoder.layers.encoder_layer_11.";
  const std::vector<std::string> block = {
      p + "ln_1",  p + "self_attention", p + "dropout", p + "add",   p + "ln_2", p + "mlp.0",
      p + "mlp.1", p + "mlp.2",          p + "mlp.3",   p + "mlp.4", p + "add_1"};
  const int first = *vit.FindLayer(block[0]);
  for (size_t i = 0; i < block.size(); ++i) {
    CHECK(vit.layer(first + static_cast<int>(i)).name == block[i]);
  }
  CHECK(vit.num_layers() == 6 + 12 * 11 + 3);
  const Layer& attn = LayerNamed(vit, p + "self_attention");
  CHECK_FALSE(attn.attrs.causal);
  CHECK(attn.attrs.num_heads == 12);
  CHECK(LayerNamed(vit, p + "ln_1").attrs.eps == 1e-6);
  CHECK(LayerNamed(vit, p + "mlp.1").attrs.approximate == "none");
  CHECK(LayerNamed(vit, p + "mlp.2").attrs.p == 0.0);
  CHECK(LayerNamed(vit, p + "add").inputs ==
        std::vector<std::string>{p + "dropout", "encoder.layers.encoder_layer_10.add_1"});
  const auto state = StateDict(vit);
  CHECK(state.at("class_token").shape == Shape{1, 1, 768});
  CHECK(state.at("encoder.pos_embedding").shape == Shape{1, 197, 768});
  CHECK(state.at(p + "self_attention.in_proj_weight").shape == Shape{2304, 768});
  CHECK(state.at(p + "mlp.3.weight").shape == Shape{768, 3072});
  // Forward FLOPs per image, a multiply-add counting 2: about 35.2e9, twice torchvision's listed
  // 17.56 "GFLOPS" (which count a multiply-add once) up to the softmax, norms and biases.
  CHECK(vit.total_forward_flops() > 35.0e9);
  CHECK(vit.total_forward_flops() < 35.5e9);

  // Other image sizes: a multiple of the patch, the position embedding grows with the tokens.
  ModelOptions larger;
  larger.image_size = 384;
  CHECK(LayerNamed(Build("vit_b_16", larger), "encoder.pos_embedding").output_shape ==
        Shape{577, 768});
  larger.image_size = 200;
  StatusOr<Graph> uneven = BuildModel("vit_b_16", larger);
  REQUIRE_FALSE(uneven.ok());
  CHECK_THAT(uneven.status().message(), Catch::Contains("multiple of the patch size 16"));
  larger.image_size = 8;
  CHECK_FALSE(BuildModel("vit_b_16", larger).ok());
}

}  // namespace
}  // namespace deepool::planner::zoo
