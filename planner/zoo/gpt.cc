// gpt_tiny: a two-block GPT-2-style (pre-LN) decoder over byte tokens, small enough to train in
// the runtime's tests on a CPU. Layer names follow Hugging Face's GPT2LMHeadModel module paths
// (transformer.wte, transformer.h.0.ln_1, ..., lm_head); the residual adds, which are functional
// in GPT-2, are layers named after the block that calls them (transformer.h.0.add_attn,
// transformer.h.0.add_mlp). Differences from GPT-2: attention is nn.MultiheadAttention's
// (in_proj_weight [3D, D] rather than c_attn's Conv1D [D, 3D]), the MLP's c_fc and c_proj are
// nn.Linear (weights transposed against GPT-2's Conv1D), there is no dropout, and lm_head is not
// tied to wte.
#include <string>

#include "planner/zoo/layer_list_builder.h"
#include "planner/zoo/models.h"

namespace deepool::planner::zoo::internal {
namespace {

constexpr int64_t kVocab = 256;  // bytes
constexpr int64_t kMaxPositions = 64;
constexpr int64_t kDim = 64;
constexpr int64_t kHeads = 4;
constexpr int kBlocks = 2;

// x + attn(ln_1(x)), then that + mlp(ln_2(that)).
std::string Block(LayerListBuilder& b, const std::string& prefix, const std::string& x) {
  std::string h = b.LayerNorm(prefix + ".ln_1", x, kDim);
  h = b.MultiheadAttention(prefix + ".attn", h, kDim, kHeads, /*causal=*/true);
  const std::string attended = b.Add(prefix + ".add_attn", {x, h});
  h = b.LayerNorm(prefix + ".ln_2", attended, kDim);
  h = b.Linear(prefix + ".mlp.c_fc", h, kDim, 4 * kDim);
  h = b.Gelu(prefix + ".mlp.act", h, "tanh");
  h = b.Linear(prefix + ".mlp.c_proj", h, 4 * kDim, kDim);
  return b.Add(prefix + ".add_mlp", {attended, h});
}

}  // namespace

StatusOr<Graph> BuildGptTiny(int64_t context) {
  LayerListBuilder b;
  std::string x = b.Embedding("transformer.wte", std::string(kGraphInputName), kVocab, kDim);
  x = b.PositionEmbedding("transformer.wpe", x, kMaxPositions);
  for (int i = 0; i < kBlocks; ++i) x = Block(b, "transformer.h." + std::to_string(i), x);
  x = b.LayerNorm("transformer.ln_f", x, kDim);
  x = b.Linear("lm_head", x, kDim, kVocab, /*bias=*/false);
  return Graph::Create("gpt_tiny", Shape{context}, std::move(b).Take(), {GraphOutput{x, 1.0}},
                       DType::kInt64);
}

}  // namespace deepool::planner::zoo::internal
