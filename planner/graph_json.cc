// JSON reading and writing of graphs (format in docs/formats.md). Parsing never throws: every
// malformed document becomes an INVALID_ARGUMENT naming the layer and the field.
#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <vector>

#include "common/json_fields.h"
#include "planner/graph.h"

namespace deepool::planner {
namespace {

using nlohmann::json;

constexpr const char* kFormatName = "deepool.graph";

std::string Where(const std::string& layer_name, const std::string& field) {
  std::string where = layer_name.empty() ? "graph" : "layer \"" + layer_name + "\"";
  return where + ": field \"" + field + "\"";
}

Status FieldError(const std::string& layer_name, const std::string& field, const std::string& what) {
  return InvalidArgumentError(Where(layer_name, field) + ": " + what);
}

StatusOr<int64_t> ReadInt(const json& j, const std::string& layer, const std::string& field) {
  if (!j.is_number_integer()) return FieldError(layer, field, "must be an integer");
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return FieldError(layer, field, "out of range");
  }
  return j.get<int64_t>();
}

StatusOr<double> ReadDouble(const json& j, const std::string& layer, const std::string& field) {
  if (!j.is_number()) return FieldError(layer, field, "must be a number");
  return j.get<double>();
}

StatusOr<bool> ReadBool(const json& j, const std::string& layer, const std::string& field) {
  if (!j.is_boolean()) return FieldError(layer, field, "must be true or false");
  return j.get<bool>();
}

// An int n (meaning [n, n]) or a pair [h, w], as torch.nn accepts.
StatusOr<std::array<int64_t, 2>> ReadPair(const json& j, const std::string& layer,
                                          const std::string& field) {
  if (j.is_number_integer()) {
    ASSIGN_OR_RETURN(int64_t v, ReadInt(j, layer, field));
    return std::array<int64_t, 2>{v, v};
  }
  if (!j.is_array() || j.size() != 2) {
    return FieldError(layer, field, "must be an integer or a pair [height, width]");
  }
  ASSIGN_OR_RETURN(int64_t h, ReadInt(j[0], layer, field));
  ASSIGN_OR_RETURN(int64_t w, ReadInt(j[1], layer, field));
  return std::array<int64_t, 2>{h, w};
}

StatusOr<std::string> ReadString(const json& j, const std::string& layer,
                                 const std::string& field) {
  if (!j.is_string()) return FieldError(layer, field, "must be a string");
  return j.get<std::string>();
}

StatusOr<std::vector<int64_t>> ReadIntList(const json& j, const std::string& layer,
                                           const std::string& field) {
  if (!j.is_array()) return FieldError(layer, field, "must be a list of integers");
  std::vector<int64_t> values;
  for (const json& v : j) {
    ASSIGN_OR_RETURN(int64_t x, ReadInt(v, layer, field));
    values.push_back(x);
  }
  return values;
}

// The attribute fields each op accepts, besides name, op and inputs.
const std::set<std::string>& AllowedFields(Op op) {
  static const std::set<std::string> kConv = {"in_channels", "out_channels", "kernel_size",
                                              "stride",      "padding",      "dilation",
                                              "groups",      "bias"};
  static const std::set<std::string> kBatchNorm = {"eps", "momentum", "affine"};
  static const std::set<std::string> kMaxPool = {"kernel_size", "stride", "padding", "dilation",
                                                 "ceil_mode"};
  static const std::set<std::string> kAvgPool = {"kernel_size", "stride", "padding", "ceil_mode",
                                                 "count_include_pad"};
  static const std::set<std::string> kAdaptive = {"output_size"};
  static const std::set<std::string> kLinear = {"in_features", "out_features", "bias"};
  static const std::set<std::string> kDropout = {"p"};
  static const std::set<std::string> kLayerNorm = {"normalized_shape", "eps", "affine"};
  static const std::set<std::string> kGelu = {"approximate"};
  static const std::set<std::string> kEmbedding = {"num_embeddings", "embedding_dim"};
  static const std::set<std::string> kPositionEmbedding = {"max_positions", "embedding_dim",
                                                           "bare_parameter"};
  static const std::set<std::string> kFlatten = {"start_dim", "end_dim"};
  static const std::set<std::string> kTranspose = {"dim0", "dim1"};
  static const std::set<std::string> kClassToken = {"embed_dim"};
  static const std::set<std::string> kSelect = {"dim", "index"};
  static const std::set<std::string> kMean = {"dim"};
  static const std::set<std::string> kAttention = {"embed_dim", "num_heads", "causal", "dropout",
                                                   "bias"};
  static const std::set<std::string> kNone = {};
  switch (op) {
    case Op::kConv2d: return kConv;
    case Op::kBatchNorm2d: return kBatchNorm;
    case Op::kMaxPool2d: return kMaxPool;
    case Op::kAvgPool2d: return kAvgPool;
    case Op::kAdaptiveAvgPool2d: return kAdaptive;
    case Op::kLinear: return kLinear;
    case Op::kDropout: return kDropout;
    case Op::kLayerNorm: return kLayerNorm;
    case Op::kGelu: return kGelu;
    case Op::kEmbedding: return kEmbedding;
    case Op::kPositionEmbedding: return kPositionEmbedding;
    case Op::kMultiheadAttention: return kAttention;
    case Op::kFlatten: return kFlatten;
    case Op::kTranspose: return kTranspose;
    case Op::kClassToken: return kClassToken;
    case Op::kSelect: return kSelect;
    case Op::kMean: return kMean;
    default: return kNone;
  }
}

// The token and tensor ops' fields without a usable default.
Status RequireFields(const json& j, const Layer& layer) {
  std::vector<const char*> required;
  if (layer.op == Op::kEmbedding) required = {"num_embeddings", "embedding_dim"};
  if (layer.op == Op::kPositionEmbedding) required = {"max_positions"};
  if (layer.op == Op::kMultiheadAttention) required = {"num_heads"};
  if (layer.op == Op::kTranspose) required = {"dim0", "dim1"};
  if (layer.op == Op::kSelect) required = {"dim", "index"};
  if (layer.op == Op::kMean) required = {"dim"};
  for (const char* field : required) {
    if (!j.contains(field)) return FieldError(layer.name, field, "missing");
  }
  return Status::Ok();
}

// "tied": {"weight": "transformer.wte.weight"}: own parameter name -> the source's state_dict key.
StatusOr<std::vector<TiedParameter>> ReadTied(const json& j, const std::string& layer) {
  if (!j.is_object()) {
    return FieldError(layer, "tied", "must map parameter names to state_dict keys");
  }
  std::vector<TiedParameter> tied;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_string()) {
      return FieldError(layer, "tied", "must map parameter names to state_dict keys");
    }
    tied.emplace_back(it.key(), it.value().get<std::string>());
  }
  return tied;
}

StatusOr<Layer> ParseLayer(const json& j, size_t position) {
  if (!j.is_object()) {
    return InvalidArgumentError("layers[" + std::to_string(position) + "]: must be an object");
  }
  Layer layer;
  auto name_it = j.find("name");
  if (name_it == j.end() || !name_it->is_string() || name_it->get<std::string>().empty()) {
    return InvalidArgumentError("layers[" + std::to_string(position) +
                                "]: field \"name\": missing or not a non-empty string");
  }
  layer.name = name_it->get<std::string>();
  const std::string& n = layer.name;

  auto op_it = j.find("op");
  if (op_it == j.end() || !op_it->is_string()) return FieldError(n, "op", "missing");
  auto op = OpFromName(op_it->get<std::string>());
  if (!op) {
    std::string known;
    for (Op o : AllOps()) known += std::string(known.empty() ? "" : ", ") + OpName(o);
    return FieldError(n, "op", "unknown op \"" + op_it->get<std::string>() + "\" (known: " +
                                   known + ")");
  }
  layer.op = *op;

  auto inputs_it = j.find("inputs");
  if (inputs_it == j.end()) return FieldError(n, "inputs", "missing");
  if (!inputs_it->is_array()) return FieldError(n, "inputs", "must be a list of layer names");
  for (const json& input : *inputs_it) {
    if (!input.is_string()) return FieldError(n, "inputs", "must be a list of layer names");
    layer.inputs.push_back(input.get<std::string>());
  }

  if (auto tied_it = j.find("tied"); tied_it != j.end()) {
    ASSIGN_OR_RETURN(layer.tied, ReadTied(*tied_it, n));
  }
  const auto& allowed = AllowedFields(layer.op);
  LayerAttrs& a = layer.attrs;
  bool stride_given = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key == "name" || key == "op" || key == "inputs" || key == "tied") continue;
    if (!allowed.count(key)) {
      return FieldError(n, key, std::string("unknown field for op ") + OpName(layer.op));
    }
    const json& v = it.value();
    if (key == "in_channels") { ASSIGN_OR_RETURN(a.in_channels, ReadInt(v, n, key)); }
    else if (key == "out_channels") { ASSIGN_OR_RETURN(a.out_channels, ReadInt(v, n, key)); }
    else if (key == "kernel_size") { ASSIGN_OR_RETURN(a.kernel_size, ReadPair(v, n, key)); }
    else if (key == "stride") { ASSIGN_OR_RETURN(a.stride, ReadPair(v, n, key)); stride_given = true; }
    else if (key == "padding") { ASSIGN_OR_RETURN(a.padding, ReadPair(v, n, key)); }
    else if (key == "dilation") { ASSIGN_OR_RETURN(a.dilation, ReadPair(v, n, key)); }
    else if (key == "groups") { ASSIGN_OR_RETURN(a.groups, ReadInt(v, n, key)); }
    else if (key == "bias") { ASSIGN_OR_RETURN(a.bias, ReadBool(v, n, key)); }
    else if (key == "ceil_mode") { ASSIGN_OR_RETURN(a.ceil_mode, ReadBool(v, n, key)); }
    else if (key == "count_include_pad") { ASSIGN_OR_RETURN(a.count_include_pad, ReadBool(v, n, key)); }
    else if (key == "output_size") { ASSIGN_OR_RETURN(a.output_size, ReadPair(v, n, key)); }
    else if (key == "in_features") { ASSIGN_OR_RETURN(a.in_features, ReadInt(v, n, key)); }
    else if (key == "out_features") { ASSIGN_OR_RETURN(a.out_features, ReadInt(v, n, key)); }
    else if (key == "eps") { ASSIGN_OR_RETURN(a.eps, ReadDouble(v, n, key)); }
    else if (key == "momentum") { ASSIGN_OR_RETURN(a.momentum, ReadDouble(v, n, key)); }
    else if (key == "affine") { ASSIGN_OR_RETURN(a.affine, ReadBool(v, n, key)); }
    else if (key == "normalized_shape") { ASSIGN_OR_RETURN(a.normalized_shape, ReadIntList(v, n, key)); }
    else if (key == "p") { ASSIGN_OR_RETURN(a.p, ReadDouble(v, n, key)); }
    else if (key == "approximate") { ASSIGN_OR_RETURN(a.approximate, ReadString(v, n, key)); }
    else if (key == "num_embeddings") { ASSIGN_OR_RETURN(a.num_embeddings, ReadInt(v, n, key)); }
    else if (key == "embedding_dim") { ASSIGN_OR_RETURN(a.embedding_dim, ReadInt(v, n, key)); }
    else if (key == "max_positions") { ASSIGN_OR_RETURN(a.max_positions, ReadInt(v, n, key)); }
    else if (key == "embed_dim") { ASSIGN_OR_RETURN(a.embed_dim, ReadInt(v, n, key)); }
    else if (key == "num_heads") { ASSIGN_OR_RETURN(a.num_heads, ReadInt(v, n, key)); }
    else if (key == "causal") { ASSIGN_OR_RETURN(a.causal, ReadBool(v, n, key)); }
    else if (key == "dropout") { ASSIGN_OR_RETURN(a.dropout, ReadDouble(v, n, key)); }
    else if (key == "start_dim") { ASSIGN_OR_RETURN(a.start_dim, ReadInt(v, n, key)); }
    else if (key == "end_dim") { ASSIGN_OR_RETURN(a.end_dim, ReadInt(v, n, key)); }
    else if (key == "dim0") { ASSIGN_OR_RETURN(a.dim0, ReadInt(v, n, key)); }
    else if (key == "dim1") { ASSIGN_OR_RETURN(a.dim1, ReadInt(v, n, key)); }
    else if (key == "dim") { ASSIGN_OR_RETURN(a.dim, ReadInt(v, n, key)); }
    else if (key == "index") { ASSIGN_OR_RETURN(a.index, ReadInt(v, n, key)); }
    else if (key == "bare_parameter") { ASSIGN_OR_RETURN(a.bare_parameter, ReadBool(v, n, key)); }
  }
  // As in torch.nn, a pool's stride defaults to its kernel size.
  if ((layer.op == Op::kMaxPool2d || layer.op == Op::kAvgPool2d) && !stride_given) {
    a.stride = a.kernel_size;
  }
  if (layer.op == Op::kConv2d && !j.contains("out_channels")) {
    return FieldError(n, "out_channels", "missing");
  }
  if (layer.op == Op::kLinear && !j.contains("out_features")) {
    return FieldError(n, "out_features", "missing");
  }
  if ((layer.op == Op::kConv2d || layer.op == Op::kMaxPool2d || layer.op == Op::kAvgPool2d) &&
      !j.contains("kernel_size")) {
    return FieldError(n, "kernel_size", "missing");
  }
  if (layer.op == Op::kLayerNorm && !j.contains("normalized_shape")) {
    return FieldError(n, "normalized_shape", "missing");
  }
  RETURN_IF_ERROR(RequireFields(j, layer));
  return layer;
}

json PairJson(const std::array<int64_t, 2>& v) { return json::array({v[0], v[1]}); }

json LayerJson(const Layer& layer) {
  json j;
  j["name"] = layer.name;
  j["op"] = OpName(layer.op);
  j["inputs"] = layer.inputs;
  if (!layer.tied.empty()) {
    json tied = json::object();
    for (const TiedParameter& tie : layer.tied) tied[tie.parameter] = tie.source;
    j["tied"] = std::move(tied);
  }
  const LayerAttrs& a = layer.attrs;
  switch (layer.op) {
    case Op::kConv2d:
      if (a.in_channels) j["in_channels"] = a.in_channels;
      j["out_channels"] = a.out_channels;
      j["kernel_size"] = PairJson(a.kernel_size);
      j["stride"] = PairJson(a.stride);
      j["padding"] = PairJson(a.padding);
      j["dilation"] = PairJson(a.dilation);
      j["groups"] = a.groups;
      j["bias"] = a.bias;
      break;
    case Op::kBatchNorm2d:
      j["eps"] = a.eps;
      j["momentum"] = a.momentum;
      j["affine"] = a.affine;
      break;
    case Op::kMaxPool2d:
      j["kernel_size"] = PairJson(a.kernel_size);
      j["stride"] = PairJson(a.stride);
      j["padding"] = PairJson(a.padding);
      j["dilation"] = PairJson(a.dilation);
      j["ceil_mode"] = a.ceil_mode;
      break;
    case Op::kAvgPool2d:
      j["kernel_size"] = PairJson(a.kernel_size);
      j["stride"] = PairJson(a.stride);
      j["padding"] = PairJson(a.padding);
      j["ceil_mode"] = a.ceil_mode;
      j["count_include_pad"] = a.count_include_pad;
      break;
    case Op::kAdaptiveAvgPool2d:
      j["output_size"] = PairJson(a.output_size);
      break;
    case Op::kLinear:
      if (a.in_features) j["in_features"] = a.in_features;
      j["out_features"] = a.out_features;
      j["bias"] = a.bias;
      break;
    case Op::kDropout:
      j["p"] = a.p;
      break;
    case Op::kLayerNorm:
      j["normalized_shape"] = a.normalized_shape;
      j["eps"] = a.eps;
      j["affine"] = a.affine;
      break;
    case Op::kGelu:
      j["approximate"] = a.approximate;
      break;
    case Op::kEmbedding:
      j["num_embeddings"] = a.num_embeddings;
      j["embedding_dim"] = a.embedding_dim;
      break;
    case Op::kPositionEmbedding:
      j["max_positions"] = a.max_positions;
      if (a.embedding_dim) j["embedding_dim"] = a.embedding_dim;
      if (a.bare_parameter) j["bare_parameter"] = true;
      break;
    case Op::kFlatten:
      // Written only when not nn.Flatten's defaults, so older documents read and write as before.
      if (a.start_dim != 1 || a.end_dim != -1) {
        j["start_dim"] = a.start_dim;
        j["end_dim"] = a.end_dim;
      }
      break;
    case Op::kTranspose:
      j["dim0"] = a.dim0;
      j["dim1"] = a.dim1;
      break;
    case Op::kClassToken:
      if (a.embed_dim) j["embed_dim"] = a.embed_dim;
      break;
    case Op::kSelect:
      j["dim"] = a.dim;
      j["index"] = a.index;
      break;
    case Op::kMean:
      j["dim"] = a.dim;
      break;
    case Op::kMultiheadAttention:
      if (a.embed_dim) j["embed_dim"] = a.embed_dim;
      j["num_heads"] = a.num_heads;
      j["causal"] = a.causal;
      j["dropout"] = a.dropout;
      j["bias"] = a.bias;
      break;
    default:
      break;
  }
  return j;
}

}  // namespace

StatusOr<Graph> ParseGraphJson(std::string_view text) {
  ASSIGN_OR_RETURN(const json doc, ParseJson(text, "graph"));
  if (!doc.is_object()) return InvalidArgumentError("graph: the document must be a JSON object");

  auto format = doc.find("format");
  if (format != doc.end() && (!format->is_string() || *format != kFormatName)) {
    return FieldError("", "format", std::string("must be \"") + kFormatName + "\"");
  }
  auto version = doc.find("version");
  if (version == doc.end()) return FieldError("", "version", "missing");
  if (!version->is_number_integer() || version->get<int64_t>() != kGraphFormatVersion) {
    return FieldError("", "version",
                      "unsupported; this build reads version " +
                          std::to_string(kGraphFormatVersion));
  }

  std::string name;
  if (auto it = doc.find("name"); it != doc.end()) {
    if (!it->is_string()) return FieldError("", "name", "must be a string");
    name = it->get<std::string>();
  }

  auto input = doc.find("input");
  if (input == doc.end() || !input->is_object() || !input->contains("shape")) {
    return FieldError("", "input", "missing; expected {\"shape\": [channels, height, width]}");
  }
  auto input_shape_or = ReadIntList((*input)["shape"], "", "input.shape");
  if (!input_shape_or.ok()) return input_shape_or.status();
  DType input_dtype = DType::kFloat32;
  if (auto it = doc.find("input_dtype"); it != doc.end()) {
    std::optional<DType> dtype = it->is_string() ? DTypeFromName(it->get<std::string>())
                                                 : std::nullopt;
    if (!dtype) return FieldError("", "input_dtype", "must be \"float32\" or \"int64\"");
    input_dtype = *dtype;
  }

  auto layers_it = doc.find("layers");
  if (layers_it == doc.end() || !layers_it->is_array()) {
    return FieldError("", "layers", "missing or not a list");
  }
  std::vector<Layer> layers;
  layers.reserve(layers_it->size());
  for (size_t i = 0; i < layers_it->size(); ++i) {
    ASSIGN_OR_RETURN(Layer layer, ParseLayer((*layers_it)[i], i));
    layers.push_back(std::move(layer));
  }

  std::vector<GraphOutput> outputs;
  if (auto it = doc.find("outputs"); it != doc.end()) {
    if (!it->is_array()) return FieldError("", "outputs", "must be a list");
    for (const json& o : *it) {
      GraphOutput output;
      if (o.is_string()) {
        output.layer = o.get<std::string>();
      } else if (o.is_object() && o.contains("layer") && o["layer"].is_string()) {
        output.layer = o["layer"].get<std::string>();
        if (o.contains("loss_weight")) {
          ASSIGN_OR_RETURN(output.loss_weight, ReadDouble(o["loss_weight"], "", "outputs"));
        }
      } else {
        return FieldError("", "outputs",
                          "entries must be layer names or {\"layer\": ..., \"loss_weight\": ...}");
      }
      outputs.push_back(std::move(output));
    }
  }
  return Graph::Create(std::move(name), std::move(*input_shape_or), std::move(layers),
                       std::move(outputs), input_dtype);
}

std::string GraphToJson(const Graph& graph, int indent) {
  json doc;
  doc["format"] = kFormatName;
  doc["version"] = kGraphFormatVersion;
  doc["name"] = graph.name();
  doc["input"] = {{"shape", graph.input_shape()}};
  // Written only for token inputs, so float32 documents read as they always did.
  if (graph.input_dtype() != DType::kFloat32) doc["input_dtype"] = DTypeName(graph.input_dtype());
  json layers = json::array();
  for (const Layer& layer : graph.layers()) layers.push_back(LayerJson(layer));
  doc["layers"] = std::move(layers);
  json outputs = json::array();
  for (const GraphOutput& output : graph.outputs()) {
    outputs.push_back({{"layer", output.layer}, {"loss_weight", output.loss_weight}});
  }
  doc["outputs"] = std::move(outputs);
  return doc.dump(indent);
}

}  // namespace deepool::planner
