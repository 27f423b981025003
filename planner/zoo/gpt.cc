// GPT-2-style (pre-LN) decoders. Layer names follow Hugging Face's GPT2LMHeadModel module paths
// (transformer.wte, transformer.h.0.ln_1, ..., lm_head); the residual adds, which are functional
// in GPT-2, are layers named after the block that calls them (transformer.h.0.add_attn,
// transformer.h.0.add_mlp). Differences from Hugging Face's GPT-2: attention is
// nn.MultiheadAttention's (in_proj_weight [3D, D] rather than c_attn's Conv1D [D, 3D]), the MLP's
// c_fc and c_proj are nn.Linear (weights transposed against GPT-2's Conv1D), and there is no
// dropout. The state_dict keys and shapes are those of the plain-PyTorch GPT-2 in
// tests/python/models/gpt2_small.py (docs/models.md).
//   gpt_tiny: two blocks over byte tokens, D=64, small enough to train in the runtime's tests on
//     a CPU; lm_head is not tied to wte.
//   gpt2: GPT-2 small, 12 blocks, D=768, 12 heads, vocabulary 50,257, context 1,024, lm_head.weight
//     tied to transformer.wte.weight: 124,439,808 parameters.
#include <string>
#include <utility>
#include <vector>

#include "planner/zoo/layer_list_builder.h"
#include "planner/zoo/models.h"

namespace deepool::planner::zoo::internal {
namespace {

struct GptConfig {
  int64_t vocab;
  int64_t max_positions;
  int64_t dim;
  int64_t heads;
  int blocks;
  bool tied_head;  // lm_head.weight is transformer.wte.weight
};

constexpr GptConfig kGptTiny{256, 64, 64, 4, 2, false};
constexpr GptConfig kGpt2Small{50257, 1024, 768, 12, 12, true};

// x + attn(ln_1(x)), then that + mlp(ln_2(that)).
std::string Block(LayerListBuilder& b, const GptConfig& c, const std::string& prefix,
                  const std::string& x) {
  std::string h = b.LayerNorm(prefix + ".ln_1", x, c.dim);
  h = b.MultiheadAttention(prefix + ".attn", h, c.dim, c.heads, /*causal=*/true);
  const std::string attended = b.Add(prefix + ".add_attn", {x, h});
  h = b.LayerNorm(prefix + ".ln_2", attended, c.dim);
  h = b.Linear(prefix + ".mlp.c_fc", h, c.dim, 4 * c.dim);
  h = b.Gelu(prefix + ".mlp.act", h, "tanh");
  h = b.Linear(prefix + ".mlp.c_proj", h, 4 * c.dim, c.dim);
  return b.Add(prefix + ".add_mlp", {attended, h});
}

StatusOr<Graph> BuildGpt(const std::string& name, const GptConfig& c, int64_t context) {
  LayerListBuilder b;
  std::string x = b.Embedding("transformer.wte", std::string(kGraphInputName), c.vocab, c.dim);
  x = b.PositionEmbedding("transformer.wpe", x, c.max_positions);
  for (int i = 0; i < c.blocks; ++i) x = Block(b, c, "transformer.h." + std::to_string(i), x);
  x = b.LayerNorm("transformer.ln_f", x, c.dim);
  x = b.Linear("lm_head", x, c.dim, c.vocab, /*bias=*/false);
  std::vector<Layer> layers = std::move(b).Take();
  if (c.tied_head) layers.back().tied.emplace_back("weight", "transformer.wte.weight");
  return Graph::Create(name, Shape{context}, std::move(layers), {GraphOutput{x, 1.0}},
                       DType::kInt64);
}

}  // namespace

StatusOr<Graph> BuildGptTiny(int64_t context) { return BuildGpt("gpt_tiny", kGptTiny, context); }

StatusOr<Graph> BuildGpt2(int64_t context) { return BuildGpt("gpt2", kGpt2Small, context); }

}  // namespace deepool::planner::zoo::internal
