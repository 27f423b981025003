#include "planner/graph.h"

#include <catch2/catch.hpp>
#include <functional>

namespace deepool::planner {
namespace {

Layer Conv(std::string name, std::string input, int64_t out, int64_t k, int64_t stride = 1,
           int64_t pad = 0) {
  Layer l;
  l.name = std::move(name);
  l.op = Op::kConv2d;
  l.inputs = {std::move(input)};
  l.attrs.out_channels = out;
  l.attrs.kernel_size = {k, k};
  l.attrs.stride = {stride, stride};
  l.attrs.padding = {pad, pad};
  return l;
}

Layer Simple(std::string name, Op op, std::vector<std::string> inputs) {
  Layer l;
  l.name = std::move(name);
  l.op = op;
  l.inputs = std::move(inputs);
  return l;
}

Layer Linear(std::string name, std::string input, int64_t out) {
  Layer l = Simple(std::move(name), Op::kLinear, {std::move(input)});
  l.attrs.out_features = out;
  return l;
}

// A small branchy graph: conv -> {conv a, conv b} -> concat -> add(residual) -> pool -> fc.
std::vector<Layer> BranchyLayers() {
  std::vector<Layer> layers;
  layers.push_back(Conv("stem", "input", 8, 3, 1, 1));
  layers.push_back(Simple("stem.relu", Op::kRelu, {"stem"}));
  layers.push_back(Conv("a", "stem.relu", 4, 1));
  layers.push_back(Conv("b", "stem.relu", 4, 3, 1, 1));
  layers.push_back(Simple("cat", Op::kConcat, {"a", "b"}));
  layers.push_back(Simple("res", Op::kAdd, {"cat", "stem.relu"}));
  Layer pool = Simple("pool", Op::kAdaptiveAvgPool2d, {"res"});
  layers.push_back(pool);
  layers.push_back(Simple("flat", Op::kFlatten, {"pool"}));
  layers.push_back(Linear("fc", "flat", 10));
  return layers;
}

std::string ErrorOf(std::vector<Layer> layers, Shape input = {3, 8, 8}) {
  auto g = Graph::Create("g", std::move(input), std::move(layers));
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().code() == StatusCode::kInvalidArgument);
  return g.status().message();
}

TEST_CASE("shape inference and costs of a branchy graph", "[graph]") {
  auto g = Graph::Create("branchy", {3, 8, 8}, BranchyLayers());
  REQUIRE(g.ok());
  const Graph& graph = *g;
  auto at = [&](const char* name) { return graph.layer(*graph.FindLayer(name)); };
  CHECK(at("stem").output_shape == Shape{8, 8, 8});
  CHECK(at("stem").params == 8 * 3 * 9 + 8);
  CHECK(at("stem").forward_flops == 2 * 3 * 9 * 8 * 64 + 8 * 64);
  CHECK(at("cat").output_shape == Shape{8, 8, 8});
  CHECK(at("res").forward_flops == 8 * 64);
  CHECK(at("pool").output_shape == Shape{8, 1, 1});
  CHECK(at("flat").output_shape == Shape{8});
  CHECK(at("fc").output_shape == Shape{10});
  CHECK(at("fc").params == 8 * 10 + 10);
  CHECK(at("fc").output_bytes == 40);
  CHECK(graph.total_params() == (8 * 27 + 8) + (4 * 8 + 4) + (4 * 72 + 4) + 90);
  REQUIRE(graph.outputs().size() == 1);
  CHECK(graph.outputs()[0].layer == "fc");
  CHECK(graph.consumers(*graph.FindLayer("stem.relu")).size() == 3);
}

TEST_CASE("layers given out of order are sorted topologically", "[graph]") {
  auto layers = BranchyLayers();
  std::reverse(layers.begin(), layers.end());
  auto g = Graph::Create("reversed", {3, 8, 8}, layers);
  REQUIRE(g.ok());
  for (int i = 0; i < g->num_layers(); ++i) {
    for (int input : g->layer(i).input_ids) CHECK(input < i);
  }
}

TEST_CASE("window arithmetic matches torch", "[graph]") {
  std::vector<Layer> layers;
  layers.push_back(Conv("c", "input", 4, 7, 2, 3));  // 224 -> 112
  Layer pool = Simple("p", Op::kMaxPool2d, {"c"});
  pool.attrs.kernel_size = {3, 3};
  pool.attrs.stride = {2, 2};
  pool.attrs.ceil_mode = true;  // 112 -> ceil(109/2)+1 = 56
  layers.push_back(pool);
  Layer avg = Simple("a", Op::kAvgPool2d, {"p"});
  avg.attrs.kernel_size = {5, 5};
  avg.attrs.stride = {3, 3};  // 56 -> 18
  layers.push_back(avg);
  Layer dil = Conv("d", "a", 2, 3);
  dil.attrs.dilation = {2, 2};  // 18 -> 14
  layers.push_back(dil);
  auto g = Graph::Create("windows", {3, 224, 224}, layers);
  REQUIRE(g.ok());
  CHECK(g->layer(0).output_shape == Shape{4, 112, 112});
  CHECK(g->layer(1).output_shape == Shape{4, 56, 56});
  CHECK(g->layer(2).output_shape == Shape{4, 18, 18});
  CHECK(g->layer(3).output_shape == Shape{2, 14, 14});
}

TEST_CASE("linear, layernorm and gelu on token sequences", "[graph]") {
  std::vector<Layer> layers;
  Layer ln = Simple("ln", Op::kLayerNorm, {"input"});
  ln.attrs.normalized_shape = {16};
  layers.push_back(ln);
  layers.push_back(Linear("proj", "ln", 32));
  layers.push_back(Simple("act", Op::kGelu, {"proj"}));
  auto g = Graph::Create("tokens", {5, 16}, layers);
  REQUIRE(g.ok());
  CHECK(g->layer(0).params == 32);
  CHECK(g->layer(1).output_shape == Shape{5, 32});
  CHECK(g->layer(1).forward_flops == 2 * 5 * 16 * 32 + 5 * 32);
}

TEST_CASE("JSON round trip keeps every layer and attribute", "[graph][json]") {
  auto layers = BranchyLayers();
  Layer drop = Simple("drop", Op::kDropout, {"flat"});
  drop.attrs.p = 0.25;
  layers.push_back(drop);
  layers.back().name = "drop";
  layers[8].inputs = {"drop"};
  auto g = Graph::Create("rt", {3, 8, 8}, layers);
  REQUIRE(g.ok());
  std::string text = GraphToJson(*g);
  auto back = ParseGraphJson(text);
  REQUIRE(back.ok());
  REQUIRE(back->num_layers() == g->num_layers());
  for (int i = 0; i < g->num_layers(); ++i) {
    CHECK(back->layer(i).name == g->layer(i).name);
    CHECK(back->layer(i).op == g->layer(i).op);
    CHECK(back->layer(i).inputs == g->layer(i).inputs);
    CHECK(back->layer(i).attrs == g->layer(i).attrs);
    CHECK(back->layer(i).output_shape == g->layer(i).output_shape);
  }
  CHECK(back->outputs() == g->outputs());
  CHECK(GraphToJson(*back) == text);
}

TEST_CASE("validation: unknown op names the layer and field", "[graph][validation]") {
  auto r = ParseGraphJson(R"({"version":1,"input":{"shape":[4]},
      "layers":[{"name":"x","op":"conv3d","inputs":["input"]}]})");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("layer \"x\"") &&
                                       Catch::Contains("field \"op\"") &&
                                       Catch::Contains("conv3d"));
}

TEST_CASE("validation: unknown input", "[graph][validation]") {
  auto layers = BranchyLayers();
  layers[2].inputs = {"nowhere"};
  auto message = ErrorOf(layers);
  CHECK_THAT(message, Catch::Contains("layer \"a\"") && Catch::Contains("field \"inputs\"") &&
                          Catch::Contains("nowhere"));
}

TEST_CASE("validation: missing input", "[graph][validation]") {
  auto layers = BranchyLayers();
  layers[1].inputs.clear();
  CHECK_THAT(ErrorOf(layers), Catch::Contains("layer \"stem.relu\"") &&
                                  Catch::Contains("field \"inputs\"") &&
                                  Catch::Contains("missing"));
  auto r = ParseGraphJson(R"({"version":1,"input":{"shape":[4]},
      "layers":[{"name":"fc","op":"linear","out_features":2}]})");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("field \"inputs\""));
}

TEST_CASE("validation: cycle", "[graph][validation]") {
  std::vector<Layer> layers;
  layers.push_back(Simple("r0", Op::kRelu, {"input"}));
  layers.push_back(Simple("a", Op::kAdd, {"r0", "c"}));
  layers.push_back(Simple("b", Op::kRelu, {"a"}));
  layers.push_back(Simple("c", Op::kRelu, {"b"}));
  auto message = ErrorOf(layers, {4});
  CHECK_THAT(message, Catch::Contains("cycle") && Catch::Contains("field \"inputs\""));
  CHECK_THAT(message,
             Catch::Contains("\"a\"") || Catch::Contains("\"b\"") || Catch::Contains("\"c\""));
  std::vector<Layer> self = {Simple("s", Op::kRelu, {"s"})};
  CHECK_THAT(ErrorOf(self, {4}), Catch::Contains("layer \"s\"") && Catch::Contains("cycle"));
}

TEST_CASE("validation: shape mismatch", "[graph][validation]") {
  auto layers = BranchyLayers();
  layers[2] = Conv("a", "stem.relu", 4, 3, 2, 1);  // halves the spatial size: concat fails
  CHECK_THAT(ErrorOf(layers), Catch::Contains("layer \"cat\"") &&
                                  Catch::Contains("field \"inputs\"") &&
                                  Catch::Contains("[4, 4, 4]"));
  auto fc = BranchyLayers();
  fc[8].attrs.in_features = 7;
  CHECK_THAT(ErrorOf(fc),
             Catch::Contains("layer \"fc\"") && Catch::Contains("field \"in_features\""));
  std::vector<Layer> conv_on_vector = {Conv("c", "input", 4, 1)};
  CHECK_THAT(ErrorOf(conv_on_vector, {16}), Catch::Contains("layer \"c\""));
}

TEST_CASE("validation: non-positive size", "[graph][validation]") {
  auto layers = BranchyLayers();
  layers[0].attrs.out_channels = 0;
  CHECK_THAT(ErrorOf(layers), Catch::Contains("layer \"stem\"") &&
                                  Catch::Contains("field \"out_channels\"") &&
                                  Catch::Contains("positive"));
  auto kernel = BranchyLayers();
  kernel[3].attrs.kernel_size = {3, -1};
  CHECK_THAT(ErrorOf(kernel),
             Catch::Contains("layer \"b\"") && Catch::Contains("field \"kernel_size\""));
  auto r = Graph::Create("g", {3, 0, 8}, BranchyLayers());
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("input") && Catch::Contains("shape"));
}

TEST_CASE("validation: duplicate name", "[graph][validation]") {
  auto layers = BranchyLayers();
  layers[3].name = "a";
  CHECK_THAT(ErrorOf(layers), Catch::Contains("layer \"a\"") && Catch::Contains("field \"name\"") &&
                                  Catch::Contains("duplicate"));
}

TEST_CASE("validation: unknown field and wrong types name the field", "[graph][validation]") {
  auto r = ParseGraphJson(R"({"version":1,"input":{"shape":[4]},
      "layers":[{"name":"fc","op":"linear","inputs":["input"],"out_features":2,"kernel":3}]})");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("field \"kernel\""));
  auto t = ParseGraphJson(R"({"version":1,"input":{"shape":[4]},
      "layers":[{"name":"fc","op":"linear","inputs":["input"],"out_features":"two"}]})");
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.status().message(),
             Catch::Contains("layer \"fc\"") && Catch::Contains("field \"out_features\""));
  auto v = ParseGraphJson(R"({"version":7,"input":{"shape":[4]},"layers":[]})");
  REQUIRE_FALSE(v.ok());
  CHECK_THAT(v.status().message(), Catch::Contains("field \"version\""));
}

TEST_CASE("outputs: several sinks need explicit outputs, weights are kept", "[graph]") {
  std::vector<Layer> layers = {Linear("main", "input", 3), Linear("aux", "input", 3)};
  auto ambiguous = Graph::Create("two", {4}, layers);
  REQUIRE_FALSE(ambiguous.ok());
  CHECK_THAT(ambiguous.status().message(), Catch::Contains("outputs"));
  auto g = Graph::Create("two", {4}, layers, {{"main", 1.0}, {"aux", 0.4}});
  REQUIRE(g.ok());
  CHECK(g->output_ids().size() == 2);
  CHECK(g->outputs()[1].loss_weight == 0.4);
  auto bad = Graph::Create("two", {4}, layers, {{"main", 1.0}, {"ghost", 1.0}});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("ghost"));
}

// Token ids [T] -> wte -> wpe -> pre-LN attention with a residual add -> gelu(tanh) -> lm head.
std::vector<Layer> TokenLayers(int64_t max_positions = 8) {
  std::vector<Layer> layers;
  Layer wte = Simple("wte", Op::kEmbedding, {"input"});
  wte.attrs.num_embeddings = 50;
  wte.attrs.embedding_dim = 16;
  layers.push_back(wte);
  Layer wpe = Simple("wpe", Op::kPositionEmbedding, {"wte"});
  wpe.attrs.max_positions = max_positions;
  layers.push_back(wpe);
  Layer ln = Simple("ln", Op::kLayerNorm, {"wpe"});
  ln.attrs.normalized_shape = {16};
  layers.push_back(ln);
  Layer attn = Simple("attn", Op::kMultiheadAttention, {"ln"});
  attn.attrs.num_heads = 4;
  attn.attrs.causal = true;
  attn.attrs.dropout = 0.1;
  layers.push_back(attn);
  layers.push_back(Simple("add", Op::kAdd, {"attn", "wpe"}));
  Layer act = Simple("act", Op::kGelu, {"add"});
  act.attrs.approximate = "tanh";
  layers.push_back(act);
  Layer head = Linear("head", "act", 50);
  head.attrs.bias = false;
  layers.push_back(head);
  return layers;
}

StatusOr<Graph> TokenGraph(Shape input = {8}, int64_t max_positions = 8) {
  return Graph::Create("tokens", std::move(input), TokenLayers(max_positions), {}, DType::kInt64);
}

TEST_CASE("token ops: shapes and parameters and FLOPs", "[graph][tokens]") {
  auto g = TokenGraph();
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  CHECK(g->input_dtype() == DType::kInt64);
  CHECK(g->input_bytes() == 8 * 8);  // int64 ids
  const int64_t T = 8, D = 16, H = 4, V = 50;
  CHECK(g->layer(0).output_shape == Shape{T, D});
  CHECK(g->layer(0).params == V * D);
  CHECK(g->layer(0).forward_flops == 0);  // a gather
  CHECK(g->layer(1).output_shape == Shape{T, D});
  CHECK(g->layer(1).params == 8 * D);
  CHECK(g->layer(1).forward_flops == T * D);
  const Layer& attn = g->layer(3);
  CHECK(attn.output_shape == Shape{T, D});
  CHECK(attn.params == 3 * D * D + 3 * D + D * D + D);
  CHECK(attn.forward_flops == 2 * T * D * 3 * D + 2 * T * T * D + 4 * H * T * T + 2 * T * T * D +
                                  2 * T * D * D + 4 * T * D);
  CHECK(g->layer(6).output_shape == Shape{T, V});
  CHECK(g->layer(6).params == D * V);
  CHECK(g->layer(6).forward_flops == 2 * T * D * V);  // a GEMM with T rows
}

TEST_CASE("position_embedding refuses more tokens than max_positions", "[graph][tokens]") {
  CHECK(TokenGraph({8}, 8).ok());
  auto g = TokenGraph({9}, 8);
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.status().message(), Catch::Contains("layer \"wpe\"") &&
                                       Catch::Contains("field \"max_positions\"") &&
                                       Catch::Contains("9 tokens"));
}

TEST_CASE("int64 ids are read by embeddings only and embeddings read only ids", "[graph][tokens]") {
  // A float input into an embedding.
  auto float_input = Graph::Create("tokens", {8}, TokenLayers());
  REQUIRE_FALSE(float_input.ok());
  CHECK_THAT(float_input.status().message(),
             Catch::Contains("layer \"wte\"") && Catch::Contains("int64"));
  // Token ids into a linear layer.
  auto ids_to_linear = Graph::Create("tokens", {8}, {Linear("fc", "input", 3)}, {}, DType::kInt64);
  REQUIRE_FALSE(ids_to_linear.ok());
  CHECK_THAT(ids_to_linear.status().message(),
             Catch::Contains("layer \"fc\"") && Catch::Contains("only embedding"));
  // An embedding reading another layer's (float) output.
  auto layers = TokenLayers();
  Layer again = Simple("again", Op::kEmbedding, {"wte"});
  again.attrs.num_embeddings = 4;
  again.attrs.embedding_dim = 2;
  layers.push_back(again);
  auto nested = Graph::Create("tokens", {8}, layers, {{"head", 1.0}}, DType::kInt64);
  REQUIRE_FALSE(nested.ok());
  CHECK_THAT(nested.status().message(), Catch::Contains("layer \"again\""));
}

TEST_CASE("token op attributes are validated", "[graph][tokens][validation]") {
  auto with = [](const std::function<void(std::vector<Layer>&)>& edit) {
    auto layers = TokenLayers();
    edit(layers);
    auto g = Graph::Create("tokens", {8}, layers, {}, DType::kInt64);
    REQUIRE_FALSE(g.ok());
    return g.status().message();
  };
  CHECK_THAT(with([](auto& l) { l[3].attrs.num_heads = 5; }),
             Catch::Contains("field \"num_heads\"") && Catch::Contains("does not divide"));
  CHECK_THAT(with([](auto& l) { l[3].attrs.embed_dim = 32; }), Catch::Contains("embed_dim"));
  CHECK_THAT(with([](auto& l) { l[3].attrs.dropout = 1.0; }), Catch::Contains("dropout"));
  CHECK_THAT(with([](auto& l) { l[5].attrs.approximate = "erf"; }),
             Catch::Contains("field \"approximate\""));
  CHECK_THAT(with([](auto& l) { l[0].attrs.num_embeddings = 0; }),
             Catch::Contains("num_embeddings"));
  CHECK_THAT(with([](auto& l) { l[1].attrs.embedding_dim = 15; }),
             Catch::Contains("embedding_dim"));
  CHECK_THAT(with([](auto& l) { l[3].inputs = {"wte", "wpe"}; }), Catch::Contains("exactly 1"));
}

TEST_CASE("token graph JSON round trip keeps input_dtype and attributes", "[graph][json][tokens]") {
  auto g = TokenGraph();
  REQUIRE(g.ok());
  const std::string text = GraphToJson(*g);
  CHECK_THAT(text, Catch::Contains("\"input_dtype\": \"int64\""));
  auto back = ParseGraphJson(text);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(back->input_dtype() == DType::kInt64);
  REQUIRE(back->num_layers() == g->num_layers());
  for (int i = 0; i < g->num_layers(); ++i) {
    CHECK(back->layer(i).op == g->layer(i).op);
    CHECK(back->layer(i).attrs == g->layer(i).attrs);
    CHECK(back->layer(i).params == g->layer(i).params);
  }
  CHECK(back->layer(3).attrs.causal);
  CHECK(back->layer(3).attrs.dropout == 0.1);
  CHECK(back->layer(5).attrs.approximate == "tanh");
  CHECK(GraphToJson(*back) == text);
  // float32 stays implicit; anything else is refused naming the field.
  auto float_graph = Graph::Create("f", {4}, {Linear("fc", "input", 2)});
  REQUIRE(float_graph.ok());
  CHECK_THAT(GraphToJson(*float_graph), !Catch::Contains("input_dtype"));
  auto bad = ParseGraphJson(R"({"version":1,"input":{"shape":[4]},"input_dtype":"int8",
      "layers":[{"name":"fc","op":"linear","inputs":["input"],"out_features":2}]})");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("field \"input_dtype\""));
  auto missing = ParseGraphJson(R"({"version":1,"input":{"shape":[4]},"input_dtype":"int64",
      "layers":[{"name":"e","op":"embedding","inputs":["input"],"embedding_dim":2}]})");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("field \"num_embeddings\""));
  auto stray = ParseGraphJson(R"({"version":1,"input":{"shape":[4]},"input_dtype":"int64",
      "layers":[{"name":"e","op":"embedding","inputs":["input"],"num_embeddings":3,
      "embedding_dim":2,"num_heads":2}]})");
  REQUIRE_FALSE(stray.ok());
  CHECK_THAT(stray.status().message(), Catch::Contains("field \"num_heads\""));
}

// A vision transformer's reshapes, as JSON: conv2d patches [6, 2, 2], flatten from dimension 2
// [6, 4], transpose [4, 6], class token [5, 6], a bare position embedding, attention, then the
// class token (select) and the mean over tokens, added.
constexpr const char* kVitJson = R"({"version": 1, "name": "vit", "input": {"shape": [3, 8, 8]},
  "layers": [
    {"name": "conv_proj", "op": "conv2d", "inputs": ["input"], "out_channels": 6,
     "kernel_size": 4, "stride": 4},
    {"name": "reshape", "op": "flatten", "inputs": ["conv_proj"], "start_dim": 2, "end_dim": -1},
    {"name": "permute", "op": "transpose", "inputs": ["reshape"], "dim0": 1, "dim1": -1},
    {"name": "class_token", "op": "class_token", "inputs": ["permute"]},
    {"name": "encoder.pos_embedding", "op": "position_embedding", "inputs": ["class_token"],
     "max_positions": 5, "bare_parameter": true},
    {"name": "attn", "op": "multihead_attention", "inputs": ["encoder.pos_embedding"],
     "num_heads": 2},
    {"name": "getitem", "op": "select", "inputs": ["attn"], "dim": 1, "index": 0},
    {"name": "pool", "op": "mean", "inputs": ["attn"], "dim": -2},
    {"name": "both", "op": "add", "inputs": ["getitem", "pool"]},
    {"name": "head", "op": "linear", "inputs": ["both"], "out_features": 3}
  ]})";

TEST_CASE("vision transformer ops: shapes and parameters and FLOPs", "[graph][vit]") {
  auto g = ParseGraphJson(kVitJson);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  auto layer = [&](const char* name) -> const Layer& { return g->layer(*g->FindLayer(name)); };
  CHECK(layer("conv_proj").output_shape == Shape{6, 2, 2});
  CHECK(layer("reshape").output_shape == Shape{6, 4});
  CHECK(layer("reshape").forward_flops == 0);
  CHECK(layer("permute").output_shape == Shape{4, 6});
  CHECK(layer("permute").forward_flops == 0);
  CHECK(layer("class_token").output_shape == Shape{5, 6});
  CHECK(layer("class_token").params == 6);
  CHECK(layer("encoder.pos_embedding").output_shape == Shape{5, 6});
  CHECK(layer("encoder.pos_embedding").params == 5 * 6);
  CHECK(layer("getitem").output_shape == Shape{6});
  CHECK(layer("getitem").forward_flops == 0);
  CHECK(layer("pool").output_shape == Shape{6});
  CHECK(layer("pool").forward_flops == 5 * 6);
  CHECK(layer("head").output_shape == Shape{3});
  // nn.Flatten's defaults are still the whole flatten.
  auto whole = Graph::Create("f", {2, 3, 4}, {Simple("flat", Op::kFlatten, {"input"})});
  REQUIRE(whole.ok());
  CHECK(whole->layer(0).output_shape == Shape{24});
  Layer middle = Simple("flat", Op::kFlatten, {"input"});
  middle.attrs.start_dim = 1;
  middle.attrs.end_dim = 2;
  auto part = Graph::Create("f", {2, 3, 4}, {middle});
  REQUIRE(part.ok());
  CHECK(part->layer(0).output_shape == Shape{6, 4});
  // Dropout with p = 0 hands its input on: no FLOPs.
  Layer none = Simple("drop", Op::kDropout, {"input"});
  none.attrs.p = 0;
  CHECK(Graph::Create("d", {4}, {none})->layer(0).forward_flops == 0);
}

TEST_CASE("vision transformer op attributes are validated", "[graph][vit][validation]") {
  auto with = [](const std::string& from, const std::string& to) {
    std::string text = kVitJson;
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    auto g = ParseGraphJson(text);
    REQUIRE_FALSE(g.ok());
    return g.status().message();
  };
  // The batch is dimension 0 and may not be named; dimensions past the end neither.
  CHECK_THAT(with("\"dim0\": 1", "\"dim0\": 0"),
             Catch::Contains("layer \"permute\"") && Catch::Contains("field \"dim0\""));
  CHECK_THAT(with("\"dim1\": -1", "\"dim1\": 3"), Catch::Contains("field \"dim1\""));
  CHECK_THAT(with("\"start_dim\": 2", "\"start_dim\": 0"), Catch::Contains("field \"start_dim\""));
  CHECK_THAT(with("\"start_dim\": 2, \"end_dim\": -1", "\"start_dim\": 3, \"end_dim\": 2"),
             Catch::Contains("field \"end_dim\""));
  CHECK_THAT(with("\"dim\": 1, \"index\": 0", "\"dim\": 1, \"index\": 5"),
             Catch::Contains("layer \"getitem\"") && Catch::Contains("field \"index\""));
  CHECK_THAT(with("\"dim\": -2", "\"dim\": -3"),
             Catch::Contains("layer \"pool\"") && Catch::Contains("field \"dim\""));
  // A bare position embedding is added whole: its length is the tokens'.
  CHECK_THAT(with("\"max_positions\": 5", "\"max_positions\": 6"),
             Catch::Contains("field \"max_positions\"") && Catch::Contains("added whole"));
  CHECK_THAT(with("\"op\": \"class_token\", \"inputs\": [\"permute\"]",
                  "\"op\": \"class_token\", \"inputs\": [\"conv_proj\"]"),
             Catch::Contains("layer \"class_token\""));
  // Required fields, and fields of other ops.
  CHECK_THAT(with(", \"dim0\": 1", ""), Catch::Contains("field \"dim0\": missing"));
  CHECK_THAT(with(", \"index\": 0", ""), Catch::Contains("field \"index\": missing"));
  CHECK_THAT(with("\"op\": \"mean\", \"inputs\": [\"attn\"], \"dim\": -2",
                  "\"op\": \"mean\", \"inputs\": [\"attn\"]"),
             Catch::Contains("field \"dim\": missing"));
  CHECK_THAT(with("\"op\": \"class_token\", \"inputs\": [\"permute\"]",
                  "\"op\": \"class_token\", \"inputs\": [\"permute\"], \"index\": 1"),
             Catch::Contains("field \"index\""));
}

TEST_CASE("vision transformer graph JSON round trip keeps every attribute", "[graph][json][vit]") {
  auto g = ParseGraphJson(kVitJson);
  REQUIRE(g.ok());
  const std::string text = GraphToJson(*g);
  auto back = ParseGraphJson(text);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  REQUIRE(back->num_layers() == g->num_layers());
  for (int i = 0; i < g->num_layers(); ++i) {
    CHECK(back->layer(i).op == g->layer(i).op);
    CHECK(back->layer(i).attrs == g->layer(i).attrs);
    CHECK(back->layer(i).output_shape == g->layer(i).output_shape);
  }
  CHECK(back->layer(*back->FindLayer("encoder.pos_embedding")).attrs.bare_parameter);
  CHECK(back->layer(*back->FindLayer("reshape")).attrs.start_dim == 2);
  CHECK(back->layer(*back->FindLayer("permute")).attrs.dim1 == -1);
  CHECK(back->layer(*back->FindLayer("getitem")).attrs.index == 0);
  CHECK(back->layer(*back->FindLayer("pool")).attrs.dim == -2);
  CHECK(GraphToJson(*back) == text);
  // A whole flatten is written as before, without dimensions.
  auto whole = Graph::Create("f", {2, 3}, {Simple("flat", Op::kFlatten, {"input"})});
  REQUIRE(whole.ok());
  CHECK_THAT(GraphToJson(*whole), !Catch::Contains("start_dim"));
}

}  // namespace
}  // namespace deepool::planner
