// Tied parameters in the graph IR: JSON form, validation, and parameters counted once.
#include "planner/tied_parameters.h"

#include <catch2/catch.hpp>
#include <string>

#include "planner/zoo/zoo.h"

namespace deepool::planner {
namespace {

// wte: 16 x 4 embedding; head: a 4 -> `out` linear without bias, its weight tied as `tied`.
std::string TokenGraph(const std::string& tied, int64_t out = 16) {
  return R"({"format":"deepool.graph","version":1,"input":{"shape":[8]},"input_dtype":"int64",
    "layers":[{"name":"wte","op":"embedding","inputs":["input"],"num_embeddings":16,"embedding_dim":4},
              {"name":"ln","op":"layernorm","inputs":["wte"],"normalized_shape":[4]},
              {"name":"head","op":"linear","inputs":["ln"],"out_features":)" +
         std::to_string(out) + R"(,"bias":false,"tied":)" + tied + "}]}";
}

std::string ErrorOf(const std::string& text) {
  auto graph = ParseGraphJson(text);
  REQUIRE_FALSE(graph.ok());
  return graph.status().message();
}

TEST_CASE("A tied parameter resolves to its source and counts once", "[graph][tied]") {
  auto graph = ParseGraphJson(TokenGraph(R"({"weight":"wte.weight"})"));
  INFO(graph.status().ToString());
  REQUIRE(graph.ok());
  const Layer& head = graph->layer(*graph->FindLayer("head"));
  REQUIRE(head.tied.size() == 1);
  CHECK(head.tied[0].source_layer == *graph->FindLayer("wte"));
  CHECK(head.tied[0].source_parameter == "weight");
  CHECK(head.tied[0].elements == 64);
  CHECK(head.params == 64);                // the layer still uses (and syncs) its weight
  CHECK(graph->total_params() == 64 + 8);  // wte and ln; head's weight is wte's

  auto back = ParseGraphJson(GraphToJson(*graph));
  REQUIRE(back.ok());
  CHECK(back->layer(*back->FindLayer("head")).tied == head.tied);
  CHECK(back->total_params() == graph->total_params());
}

TEST_CASE("A tie is refused with the layer and the reason", "[graph][tied]") {
  CHECK_THAT(ErrorOf(TokenGraph(R"({"weight":"wte.bias"})")),
             Catch::Contains("layer \"head\"") && Catch::Contains("field \"tied\"") &&
                 Catch::Contains("no layer has a parameter"));
  CHECK_THAT(ErrorOf(TokenGraph(R"({"weight":"wte.weight"})", 15)),
             Catch::Contains("shapes differ: [15, 4] and [16, 4]"));
  CHECK_THAT(ErrorOf(TokenGraph(R"({"bias":"wte.weight"})")),
             Catch::Contains("the layer has no such parameter"));
  CHECK_THAT(ErrorOf(TokenGraph(R"({"weight":"head.weight"})")),
             Catch::Contains("a parameter of the same layer"));
  CHECK_THAT(ErrorOf(TokenGraph(R"(["wte.weight"])")),
             Catch::Contains("must map parameter names to state_dict keys"));
}

TEST_CASE("A tie to a tied parameter is refused", "[graph][tied]") {
  auto graph = ParseGraphJson(TokenGraph(R"({"weight":"wte.weight"})"));
  REQUIRE(graph.ok());
  std::vector<Layer> layers = graph->layers();
  Layer second = layers.back();
  second.name = "head2";
  second.inputs = {"ln"};
  second.tied = {TiedParameter("weight", "head.weight")};
  layers.push_back(second);
  auto chained = Graph::Create("chain", graph->input_shape(), layers,
                               {{"head", 1.0}, {"head2", 1.0}}, DType::kInt64);
  REQUIRE_FALSE(chained.ok());
  CHECK_THAT(chained.status().message(), Catch::Contains("itself tied"));
}

TEST_CASE("Parameter shapes add up to every zoo layer's named parameter count", "[graph][tied]") {
  for (const char* name : {"resnet50", "inception_v3", "gpt_tiny", "vit_tiny", "vgg16"}) {
    auto graph = zoo::BuildModel(name);
    REQUIRE(graph.ok());
    for (int id = 0; id < graph->num_layers(); ++id) {
      int64_t elements = 0;
      for (const auto& p : LayerParameterShapes(*graph, id)) elements += NumElements(p.shape);
      const Layer& layer = graph->layer(id);
      INFO(name << " " << layer.name);
      const bool bare = layer.op == Op::kClassToken || layer.attrs.bare_parameter;
      CHECK(elements == (bare ? 0 : layer.params));  // bare parameters are left out
    }
  }
}

}  // namespace
}  // namespace deepool::planner
