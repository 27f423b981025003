// Feeds thousands of random and mutated graph documents to the parser: each must be accepted
// (and then survive a round trip) or refused with a message. Never a crash or an exception.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <random>

#include "planner/graph.h"

namespace deepool::planner {
namespace {

using nlohmann::json;

class DocumentFuzzer {
 public:
  explicit DocumentFuzzer(uint32_t seed) : rng_(seed) {}

  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }

  json RandomNumber() {
    switch (Int(0, 6)) {
      case 0: return Int(-3, 3);
      case 1: return Int(1, 8);
      case 2: return int64_t{1} << Int(20, 62);
      case 3: return -(int64_t{1} << Int(0, 62));
      case 4: return Int(0, 100) / 10.0;
      case 5: return std::numeric_limits<uint64_t>::max();
      default: return Int(1, 4);
    }
  }

  json RandomValue() {
    switch (Int(0, 6)) {
      case 0: return RandomNumber();
      case 1: return json::array({RandomNumber(), RandomNumber()});
      case 2: return Coin();
      case 3: return "x";
      case 4: return nullptr;
      case 5: return json::object({{"k", RandomNumber()}});
      default: return json::array();
    }
  }

  // A plausible graph: mostly valid layers over a small image, wired to earlier layers.
  json RandomGraph() {
    static const char* kOps[] = {"conv2d",  "batchnorm2d", "relu",   "maxpool2d",
                                 "avgpool2d", "adaptive_avgpool2d", "linear", "flatten",
                                 "dropout", "concat",      "add",    "layernorm", "gelu"};
    json doc = {{"format", "deepool.graph"}, {"version", 1}, {"name", "fuzz"}};
    doc["input"] = {{"shape", Coin(0.8) ? json::array({Int(1, 4), Int(1, 12), Int(1, 12)})
                                        : json::array({Int(1, 16)})}};
    json layers = json::array();
    const int n = Int(1, 12);
    for (int i = 0; i < n; ++i) {
      json layer = {{"name", "l" + std::to_string(i)}, {"op", kOps[Int(0, 12)]}};
      auto pick = [&]() -> std::string {
        int k = Int(-1, i - 1);
        return k < 0 ? "input" : "l" + std::to_string(k);
      };
      json inputs = json::array({pick()});
      if (layer["op"] == "concat" || layer["op"] == "add") inputs.push_back(pick());
      layer["inputs"] = inputs;
      const std::string op = layer["op"];
      if (op == "conv2d") {
        layer["out_channels"] = Int(1, 6);
        layer["kernel_size"] = Int(1, 3);
        if (Coin()) layer["padding"] = Int(0, 1);
        if (Coin(0.3)) layer["stride"] = json::array({Int(1, 2), Int(1, 2)});
        if (Coin(0.2)) layer["groups"] = Int(1, 2);
      } else if (op == "maxpool2d" || op == "avgpool2d") {
        layer["kernel_size"] = Int(1, 3);
        if (Coin()) layer["ceil_mode"] = Coin();
      } else if (op == "linear") {
        layer["out_features"] = Int(1, 8);
      } else if (op == "layernorm") {
        layer["normalized_shape"] = json::array({Int(1, 12)});
      } else if (op == "adaptive_avgpool2d") {
        layer["output_size"] = Int(1, 2);
      } else if (op == "dropout") {
        layer["p"] = Int(0, 9) / 10.0;
      }
      layers.push_back(layer);
    }
    doc["layers"] = layers;
    return doc;
  }

  void Mutate(json& doc) {
    const int mutations = Int(1, 4);
    for (int m = 0; m < mutations; ++m) {
      json& layers = doc["layers"];
      if (!layers.is_array() || layers.empty() || Coin(0.1)) {
        switch (Int(0, 4)) {
          case 0: doc.erase("input"); break;
          case 1: doc["version"] = RandomValue(); break;
          case 2: doc["layers"] = RandomValue(); break;
          case 3: doc["input"]["shape"] = RandomValue(); break;
          default: doc["outputs"] = json::array({RandomValue()}); break;
        }
        continue;
      }
      json& layer = layers[Int(0, static_cast<int>(layers.size()) - 1)];
      if (!layer.is_object()) continue;
      static const char* kFields[] = {"name", "op", "inputs", "out_channels", "kernel_size",
                                      "stride", "padding", "dilation", "groups", "out_features",
                                      "in_features", "p", "eps", "normalized_shape",
                                      "output_size", "bias", "unknown"};
      const std::string field = kFields[Int(0, 16)];
      switch (Int(0, 3)) {
        case 0: layer.erase(field); break;
        case 1: layer[field] = RandomValue(); break;
        case 2:  // rewire to a later layer (may make a cycle) or to nothing
          layer["inputs"] = json::array({"l" + std::to_string(Int(0, 12))});
          break;
        default: layers.push_back(layer); break;  // duplicate name
      }
    }
  }

  std::string Corrupt(std::string text) {
    if (text.empty()) return text;
    switch (Int(0, 2)) {
      case 0: text.resize(static_cast<size_t>(Int(0, static_cast<int>(text.size())))); break;
      case 1: text[static_cast<size_t>(Int(0, static_cast<int>(text.size()) - 1))] =
                  static_cast<char>(Int(0, 255));
              break;
      default: text.insert(0, std::string(static_cast<size_t>(Int(1, 64)), '['));
    }
    return text;
  }

 private:
  std::mt19937 rng_;
};

void CheckAcceptedOrRefused(const std::string& text, int& accepted, int& refused) {
  StatusOr<Graph> g = InvalidArgumentError("unset");
  REQUIRE_NOTHROW(g = ParseGraphJson(text));
  if (g.ok()) {
    ++accepted;
    auto again = ParseGraphJson(GraphToJson(*g));
    REQUIRE(again.ok());
    CHECK(again->num_layers() == g->num_layers());
  } else {
    ++refused;
    CHECK(g.status().code() == StatusCode::kInvalidArgument);
    CHECK_FALSE(g.status().message().empty());
  }
}

TEST_CASE("random and mutated graph documents are accepted or refused, never crash",
          "[graph][fuzz]") {
  DocumentFuzzer fuzzer(20261122);
  int accepted = 0;
  int refused = 0;
  for (int i = 0; i < 4000; ++i) {
    json doc = fuzzer.RandomGraph();
    if (i % 2 == 1) fuzzer.Mutate(doc);
    std::string text = doc.dump();
    if (i % 5 == 4) text = fuzzer.Corrupt(text);
    CheckAcceptedOrRefused(text, accepted, refused);
  }
  // Both outcomes must actually be exercised, or the generator has drifted.
  CHECK(accepted > 100);
  CHECK(refused > 100);
}

}  // namespace
}  // namespace deepool::planner
