// Vision transformers as torchvision's VisionTransformer builds them: vit_b_16 and vit_tiny.
// Layer names are torchvision's module paths, so "<layer>.<param>" is its state_dict key; the two
// bare parameters are layers whose own name is the key: class_token and encoder.pos_embedding.
// The functional steps of torchvision's forward are layers named as torch.fx names them:
// "reshape" (conv_proj's [D, h, w] flattened to [D, h*w]), "permute" (to [h*w, D]), the
// residual adds "encoder.layers.encoder_layer_<i>.add" and "add_1", and "getitem" (x[:, 0], the
// class token's output). Dropout layers with p = 0 are kept, as torchvision has them.
#include <string>

#include "planner/zoo/layer_list_builder.h"
#include "planner/zoo/models.h"

namespace deepool::planner::zoo::internal {
namespace {

constexpr double kLayerNormEps = 1e-6;  // torchvision's ViT norm_layer

// x + dropout(self_attention(ln_1(x))), then that + mlp(ln_2(that)) (torchvision's EncoderBlock).
std::string EncoderBlock(LayerListBuilder& b, const VitConfig& c, const std::string& prefix,
                         const std::string& x) {
  std::string h = b.LayerNorm(prefix + ".ln_1", x, c.hidden_dim, kLayerNormEps);
  h = b.MultiheadAttention(prefix + ".self_attention", h, c.hidden_dim, c.num_heads,
                           /*causal=*/false);
  h = b.Dropout(prefix + ".dropout", h, 0.0);
  const std::string attended = b.Add(prefix + ".add", {h, x});
  h = b.LayerNorm(prefix + ".ln_2", attended, c.hidden_dim, kLayerNormEps);
  h = b.Linear(prefix + ".mlp.0", h, c.hidden_dim, c.mlp_dim);
  h = b.Gelu(prefix + ".mlp.1", h);
  h = b.Dropout(prefix + ".mlp.2", h, 0.0);
  h = b.Linear(prefix + ".mlp.3", h, c.mlp_dim, c.hidden_dim);
  h = b.Dropout(prefix + ".mlp.4", h, 0.0);
  return b.Add(prefix + ".add_1", {attended, h});
}

}  // namespace

StatusOr<Graph> BuildVisionTransformer(const VitConfig& c, int64_t image_size,
                                       int64_t num_classes) {
  if (image_size % c.patch_size != 0) {
    return InvalidArgumentError("image_size " + std::to_string(image_size) +
                                " is not a multiple of the patch size " +
                                std::to_string(c.patch_size));
  }
  const int64_t side = image_size / c.patch_size;
  LayerListBuilder b;
  std::string x = b.Conv2d("conv_proj", std::string(kGraphInputName),
                           ConvSpec(3, c.hidden_dim, Sq(c.patch_size)).Stride(Sq(c.patch_size)));
  x = b.Flatten("reshape", x, 2, 3);    // [D, h, w] -> [D, h*w]
  x = b.Transpose("permute", x, 1, 2);  // -> [h*w, D]
  x = b.ClassToken("class_token", x);   // -> [h*w + 1, D]
  x = b.BarePositionEmbedding("encoder.pos_embedding", x, side * side + 1);
  x = b.Dropout("encoder.dropout", x, 0.0);
  for (int i = 0; i < c.num_layers; ++i) {
    x = EncoderBlock(b, c, "encoder.layers.encoder_layer_" + std::to_string(i), x);
  }
  x = b.LayerNorm("encoder.ln", x, c.hidden_dim, kLayerNormEps);
  x = b.Select("getitem", x, 1, 0);  // the class token
  x = b.Linear("heads.head", x, c.hidden_dim, num_classes);
  return Graph::Create(c.name, Shape{3, image_size, image_size}, std::move(b).Take());
}

}  // namespace deepool::planner::zoo::internal
