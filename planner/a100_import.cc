// Reference A100 `.prof` importer: row parsing, the backward-shift correction, row/layer keys
// and Bottleneck block discovery.
#include "planner/a100_import.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>

#include "common/json_fields.h"

namespace deepool::planner {
namespace {

using nlohmann::json;

// An in-place ReLU's backward (read grad and output, write grad) against its forward (read,
// write): the share of the ReLU row's backward that belongs to the ReLU itself.
constexpr double kReluBackwardOverForward = 1.5;

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

std::vector<std::string_view> SplitWhitespace(std::string_view text) {
  std::vector<std::string_view> tokens;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) tokens.push_back(text.substr(start, i - start));
  }
  return tokens;
}

// Parses a leading decimal number of `token` ("27.22(NoSync)" gives 27.22).
std::optional<double> LeadingNumber(std::string_view token) {
  std::string copy(token);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (end == copy.c_str()) return std::nullopt;
  return value;
}

std::optional<int64_t> ParseInt(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

// Parses "conv2d{...}[64][3,224,224]" or "linear{...}[64]25088" into `row`.
Status ParseKey(std::string_view key, ProfRow& row) {
  const size_t brace = key.find('{');
  if (brace == std::string_view::npos || brace == 0) {
    return InvalidArgumentError("expected <kind>{params}[batch]<shape>");
  }
  row.kind = std::string(key.substr(0, brace));
  int depth = 0;
  size_t close = std::string_view::npos;
  for (size_t i = brace; i < key.size(); ++i) {
    if (key[i] == '{') ++depth;
    if (key[i] == '}' && --depth == 0) {
      close = i;
      break;
    }
  }
  if (close == std::string_view::npos) return InvalidArgumentError("unbalanced braces");
  row.params_json = std::string(key.substr(brace, close - brace + 1));
  std::string_view rest = key.substr(close + 1);
  if (rest.empty() || rest.front() != '[') return InvalidArgumentError("missing [batch]");
  const size_t batch_end = rest.find(']');
  if (batch_end == std::string_view::npos) return InvalidArgumentError("missing ] after batch");
  auto batch = ParseInt(rest.substr(1, batch_end - 1));
  if (!batch || *batch < 1) return InvalidArgumentError("bad batch");
  row.batch = *batch;
  rest = rest.substr(batch_end + 1);
  if (!rest.empty() && rest.front() == '[') {
    if (rest.back() != ']') return InvalidArgumentError("bad input shape");
    rest = rest.substr(1, rest.size() - 2);
  }
  row.input_shape.clear();
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    auto dim = ParseInt(rest.substr(0, comma));
    if (!dim || *dim < 1) return InvalidArgumentError("bad input shape");
    row.input_shape.push_back(*dim);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (row.input_shape.empty()) return InvalidArgumentError("missing input shape");
  return Status::Ok();
}

bool IsWeighted(const std::string& kind) { return kind == "conv2d" || kind == "linear"; }
bool IsRelu(const std::string& kind) { return kind == "ReLU2d" || kind == "ReLU1d"; }

// Output channels (conv) or features (linear) of a row, or 0.
int64_t RowOutputWidth(const ProfRow& row) {
  StatusOr<json> parsed = ParseJson(row.params_json, "params");
  if (!parsed.ok() || !parsed->is_object()) return 0;
  const json& params = *parsed;
  const char* key = row.kind == "conv2d" ? "out_channels" : "out_features";
  auto it = params.find(key);
  return it != params.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// Moves a conv/linear's backward time from the ReLU row after it back onto it.
void ShiftBackwardTimes(std::vector<ProfRow>& rows) {
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    ProfRow& weighted = rows[i];
    ProfRow& relu = rows[i + 1];
    if (!IsWeighted(weighted.kind) || !IsRelu(relu.kind) || weighted.batch != relu.batch) continue;
    if (relu.input_shape.empty() || relu.input_shape[0] != RowOutputWidth(weighted)) continue;
    const double relu_own = std::min(relu.backward_ms, kReluBackwardOverForward * relu.forward_ms);
    const double moved = relu.backward_ms - relu_own;
    weighted.backward_ms += moved;
    relu.backward_ms = relu_own;
  }
}

// ---- keys: a row and a layer match when their keys are equal ------------------------------

std::string Join(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out;
}

// A pair parameter written as an integer or as [h, w]; `fallback` when absent.
std::optional<std::vector<int64_t>> PairParam(const json& params, const char* key,
                                              std::vector<int64_t> fallback) {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  if (it->is_number_integer()) return std::vector<int64_t>{it->get<int64_t>(), it->get<int64_t>()};
  if (it->is_array() && it->size() == 2 && (*it)[0].is_number_integer() &&
      (*it)[1].is_number_integer()) {
    return std::vector<int64_t>{(*it)[0].get<int64_t>(), (*it)[1].get<int64_t>()};
  }
  return std::nullopt;
}

std::optional<int64_t> IntParam(const json& params, const char* key,
                                std::optional<int64_t> fallback = std::nullopt) {
  auto it = params.find(key);
  if (it == params.end()) return fallback;
  if (it->is_number_integer()) return it->get<int64_t>();
  return std::nullopt;
}

std::string ConvKey(int64_t in, int64_t out, const std::vector<int64_t>& kernel,
                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                    int64_t groups, int64_t dilation, const Shape& shape) {
  return "conv|" + std::to_string(in) + "|" + std::to_string(out) + "|k" + Join(kernel) + "|s" +
         Join(stride) + "|p" + Join(padding) + "|g" + std::to_string(groups) + "|d" +
         std::to_string(dilation) + "|" + Join(shape);
}

std::string PoolKey(const std::string& kind, const std::vector<int64_t>& kernel,
                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                    const Shape& shape) {
  return kind + "|k" + Join(kernel) + "|s" + Join(stride) + "|p" + Join(padding) + "|" +
         Join(shape);
}

std::string BottleneckKey(int64_t inplanes, int64_t planes, int64_t base_width, int64_t groups,
                          int64_t dilation, int64_t stride, const std::vector<int64_t>& downsample,
                          const Shape& shape) {
  return "bottleneck|" + std::to_string(inplanes) + "|" + std::to_string(planes) + "|w" +
         std::to_string(base_width) + "|g" + std::to_string(groups) + "|d" +
         std::to_string(dilation) + "|s" + std::to_string(stride) + "|ds" + Join(downsample) + "|" +
         Join(shape);
}

// The key of a row, or "" for kinds the importer does not know.
std::string RowKey(const ProfRow& row) {
  StatusOr<json> parsed = ParseJson(row.params_json, "params");
  if (!parsed.ok() || !parsed->is_object()) return "";
  const json& params = *parsed;
  const Shape& shape = row.input_shape;
  if (row.kind == "conv2d") {
    auto in = IntParam(params, "in_channels");
    auto out = IntParam(params, "out_channels");
    auto kernel = PairParam(params, "kernel_size", {1, 1});
    auto stride = PairParam(params, "stride", {1, 1});
    auto padding = PairParam(params, "padding", {0, 0});
    auto groups = IntParam(params, "groups", 1);
    auto dilation = IntParam(params, "dilation", 1);
    if (!in || !out || !kernel || !stride || !padding || !groups || !dilation) return "";
    return ConvKey(*in, *out, *kernel, *stride, *padding, *groups, *dilation, shape);
  }
  if (row.kind == "linear") {
    auto in = IntParam(params, "in_features");
    auto out = IntParam(params, "out_features");
    auto bias = params.find("bias");
    const bool has_bias = bias == params.end() || !bias->is_boolean() || bias->get<bool>();
    if (!in || !out) return "";
    return "linear|" + std::to_string(*in) + "|" + std::to_string(*out) + "|b" +
           std::to_string(has_bias) + "|" + Join(shape);
  }
  if (IsRelu(row.kind)) return "relu|" + Join(shape);
  if (row.kind == "flatten") return "flatten|" + Join(shape);
  if (row.kind == "maxPool2d" || row.kind == "avgPool2d") {
    auto kernel = PairParam(params, "kernel_size", {1, 1});
    auto stride = PairParam(params, "stride", kernel.value_or(std::vector<int64_t>{1, 1}));
    auto padding = PairParam(params, "padding", {0, 0});
    if (!kernel || !stride || !padding) return "";
    return PoolKey(row.kind == "maxPool2d" ? "maxpool" : "avgpool", *kernel, *stride, *padding,
                   shape);
  }
  if (row.kind == "adAvgPool2d") {
    auto height = IntParam(params, "output_height");
    auto width = IntParam(params, "output_width");
    if (!height || !width) return "";
    return "adavgpool|" + std::to_string(*height) + "," + std::to_string(*width) + "|" +
           Join(shape);
  }
  if (row.kind == "ResnetBottleneck") {
    auto inplanes = IntParam(params, "inplanes");
    auto planes = IntParam(params, "planes");
    auto base_width = IntParam(params, "base_width", 64);
    auto groups = IntParam(params, "groups", 1);
    auto dilation = IntParam(params, "dilation", 1);
    auto stride = IntParam(params, "stride", 1);
    if (!inplanes || !planes || !base_width || !groups || !dilation || !stride) return "";
    std::vector<int64_t> downsample;
    auto ds = params.find("downsampleParams");
    if (ds != params.end()) {
      // [[in_channels, out_channels, stride], batch_norm_features]
      if (!ds->is_array() || ds->empty() || !(*ds)[0].is_array() || (*ds)[0].size() != 3) {
        return "";
      }
      for (const json& value : (*ds)[0]) {
        if (!value.is_number_integer()) return "";
        downsample.push_back(value.get<int64_t>());
      }
    }
    return BottleneckKey(*inplanes, *planes, *base_width, *groups, *dilation, *stride, downsample,
                         shape);
  }
  return "";
}

const Shape& InputShape(const Graph& graph, const Layer& layer) {
  static const Shape kEmpty;
  if (layer.input_ids.empty()) return kEmpty;
  const int id = layer.input_ids[0];
  return id == kGraphInputId ? graph.input_shape() : graph.layer(id).output_shape;
}

std::vector<int64_t> Pair(const std::array<int64_t, 2>& value) { return {value[0], value[1]}; }

// The key of a single graph layer, or "" for ops the files never time on their own.
std::string LayerKey(const Graph& graph, const Layer& layer) {
  if (layer.input_ids.size() != 1) return "";
  const Shape& shape = InputShape(graph, layer);
  const LayerAttrs& a = layer.attrs;
  switch (layer.op) {
    case Op::kConv2d:
      if (shape.empty() || a.dilation[0] != a.dilation[1]) return "";
      return ConvKey(shape[0], a.out_channels, Pair(a.kernel_size), Pair(a.stride), Pair(a.padding),
                     a.groups, a.dilation[0], shape);
    case Op::kLinear:
      if (shape.empty()) return "";
      return "linear|" + std::to_string(shape.back()) + "|" + std::to_string(a.out_features) +
             "|b" + std::to_string(a.bias) + "|" + Join(shape);
    case Op::kRelu:
      return "relu|" + Join(shape);
    case Op::kFlatten:
      if (a.start_dim != 1 || a.end_dim != -1) return "";  // the files time whole flattens only
      return "flatten|" + Join(shape);
    case Op::kMaxPool2d:
      if (a.dilation[0] != 1 || a.dilation[1] != 1) return "";
      return PoolKey("maxpool", Pair(a.kernel_size), Pair(a.stride), Pair(a.padding), shape);
    case Op::kAvgPool2d:
      return PoolKey("avgpool", Pair(a.kernel_size), Pair(a.stride), Pair(a.padding), shape);
    case Op::kAdaptiveAvgPool2d:
      return "adavgpool|" + std::to_string(a.output_size[0]) + "," +
             std::to_string(a.output_size[1]) + "|" + Join(shape);
    default:
      return "";
  }
}

// ---- Bottleneck blocks ------------------------------------------------------------------------

struct Block {
  std::string key;
  std::vector<int> layers;  // ascending ids
};

// Marks `id` and all its transitive inputs.
void MarkAncestors(const Graph& graph, int id, std::vector<char>& marked) {
  if (id == kGraphInputId || marked[static_cast<size_t>(id)]) return;
  std::vector<int> stack{id};
  marked[static_cast<size_t>(id)] = 1;
  while (!stack.empty()) {
    const int current = stack.back();
    stack.pop_back();
    for (int input : graph.layer(current).input_ids) {
      if (input != kGraphInputId && !marked[static_cast<size_t>(input)]) {
        marked[static_cast<size_t>(input)] = 1;
        stack.push_back(input);
      }
    }
  }
}

std::vector<char> AncestorsOrSelf(const Graph& graph, int id) {
  std::vector<char> marked(static_cast<size_t>(graph.num_layers()), 0);
  MarkAncestors(graph, id, marked);
  return marked;
}

// Conv layers among `ids`, ascending.
std::vector<int> Convs(const Graph& graph, const std::vector<int>& ids) {
  std::vector<int> convs;
  for (int id : ids) {
    if (graph.layer(id).op == Op::kConv2d) convs.push_back(id);
  }
  return convs;
}

// Layers in ancestors-or-self of `id` that are not ancestors-or-self of `entry`.
std::vector<int> Between(const Graph& graph, int entry, int id) {
  std::vector<char> below = AncestorsOrSelf(graph, id);
  std::vector<char> above(below.size(), 0);
  MarkAncestors(graph, entry, above);
  std::vector<int> ids;
  for (size_t i = 0; i < below.size(); ++i) {
    if (below[i] && !above[i]) ids.push_back(static_cast<int>(i));
  }
  return ids;
}

// A torchvision Bottleneck around residual add `add_id`, or nullopt if it is not one.
std::optional<Block> BottleneckAt(const Graph& graph, int add_id) {
  const Layer& add = graph.layer(add_id);
  if (add.input_ids.size() != 2) return std::nullopt;
  // The block's entry: the latest layer both branches descend from.
  std::vector<char> left = AncestorsOrSelf(graph, add.input_ids[0]);
  std::vector<char> right = AncestorsOrSelf(graph, add.input_ids[1]);
  if (add.input_ids[0] == kGraphInputId || add.input_ids[1] == kGraphInputId) return std::nullopt;
  int entry = kGraphInputId;
  for (int i = graph.num_layers() - 1; i >= 0; --i) {
    if (left[static_cast<size_t>(i)] && right[static_cast<size_t>(i)]) {
      entry = i;
      break;
    }
  }
  if (entry == kGraphInputId) return std::nullopt;
  std::vector<int> main_convs, shortcut_convs;
  for (int input : add.input_ids) {
    std::vector<int> convs = Convs(graph, Between(graph, entry, input));
    (convs.size() == 3 ? main_convs : shortcut_convs) = convs;
  }
  if (main_convs.size() != 3 || shortcut_convs.size() > 1) return std::nullopt;
  const LayerAttrs& conv1 = graph.layer(main_convs[0]).attrs;
  const LayerAttrs& conv2 = graph.layer(main_convs[1]).attrs;
  const LayerAttrs& conv3 = graph.layer(main_convs[2]).attrs;
  if (conv3.out_channels % 4 != 0 || conv2.groups < 1) return std::nullopt;
  const int64_t planes = conv3.out_channels / 4;
  const int64_t base_width = conv1.out_channels / conv2.groups * 64 / planes;
  std::vector<int64_t> downsample;
  const Shape& entry_shape = graph.layer(entry).output_shape;
  if (entry_shape.size() != 3) return std::nullopt;
  if (shortcut_convs.size() == 1) {
    const LayerAttrs& ds = graph.layer(shortcut_convs[0]).attrs;
    downsample = {entry_shape[0], ds.out_channels, ds.stride[0]};
  }
  // The block ends at the ReLU after the add when there is one.
  int exit = add_id;
  const std::vector<int>& consumers = graph.consumers(add_id);
  if (consumers.size() == 1 && graph.layer(consumers[0]).op == Op::kRelu) exit = consumers[0];
  Block block;
  block.key = BottleneckKey(entry_shape[0], planes, base_width, conv2.groups, conv2.dilation[0],
                            conv2.stride[0], downsample, entry_shape);
  block.layers = Between(graph, entry, exit);
  return block;
}

std::vector<Block> FindBottlenecks(const Graph& graph) {
  std::vector<Block> blocks;
  for (int id = 0; id < graph.num_layers(); ++id) {
    if (graph.layer(id).op != Op::kAdd) continue;
    if (auto block = BottleneckAt(graph, id)) blocks.push_back(std::move(*block));
  }
  return blocks;
}

// Mean times per batch for one key.
struct KeyTimes {
  std::map<int64_t, BatchTime> sums;
  std::map<int64_t, int> counts;
  void Add(const ProfRow& row) {
    BatchTime& sum = sums[row.batch];
    sum.batch = row.batch;
    sum.forward_ms += row.forward_ms;
    sum.backward_ms += row.backward_ms;
    ++counts[row.batch];
  }
  std::vector<BatchTime> Means(double share) const {
    std::vector<BatchTime> means;
    for (const auto& [batch, sum] : sums) {
      const double n = counts.at(batch);
      means.push_back({batch, share * sum.forward_ms / n, share * sum.backward_ms / n});
    }
    return means;
  }
};

}  // namespace

StatusOr<ProfFile> ParseProfFile(std::string_view text) {
  ProfFile file;
  int line_number = 0;
  size_t position = 0;
  int64_t last_batch = 0;
  while (position <= text.size()) {
    size_t end = text.find('\n', position);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = Trim(text.substr(position, end - position));
    position = end + 1;
    ++line_number;
    if (line.empty()) continue;
    auto fail = [&](const std::string& why) {
      return InvalidArgumentError(".prof line " + std::to_string(line_number) + ": " + why);
    };
    std::vector<std::string_view> tokens = SplitWhitespace(line);
    if (tokens[0] == "SUM(avg)" || tokens[0] == "sum:") {
      if (tokens.size() < 2 || !LeadingNumber(tokens[1])) return fail("bad model sum line");
      if (last_batch == 0) return fail("model sum line before any layer row");
      file.model_sum_ms[last_batch] = *LeadingNumber(tokens[1]);
      continue;
    }
    if (tokens.size() != 4) return fail("expected <key> <fw+bw ms> <fw us> <bw us>");
    ProfRow row;
    row.line = line_number;
    Status key = ParseKey(tokens[0], row);
    if (!key.ok()) return fail(key.message());
    auto forward_us = LeadingNumber(tokens[2]);
    auto backward_us = LeadingNumber(tokens[3]);
    if (!forward_us || !backward_us || *forward_us < 0 || *backward_us < 0) {
      return fail("bad times");
    }
    row.raw_forward_ms = row.forward_ms = *forward_us / 1000.0;
    row.raw_backward_ms = row.backward_ms = *backward_us / 1000.0;
    last_batch = row.batch;
    file.rows.push_back(std::move(row));
    if (end == text.size()) break;
  }
  if (file.rows.empty()) return InvalidArgumentError(".prof: no layer rows");
  ShiftBackwardTimes(file.rows);
  return file;
}

StatusOr<A100Import> ImportA100Profile(std::string_view text, const Graph& graph) {
  ASSIGN_OR_RETURN(ProfFile file, ParseProfFile(text));
  std::unordered_map<std::string, KeyTimes> by_key;
  for (const ProfRow& row : file.rows) {
    std::string key = RowKey(row);
    if (!key.empty()) by_key[key].Add(row);
  }
  std::set<std::string> used_keys;
  A100Import result;
  result.data.device = "a100";
  result.data.model = graph.name();
  std::vector<std::optional<LayerProfileData>> timed(static_cast<size_t>(graph.num_layers()));

  for (const Block& block : FindBottlenecks(graph)) {
    auto it = by_key.find(block.key);
    if (it == by_key.end()) continue;
    used_keys.insert(block.key);
    double total_flops = 0;
    for (int id : block.layers) total_flops += static_cast<double>(graph.layer(id).forward_flops);
    for (int id : block.layers) {
      const Layer& layer = graph.layer(id);
      const double share = total_flops > 0 ? static_cast<double>(layer.forward_flops) / total_flops
                                           : 1.0 / static_cast<double>(block.layers.size());
      timed[static_cast<size_t>(id)] =
          LayerProfileData{layer.name, OpName(layer.op), it->second.Means(share)};
      result.block_layers.push_back(layer.name);
    }
  }
  for (int id = 0; id < graph.num_layers(); ++id) {
    if (timed[static_cast<size_t>(id)]) continue;
    const Layer& layer = graph.layer(id);
    const std::string key = LayerKey(graph, layer);
    auto it = key.empty() ? by_key.end() : by_key.find(key);
    if (it == by_key.end()) continue;
    used_keys.insert(key);
    timed[static_cast<size_t>(id)] =
        LayerProfileData{layer.name, OpName(layer.op), it->second.Means(1.0)};
  }
  for (int id = 0; id < graph.num_layers(); ++id) {
    if (timed[static_cast<size_t>(id)]) {
      result.data.layers.push_back(std::move(*timed[static_cast<size_t>(id)]));
    } else {
      result.unmatched_layers.push_back(graph.layer(id).name);
    }
  }
  result.unused_row_keys = static_cast<int>(by_key.size() - used_keys.size());
  if (result.data.layers.empty()) {
    return InvalidArgumentError(".prof: no row matches any layer of graph " + graph.name() +
                                " (is it the profile of this model?)");
  }
  return result;
}

}  // namespace deepool::planner
