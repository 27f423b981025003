// The zoo's gpt2: GPT-2 small with lm_head tied to wte (issue 41, point 4). Its state_dict keys
// and shapes are checked against the plain-PyTorch reference by
// tests/python/gpt2_zoo_test.py; here the graph's own facts.
#include <catch2/catch.hpp>
#include <string>

#include "planner/tied_parameters.h"
#include "planner/zoo/zoo.h"

namespace deepool::planner::zoo {
namespace {

TEST_CASE("gpt2 is GPT-2 small with its output layer tied to the token embedding",
          "[zoo][tokens][tied]") {
  auto built = BuildModel("gpt2");
  INFO(built.status().ToString());
  REQUIRE(built.ok());
  const Graph& gpt = *built;
  CHECK(gpt.input_shape() == Shape{1024});
  CHECK(gpt.input_dtype() == DType::kInt64);
  // GPT-2 small's count, as sum(p.numel() for p in model.parameters()) gives it: the tied
  // 50257 x 768 matrix once. Untied it would be 38,597,376 more.
  CHECK(gpt.total_params() == 124439808);
  const Layer& head = gpt.layer(*gpt.FindLayer("lm_head"));
  REQUIRE(head.tied.size() == 1);
  CHECK(head.tied[0].source == "transformer.wte.weight");
  CHECK(head.tied[0].elements == 50257 * 768);
  CHECK(head.output_shape == Shape{1024, 50257});
  CHECK(gpt.num_layers() == 2 + 12 * 8 + 2);
  const Layer& attn = gpt.layer(*gpt.FindLayer("transformer.h.11.attn"));
  CHECK(attn.attrs.num_heads == 12);
  CHECK(attn.attrs.causal);
  int64_t keys = 0;
  for (int id = 0; id < gpt.num_layers(); ++id) {
    keys += static_cast<int64_t>(LayerParameterShapes(gpt, id).size());
  }
  CHECK(keys == 149);  // wte, wpe, 12 x 12, ln_f 2, and lm_head.weight, the tied key

  ModelOptions context;
  context.image_size = 128;
  auto shorter = BuildModel("gpt2", context);
  REQUIRE(shorter.ok());
  CHECK(shorter->total_params() == 124439808);
  context.image_size = 1025;
  auto too_long = BuildModel("gpt2", context);
  REQUIRE_FALSE(too_long.ok());
  CHECK_THAT(too_long.status().message(), Catch::Contains("max_positions"));
}

}  // namespace
}  // namespace deepool::planner::zoo
