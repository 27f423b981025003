#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "planner/a100_import.h"
#include "planner/device_model.h"
#include "planner/profile_table.h"
#include "planner/zoo/zoo.h"
#include "tests/unit/reference_profiles.h"
#include "tests/unit/test_layers.h"

namespace deepool::planner {
namespace {

using deepool::testing::MakeLayer;
using deepool::testing::ZooModel;

LayerAttrs Conv(int64_t out, int64_t kernel, int64_t padding = 0, int64_t stride = 1,
                bool bias = true) {
  LayerAttrs attrs;
  attrs.out_channels = out;
  attrs.kernel_size = {kernel, kernel};
  attrs.padding = {padding, padding};
  attrs.stride = {stride, stride};
  attrs.bias = bias;
  return attrs;
}

const LayerProfileData* Find(const ProfileData& data, const std::string& name) {
  for (const LayerProfileData& layer : data.layers) {
    if (layer.name == name) return &layer;
  }
  return nullptr;
}

const BatchTime* AtBatch(const LayerProfileData& layer, int64_t batch) {
  for (const BatchTime& point : layer.batches) {
    if (point.batch == batch) return &point;
  }
  return nullptr;
}

// Sum of forward + backward over all imported layers at `batch`.
double TotalAt(const ProfileData& data, int64_t batch) {
  double total = 0;
  for (const LayerProfileData& layer : data.layers) {
    if (const BatchTime* point = AtBatch(layer, batch)) {
      total += point->forward_ms + point->backward_ms;
    }
  }
  return total;
}

// Sum of the file's raw row times at `batch` (what the layers' times must add up to).
double RowTotalAt(const ProfFile& file, int64_t batch) {
  double total = 0;
  for (const ProfRow& row : file.rows) {
    if (row.batch == batch) total += row.raw_forward_ms + row.raw_backward_ms;
  }
  return total;
}

// input [3,8,8] -> a (conv 3->4 3x3 pad 1) -> b (relu) -> c (maxpool 2) -> d (flatten)
//   -> e (linear 64->10)
Graph SmallChain() {
  LayerAttrs pool;
  pool.kernel_size = {2, 2};
  pool.stride = {2, 2};
  LayerAttrs fc;
  fc.out_features = 10;
  auto graph =
      Graph::Create("chain", {3, 8, 8},
                    {MakeLayer("a", Op::kConv2d, {"input"}, Conv(4, 3, 1)),
                     MakeLayer("b", Op::kRelu, {"a"}), MakeLayer("c", Op::kMaxPool2d, {"b"}, pool),
                     MakeLayer("d", Op::kFlatten, {"c"}), MakeLayer("e", Op::kLinear, {"d"}, fc)});
  REQUIRE(graph.ok());
  return *graph;
}

constexpr const char* kChainProf = R"(
   conv2d{"in_channels":3,"kernel_size":3,"out_channels":4,"padding":1,"stride":1}[2][3,8,8]   0.110   100   10
   ReLU2d{"inplace":true,"kernel_size":1,"padding":0,"stride":1}[2][4,8,8]   0.520    20  500
   maxPool2d{"kernel_size":2,"padding":0,"stride":2}[2][4,8,8]   0.030    10   20
   flatten{"kernel_size":1}[2][4,4,4]   0.010     5    5
   linear{"bias":true,"in_features":64,"out_features":10}[2]64   0.040    40    0
                                    SUM(avg)  0.711
   conv2d{"in_channels":3,"kernel_size":3,"out_channels":4,"padding":1,"stride":1}[1][3,8,8]   0.060    50   10
   ReLU2d{"inplace":true,"kernel_size":1,"padding":0,"stride":1}[1][4,8,8]   0.270    10  260
   maxPool2d{"kernel_size":2,"padding":0,"stride":2}[1][4,8,8]   0.020     8   12
   flatten{"kernel_size":1}[1][4,4,4]   0.010     5    5
   linear{"bias":true,"in_features":64,"out_features":10}[1]64   0.030    30    0
                                    SUM(avg)  0.390
)";

TEST_CASE(".prof rows parse, with the model sum per batch") {
  auto file = ParseProfFile(kChainProf);
  REQUIRE(file.ok());
  REQUIRE(file->rows.size() == 10);
  const ProfRow& conv = file->rows[0];
  CHECK(conv.kind == "conv2d");
  CHECK(conv.batch == 2);
  CHECK(conv.input_shape == Shape{3, 8, 8});
  CHECK(conv.raw_forward_ms == Approx(0.1));
  CHECK(conv.line == 2);
  CHECK(file->rows[4].input_shape == Shape{64});
  CHECK(file->model_sum_ms.at(2) == Approx(0.711));
  CHECK(file->model_sum_ms.at(1) == Approx(0.390));
}

TEST_CASE("a conv's backward time moves back from the ReLU row after it") {
  auto file = ParseProfFile(kChainProf);
  REQUIRE(file.ok());
  const ProfRow& conv = file->rows[0];
  const ProfRow& relu = file->rows[1];
  // The ReLU keeps 1.5x its forward (0.020 ms) as its own backward; the rest is the conv's.
  CHECK(relu.backward_ms == Approx(0.030));
  CHECK(conv.backward_ms == Approx(0.010 + 0.500 - 0.030));
  CHECK(conv.backward_ms + relu.backward_ms == Approx(conv.raw_backward_ms + relu.raw_backward_ms));
  // Rows that are not a conv/linear + ReLU pair keep their times.
  CHECK(file->rows[2].backward_ms == file->rows[2].raw_backward_ms);
  CHECK(file->rows[4].backward_ms == 0.0);
}

TEST_CASE(".prof parse errors name the line") {
  auto bad_times = ParseProfFile("conv2d{\"in_channels\":3}[2][3,8,8] 1.0 abc 2\n");
  REQUIRE_FALSE(bad_times.ok());
  CHECK_THAT(bad_times.status().message(), Catch::Contains("line 1"));
  auto bad_key = ParseProfFile("\n\nconv2d[2][3,8,8] 1.0 1 2\n");
  REQUIRE_FALSE(bad_key.ok());
  CHECK_THAT(bad_key.status().message(), Catch::Contains("line 3"));
  auto bad_shape = ParseProfFile("relu{}[2][3,x] 1.0 1 2\n");
  CHECK_FALSE(bad_shape.ok());
  auto sum_first = ParseProfFile("SUM(avg) 3.0\n");
  CHECK_FALSE(sum_first.ok());
  CHECK_FALSE(ParseProfFile("").ok());
}

TEST_CASE("rows match layers by op, parameters and input shape, not by name") {
  const Graph graph = SmallChain();
  auto imported = ImportA100Profile(kChainProf, graph);
  REQUIRE(imported.ok());
  CHECK(imported->unmatched_layers.empty());
  CHECK(imported->data.layers.size() == 5);
  const LayerProfileData* conv = Find(imported->data, "a");
  REQUIRE(conv != nullptr);
  CHECK(conv->op == "conv2d");
  REQUIRE(AtBatch(*conv, 1) != nullptr);
  CHECK(AtBatch(*conv, 1)->forward_ms == Approx(0.050));
  CHECK(AtBatch(*conv, 2)->backward_ms == Approx(0.480));
  CHECK(TotalAt(imported->data, 2) == Approx(0.710));

  // The same layers under a different shape (conv with 5 outputs) match nothing downstream of it.
  LayerAttrs fc;
  fc.out_features = 10;
  auto other = Graph::Create(
      "other", {3, 8, 8},
      {MakeLayer("x", Op::kConv2d, {"input"}, Conv(5, 3, 1)), MakeLayer("y", Op::kRelu, {"x"}),
       MakeLayer("z", Op::kFlatten, {"y"}), MakeLayer("w", Op::kLinear, {"z"}, fc)});
  REQUIRE(other.ok());
  auto mismatch = ImportA100Profile(kChainProf, *other);
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(mismatch.status().message(), Catch::Contains("no row matches"));
}

TEST_CASE("identical keys are averaged and shared by every matching layer") {
  // Two ReLUs of the same shape in the graph; two rows of that key per batch with different
  // times: both layers get the mean.
  auto graph =
      Graph::Create("twins", {4, 2, 2},
                    {MakeLayer("r1", Op::kRelu, {"input"}), MakeLayer("r2", Op::kRelu, {"r1"})});
  REQUIRE(graph.ok());
  const char* text =
      "ReLU2d{\"inplace\":true}[8][4,2,2] 0.1 10 20\n"
      "ReLU2d{\"inplace\":true}[8][4,2,2] 0.1 30 40\n";
  auto imported = ImportA100Profile(text, *graph);
  REQUIRE(imported.ok());
  for (const char* name : {"r1", "r2"}) {
    const LayerProfileData* layer = Find(imported->data, name);
    REQUIRE(layer != nullptr);
    CHECK(layer->batches.size() == 1);
    CHECK(layer->batches[0].forward_ms == Approx(0.020));
    CHECK(layer->batches[0].backward_ms == Approx(0.030));
  }
}

// stem (conv 3->8 1x1) -> torchvision Bottleneck(inplanes 8, planes 2, base_width 128) with a
// 1x1 downsample -> add -> relu
Graph BottleneckGraph() {
  LayerAttrs bn;
  auto graph =
      Graph::Create("bottleneck", {3, 8, 8},
                    {MakeLayer("stem", Op::kConv2d, {"input"}, Conv(8, 1)),
                     MakeLayer("b.conv1", Op::kConv2d, {"stem"}, Conv(4, 1, 0, 1, false)),
                     MakeLayer("b.bn1", Op::kBatchNorm2d, {"b.conv1"}, bn),
                     MakeLayer("b.relu1", Op::kRelu, {"b.bn1"}),
                     MakeLayer("b.conv2", Op::kConv2d, {"b.relu1"}, Conv(4, 3, 1, 1, false)),
                     MakeLayer("b.bn2", Op::kBatchNorm2d, {"b.conv2"}, bn),
                     MakeLayer("b.relu2", Op::kRelu, {"b.bn2"}),
                     MakeLayer("b.conv3", Op::kConv2d, {"b.relu2"}, Conv(8, 1, 0, 1, false)),
                     MakeLayer("b.bn3", Op::kBatchNorm2d, {"b.conv3"}, bn),
                     MakeLayer("b.downsample.0", Op::kConv2d, {"stem"}, Conv(8, 1, 0, 1, false)),
                     MakeLayer("b.downsample.1", Op::kBatchNorm2d, {"b.downsample.0"}, bn),
                     MakeLayer("b.add", Op::kAdd, {"b.bn3", "b.downsample.1"}),
                     MakeLayer("b.relu3", Op::kRelu, {"b.add"})});
  REQUIRE(graph.ok());
  return *graph;
}

TEST_CASE("a Bottleneck row is split over the block's layers by FLOPs") {
  const Graph graph = BottleneckGraph();
  const char* text =
      "ResnetBottleneck{\"base_width\":128,\"dilation\":1,\"downsampleParams\":[[8,8,1],8],"
      "\"groups\":1,\"inplanes\":8,\"planes\":2,\"stride\":1}[4][8,8,8]   3.000  1000  2000\n";
  auto imported = ImportA100Profile(text, graph);
  REQUIRE(imported.ok());
  CHECK(imported->unmatched_layers == std::vector<std::string>{"stem"});
  CHECK(imported->block_layers.size() == 12);
  double block_flops = 0;
  for (const Layer& layer : graph.layers()) {
    if (layer.name != "stem") block_flops += static_cast<double>(layer.forward_flops);
  }
  double forward = 0, backward = 0;
  for (const LayerProfileData& layer : imported->data.layers) {
    const BatchTime* point = AtBatch(layer, 4);
    REQUIRE(point != nullptr);
    forward += point->forward_ms;
    backward += point->backward_ms;
    const double share =
        static_cast<double>(graph.layer(*graph.FindLayer(layer.name)).forward_flops) / block_flops;
    INFO(layer.name);
    CHECK(point->forward_ms == Approx(1.0 * share));
    CHECK(point->backward_ms == Approx(2.0 * share));
  }
  CHECK(forward == Approx(1.0));
  CHECK(backward == Approx(2.0));

  // A row for a different block (no downsample) matches nothing.
  const char* other =
      "ResnetBottleneck{\"base_width\":128,\"dilation\":1,\"groups\":1,\"inplanes\":8,"
      "\"planes\":2}[4][8,8,8]   3.000  1000  2000\n";
  CHECK_FALSE(ImportA100Profile(other, graph).ok());
}

TEST_CASE("VGG-16 reference file imports onto the zoo's vgg16") {
  const Graph graph = ZooModel("vgg16");
  READ_REFERENCE_PROFILE_OR_SKIP(text, "A100_vgg.prof");
  auto imported = ImportA100Profile(text, graph);
  REQUIRE(imported.ok());
  // The file was profiled without dropout and without the (identity) adaptive pool.
  CHECK(imported->unmatched_layers ==
        std::vector<std::string>{"avgpool", "classifier.2", "classifier.5"});
  CHECK(imported->unused_row_keys == 0);
  auto file = ParseProfFile(text);
  REQUIRE(file.ok());
  for (const auto& [batch, sum_ms] : file->model_sum_ms) {
    INFO("batch " << batch);
    // Every row maps onto exactly one layer: the layers add up to the rows, and the rows to
    // the file's model line (which has ~30 us more: time outside the layers).
    CHECK(TotalAt(imported->data, batch) == Approx(RowTotalAt(*file, batch)).epsilon(1e-6));
    CHECK(TotalAt(imported->data, batch) == Approx(sum_ms).epsilon(0.01));
  }
  const LayerProfileData* conv = Find(imported->data, "features.2");
  const LayerProfileData* relu = Find(imported->data, "features.3");
  REQUIRE(conv != nullptr);
  REQUIRE(relu != nullptr);
  // Raw: conv 5457/20 us, ReLU 1205/14103 us at batch 64.
  CHECK(AtBatch(*relu, 64)->backward_ms == Approx(1.5 * 1.205));
  CHECK(AtBatch(*conv, 64)->backward_ms == Approx(0.020 + 14.103 - 1.5 * 1.205));
  CHECK(AtBatch(*conv, 64)->backward_ms > AtBatch(*conv, 64)->forward_ms);

  auto strict = ParseProfile(text, graph, {});
  REQUIRE_FALSE(strict.ok());
  CHECK(strict.status().code() == StatusCode::kNotFound);
  CHECK_THAT(strict.status().message(), Catch::Contains("avgpool, classifier.2, classifier.5"));

  auto fallback = MakeAnalyticalProfile(*DevicePreset("a100"));
  ProfileOptions options;
  options.fallback = fallback.get();
  auto table = ParseProfileTable(text, graph, options);
  REQUIRE(table.ok());
  CHECK((*table)->fallback_layers().size() == 3);
  CHECK((*table)->Time(graph, *graph.FindLayer("classifier.2"), 7).ok());
  CHECK((*table)->Time(graph, *graph.FindLayer("features.0"), 64).ok());
  CHECK((*table)->Time(graph, *graph.FindLayer("features.0"), 65).status().code() ==
        StatusCode::kOutOfRange);
}

TEST_CASE("WideResNet-101-2 reference file imports block rows onto the zoo's layers") {
  const Graph graph = ZooModel("wide_resnet101_2");
  READ_REFERENCE_PROFILE_OR_SKIP(text, "A100_wrn.prof");
  auto imported = ImportA100Profile(text, graph);
  REQUIRE(imported.ok());
  // The file has no row for the stem's batch norm; every block matched.
  CHECK(imported->unmatched_layers == std::vector<std::string>{"bn1"});
  CHECK(imported->unused_row_keys == 0);
  int adds = 0;
  for (const Layer& layer : graph.layers()) adds += layer.op == Op::kAdd;
  CHECK(adds == 33);
  CHECK(imported->block_layers.size() == graph.num_layers() - 7u);  // all but the stem and head
  auto file = ParseProfFile(text);
  REQUIRE(file.ok());
  CHECK(file->model_sum_ms.size() == 8);
  for (const auto& [batch, sum_ms] : file->model_sum_ms) {
    INFO("batch " << batch);
    // Block rows are split without loss; identical block rows are averaged, so allow 0.1%.
    CHECK(TotalAt(imported->data, batch) == Approx(RowTotalAt(*file, batch)).epsilon(0.001));
    CHECK(TotalAt(imported->data, batch) == Approx(sum_ms).epsilon(0.01));
  }
  auto strict = ParseProfile(text, graph, {});
  REQUIRE_FALSE(strict.ok());
  CHECK_THAT(strict.status().message(), Catch::Contains(": bn1"));
}

TEST_CASE("Inception-v3 reference file: convolutions and pools match, the rest is reported") {
  const Graph graph = ZooModel("inception_v3");
  READ_REFERENCE_PROFILE_OR_SKIP(text, "A100_inception.prof");
  auto imported = ImportA100Profile(text, graph);
  REQUIRE(imported.ok());
  std::map<Op, int> unmatched_ops;
  for (const std::string& name : imported->unmatched_layers) {
    const Layer& layer = graph.layer(*graph.FindLayer(name));
    ++unmatched_ops[layer.op];
    // Every main-path conv and pool has a row; the auxiliary classifier was not profiled.
    if (layer.op == Op::kConv2d || layer.op == Op::kMaxPool2d || layer.op == Op::kAvgPool2d) {
      INFO(name);
      CHECK(name.rfind("AuxLogits.", 0) == 0);
    }
  }
  CHECK(unmatched_ops[Op::kBatchNorm2d] > 90);
  CHECK(unmatched_ops[Op::kConcat] >= 11);
  CHECK(unmatched_ops[Op::kLinear] == 2);  // fc and AuxLogits.fc
  CHECK(imported->unused_row_keys == 0);

  auto file = ParseProfFile(text);
  REQUIRE(file.ok());
  CHECK(file->model_sum_ms.size() == 23);
  for (const auto& [batch, sum_ms] : file->model_sum_ms) {
    INFO("batch " << batch);
    CHECK(TotalAt(imported->data, batch) == Approx(RowTotalAt(*file, batch)).epsilon(0.005));
    CHECK(TotalAt(imported->data, batch) == Approx(sum_ms).epsilon(0.01));
  }
  auto strict = ParseProfile(text, graph, {});
  REQUIRE_FALSE(strict.ok());
  CHECK(strict.status().code() == StatusCode::kNotFound);
  for (const char* name : {"Conv2d_1a_3x3.bn", "Mixed_5b.concat", "Mixed_7c.concat", "fc",
                           "AuxLogits.conv0.conv", "dropout"}) {
    CHECK_THAT(strict.status().message(), Catch::Contains(name));
  }
}

}  // namespace
}  // namespace deepool::planner
