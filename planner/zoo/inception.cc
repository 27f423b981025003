// Inception-v3 as torchvision.models.inception builds it (transform_input off: it is input
// preprocessing, not a layer). With aux_logits the auxiliary classifier reads Mixed_6e's output,
// as torchvision's _forward does in training mode, and is the graph's second output with loss
// weight 0.4 (the weight torchvision's reference training recipe gives it).
#include <string>
#include <utility>
#include <vector>

#include "planner/zoo/layer_list_builder.h"
#include "planner/zoo/models.h"

namespace deepool::planner::zoo::internal {
namespace {

constexpr double kBasicConvBatchNormEps = 1e-3;
constexpr double kAuxLossWeight = 0.4;

// Adds the Inception-A..E blocks and BasicConv2d units; every unit returns its output's name.
class InceptionBuilder {
 public:
  // torchvision's BasicConv2d: conv (no bias), bn (eps 1e-3), functional relu.
  std::string BasicConv(const std::string& prefix, const std::string& input, ConvSpec spec) {
    std::string x = b_.Conv2d(prefix + ".conv", input, spec.NoBias());
    x = b_.BatchNorm2d(prefix + ".bn", x, kBasicConvBatchNormEps);
    return b_.Relu(prefix + ".relu", x);
  }

  // F.avg_pool2d(x, kernel_size=3, stride=1, padding=1) followed by the branch_pool BasicConv2d.
  std::string AvgPoolBranch(const std::string& m, const std::string& x, int64_t in, int64_t out) {
    std::string pooled = b_.AvgPool2d(m + ".branch_pool_avg", x, Sq(3), Sq(1), Sq(1));
    return BasicConv(m + ".branch_pool", pooled, ConvSpec(in, out, Sq(1)));
  }

  std::string InceptionA(const std::string& m, const std::string& x, int64_t in,
                         int64_t pool_features) {
    std::string b1 = BasicConv(m + ".branch1x1", x, ConvSpec(in, 64, Sq(1)));
    std::string b5 = BasicConv(m + ".branch5x5_1", x, ConvSpec(in, 48, Sq(1)));
    b5 = BasicConv(m + ".branch5x5_2", b5, ConvSpec(48, 64, Sq(5)).Padding(Sq(2)));
    std::string b3 = BasicConv(m + ".branch3x3dbl_1", x, ConvSpec(in, 64, Sq(1)));
    b3 = BasicConv(m + ".branch3x3dbl_2", b3, ConvSpec(64, 96, Sq(3)).Padding(Sq(1)));
    b3 = BasicConv(m + ".branch3x3dbl_3", b3, ConvSpec(96, 96, Sq(3)).Padding(Sq(1)));
    std::string pool = AvgPoolBranch(m, x, in, pool_features);
    return b_.Concat(m + ".concat", {b1, b5, b3, pool});
  }

  std::string InceptionB(const std::string& m, const std::string& x, int64_t in) {
    std::string b3 = BasicConv(m + ".branch3x3", x, ConvSpec(in, 384, Sq(3)).Stride(Sq(2)));
    std::string bd = BasicConv(m + ".branch3x3dbl_1", x, ConvSpec(in, 64, Sq(1)));
    bd = BasicConv(m + ".branch3x3dbl_2", bd, ConvSpec(64, 96, Sq(3)).Padding(Sq(1)));
    bd = BasicConv(m + ".branch3x3dbl_3", bd, ConvSpec(96, 96, Sq(3)).Stride(Sq(2)));
    std::string pool = b_.MaxPool2d(m + ".branch_pool_max", x, Sq(3), Sq(2));
    return b_.Concat(m + ".concat", {b3, bd, pool});
  }

  std::string InceptionC(const std::string& m, const std::string& x, int64_t in, int64_t c7) {
    const Pair k1x7{1, 7}, k7x1{7, 1}, p1x7{0, 3}, p7x1{3, 0};
    std::string b1 = BasicConv(m + ".branch1x1", x, ConvSpec(in, 192, Sq(1)));
    std::string b7 = BasicConv(m + ".branch7x7_1", x, ConvSpec(in, c7, Sq(1)));
    b7 = BasicConv(m + ".branch7x7_2", b7, ConvSpec(c7, c7, k1x7).Padding(p1x7));
    b7 = BasicConv(m + ".branch7x7_3", b7, ConvSpec(c7, 192, k7x1).Padding(p7x1));
    std::string bd = BasicConv(m + ".branch7x7dbl_1", x, ConvSpec(in, c7, Sq(1)));
    bd = BasicConv(m + ".branch7x7dbl_2", bd, ConvSpec(c7, c7, k7x1).Padding(p7x1));
    bd = BasicConv(m + ".branch7x7dbl_3", bd, ConvSpec(c7, c7, k1x7).Padding(p1x7));
    bd = BasicConv(m + ".branch7x7dbl_4", bd, ConvSpec(c7, c7, k7x1).Padding(p7x1));
    bd = BasicConv(m + ".branch7x7dbl_5", bd, ConvSpec(c7, 192, k1x7).Padding(p1x7));
    std::string pool = AvgPoolBranch(m, x, in, 192);
    return b_.Concat(m + ".concat", {b1, b7, bd, pool});
  }

  std::string InceptionD(const std::string& m, const std::string& x, int64_t in) {
    std::string b3 = BasicConv(m + ".branch3x3_1", x, ConvSpec(in, 192, Sq(1)));
    b3 = BasicConv(m + ".branch3x3_2", b3, ConvSpec(192, 320, Sq(3)).Stride(Sq(2)));
    std::string b7 = BasicConv(m + ".branch7x7x3_1", x, ConvSpec(in, 192, Sq(1)));
    b7 = BasicConv(m + ".branch7x7x3_2", b7, ConvSpec(192, 192, Pair{1, 7}).Padding(Pair{0, 3}));
    b7 = BasicConv(m + ".branch7x7x3_3", b7, ConvSpec(192, 192, Pair{7, 1}).Padding(Pair{3, 0}));
    b7 = BasicConv(m + ".branch7x7x3_4", b7, ConvSpec(192, 192, Sq(3)).Stride(Sq(2)));
    std::string pool = b_.MaxPool2d(m + ".branch_pool_max", x, Sq(3), Sq(2));
    return b_.Concat(m + ".concat", {b3, b7, pool});
  }

  std::string InceptionE(const std::string& m, const std::string& x, int64_t in) {
    const Pair k1x3{1, 3}, k3x1{3, 1}, p1x3{0, 1}, p3x1{1, 0};
    std::string b1 = BasicConv(m + ".branch1x1", x, ConvSpec(in, 320, Sq(1)));
    std::string b3 = BasicConv(m + ".branch3x3_1", x, ConvSpec(in, 384, Sq(1)));
    std::string b3a = BasicConv(m + ".branch3x3_2a", b3, ConvSpec(384, 384, k1x3).Padding(p1x3));
    std::string b3b = BasicConv(m + ".branch3x3_2b", b3, ConvSpec(384, 384, k3x1).Padding(p3x1));
    b3 = b_.Concat(m + ".branch3x3_concat", {b3a, b3b});
    std::string bd = BasicConv(m + ".branch3x3dbl_1", x, ConvSpec(in, 448, Sq(1)));
    bd = BasicConv(m + ".branch3x3dbl_2", bd, ConvSpec(448, 384, Sq(3)).Padding(Sq(1)));
    std::string bda = BasicConv(m + ".branch3x3dbl_3a", bd, ConvSpec(384, 384, k1x3).Padding(p1x3));
    std::string bdb = BasicConv(m + ".branch3x3dbl_3b", bd, ConvSpec(384, 384, k3x1).Padding(p3x1));
    bd = b_.Concat(m + ".branch3x3dbl_concat", {bda, bdb});
    std::string pool = AvgPoolBranch(m, x, in, 192);
    return b_.Concat(m + ".concat", {b1, b3, bd, pool});
  }

  std::string InceptionAux(const std::string& m, const std::string& x, int64_t in,
                           int64_t num_classes) {
    std::string y = b_.AvgPool2d(m + ".avg_pool", x, Sq(5), Sq(3));
    y = BasicConv(m + ".conv0", y, ConvSpec(in, 128, Sq(1)));
    y = BasicConv(m + ".conv1", y, ConvSpec(128, 768, Sq(5)));
    y = b_.AdaptiveAvgPool2d(m + ".adaptive_avg_pool", y, Sq(1));
    y = b_.Flatten(m + ".flatten", y);
    return b_.Linear(m + ".fc", y, 768, num_classes);
  }

  LayerListBuilder& layers() { return b_; }

 private:
  LayerListBuilder b_;
};

}  // namespace

StatusOr<Graph> BuildInceptionV3(int64_t image_size, int64_t num_classes, bool aux_logits) {
  InceptionBuilder ib;
  LayerListBuilder& b = ib.layers();
  std::string x = std::string(kGraphInputName);
  x = ib.BasicConv("Conv2d_1a_3x3", x, ConvSpec(3, 32, Sq(3)).Stride(Sq(2)));
  x = ib.BasicConv("Conv2d_2a_3x3", x, ConvSpec(32, 32, Sq(3)));
  x = ib.BasicConv("Conv2d_2b_3x3", x, ConvSpec(32, 64, Sq(3)).Padding(Sq(1)));
  x = b.MaxPool2d("maxpool1", x, Sq(3), Sq(2));
  x = ib.BasicConv("Conv2d_3b_1x1", x, ConvSpec(64, 80, Sq(1)));
  x = ib.BasicConv("Conv2d_4a_3x3", x, ConvSpec(80, 192, Sq(3)));
  x = b.MaxPool2d("maxpool2", x, Sq(3), Sq(2));
  x = ib.InceptionA("Mixed_5b", x, 192, 32);
  x = ib.InceptionA("Mixed_5c", x, 256, 64);
  x = ib.InceptionA("Mixed_5d", x, 288, 64);
  x = ib.InceptionB("Mixed_6a", x, 288);
  x = ib.InceptionC("Mixed_6b", x, 768, 128);
  x = ib.InceptionC("Mixed_6c", x, 768, 160);
  x = ib.InceptionC("Mixed_6d", x, 768, 160);
  x = ib.InceptionC("Mixed_6e", x, 768, 192);
  std::vector<GraphOutput> outputs;
  std::string aux;
  if (aux_logits) aux = ib.InceptionAux("AuxLogits", x, 768, num_classes);
  x = ib.InceptionD("Mixed_7a", x, 768);
  x = ib.InceptionE("Mixed_7b", x, 1280);
  x = ib.InceptionE("Mixed_7c", x, 2048);
  x = b.AdaptiveAvgPool2d("avgpool", x, Sq(1));
  x = b.Dropout("dropout", x, 0.5);
  x = b.Flatten("flatten", x);
  x = b.Linear("fc", x, 2048, num_classes);
  outputs.push_back(GraphOutput{x, 1.0});
  if (aux_logits) outputs.push_back(GraphOutput{aux, kAuxLossWeight});
  return Graph::Create("inception_v3", Shape{3, image_size, image_size}, std::move(b).Take(),
                       std::move(outputs));
}

}  // namespace deepool::planner::zoo::internal
