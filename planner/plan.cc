// Plan format: sample shares, validation and the versioned JSON document (docs/formats.md).
#include "planner/plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "common/json_fields.h"
#include "planner/graph.h"

namespace deepool::planner {
namespace {

using nlohmann::json;

constexpr std::string_view kPlanFormatName = "deepool.plan";

json TotalsToJson(const PlanTotals& totals) {
  return json{{"iteration_ms", totals.iteration_ms},
              {"gpu_seconds", totals.gpu_seconds},
              {"amplification", totals.amplification},
              {"devices_used", totals.devices_used}};
}

StatusOr<PlanTotals> TotalsFromJson(const json& doc, const std::string& field) {
  ASSIGN_OR_RETURN(const json* object, ReadRequiredObject(doc, field, ""));
  const std::string path = field + ".";
  PlanTotals totals;
  RETURN_IF_ERROR(ReadOptionalField(*object, "iteration_ms", path, &totals.iteration_ms));
  RETURN_IF_ERROR(ReadOptionalField(*object, "gpu_seconds", path, &totals.gpu_seconds));
  RETURN_IF_ERROR(ReadOptionalField(*object, "amplification", path, &totals.amplification));
  RETURN_IF_ERROR(ReadOptionalField(*object, "devices_used", path, &totals.devices_used));
  return totals;
}

Status ValidateTotals(const PlanTotals& totals, const std::string& field, int num_devices) {
  if (totals.iteration_ms < 0 || totals.gpu_seconds < 0 || totals.amplification < 0) {
    return InvalidArgumentError(field + ": times and amplification must be >= 0");
  }
  if (totals.devices_used < 0 || totals.devices_used > num_devices) {
    return InvalidArgumentError(field + ".devices_used must be in [0, num_devices]");
  }
  return Status::Ok();
}

}  // namespace

std::vector<int64_t> NearEqualShares(int64_t global_batch, int devices) {
  if (devices < 1 || global_batch < devices) return {};
  std::vector<int64_t> shares(static_cast<size_t>(devices), global_batch / devices);
  const int64_t remainder = global_batch % devices;
  for (int64_t i = 0; i < remainder; ++i) ++shares[static_cast<size_t>(i)];
  return shares;
}

std::pair<int64_t, int64_t> LayerPlacement::SampleRange(int rank) const {
  int64_t first = 0;
  for (size_t i = 0; i < devices.size() && i < samples.size(); ++i) {
    if (devices[i] == rank) return {first, first + samples[i]};
    first += samples[i];
  }
  return {0, 0};
}

bool LayerPlacement::Runs(int rank) const {
  return std::find(devices.begin(), devices.end(), rank) != devices.end();
}

const LayerPlacement* Plan::Find(std::string_view layer) const {
  for (const LayerPlacement& placement : layers) {
    if (placement.layer == layer) return &placement;
  }
  return nullptr;
}

Status Plan::Validate() const {
  if (global_batch < 1) return InvalidArgumentError("global_batch must be >= 1");
  if (num_devices < 1) return InvalidArgumentError("num_devices must be >= 1");
  if (amplification_limit != 0 && amplification_limit < 1) {
    return InvalidArgumentError("amplification_limit must be 0 (unconstrained) or >= 1");
  }
  if (single_device_ms < 0) return InvalidArgumentError("single_device_ms must be >= 0");
  RETURN_IF_ERROR(ValidateTotals(totals, "totals", num_devices));
  RETURN_IF_ERROR(ValidateTotals(data_parallel, "data_parallel", num_devices));
  std::set<std::string> names;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerPlacement& placement = layers[i];
    const std::string where = "layers[" + std::to_string(i) + "] (" + placement.layer + ")";
    if (placement.layer.empty()) return InvalidArgumentError(where + ": layer name is empty");
    if (!names.insert(placement.layer).second) {
      return InvalidArgumentError(where + ": layer appears twice");
    }
    if (placement.devices.empty()) return InvalidArgumentError(where + ": no devices");
    if (placement.devices.size() != placement.samples.size()) {
      return InvalidArgumentError(where + ": devices and samples differ in length");
    }
    int64_t sum = 0;
    for (size_t d = 0; d < placement.devices.size(); ++d) {
      const int rank = placement.devices[d];
      if (rank < 0 || rank >= num_devices) {
        return InvalidArgumentError(where + ": device " + std::to_string(rank) +
                                    " is outside [0, " + std::to_string(num_devices) + ")");
      }
      if (d > 0 && rank <= placement.devices[d - 1]) {
        return InvalidArgumentError(where + ": devices must be distinct and ascending");
      }
      if (placement.samples[d] < 1) {
        return InvalidArgumentError(where + ": every device needs at least one sample");
      }
      sum += placement.samples[d];
    }
    if (sum != global_batch) {
      return InvalidArgumentError(where + ": samples sum to " + std::to_string(sum) +
                                  ", not the global batch " + std::to_string(global_batch));
    }
    if (placement.forward_ms < 0 || placement.backward_ms < 0 || placement.comm_ms < 0) {
      return InvalidArgumentError(where + ": predicted times must be >= 0");
    }
  }
  return Status::Ok();
}

namespace {

// A batch-norm layer's input shape [C, ...], or nothing for other layers.
std::optional<Shape> BatchNormInput(const Graph& graph, const Layer& layer) {
  if (layer.op != Op::kBatchNorm2d || layer.input_ids.empty()) return std::nullopt;
  const int input = layer.input_ids[0];
  const Shape& shape =
      input == kGraphInputId ? graph.input_shape() : graph.layer(input).output_shape;
  if (shape.empty() || shape[0] < 1) return std::nullopt;
  return shape;
}

// Values per channel per sample: H x W, 1 for a [C] input.
int64_t PerSample(const Shape& shape) { return NumElements(shape) / shape[0]; }

std::string MapName(const Shape& shape) {
  return ShapeToString(Shape(shape.begin() + 1, shape.end()));
}

}  // namespace

Status CheckBatchNormTraining(const Graph& graph, int64_t global_batch) {
  for (const Layer& layer : graph.layers()) {
    const std::optional<Shape> shape = BatchNormInput(graph, layer);
    if (!shape || global_batch * PerSample(*shape) != 1) continue;
    return InvalidArgumentError(
        "batch-norm layer '" + layer.name +
        "' would see a single value per channel in training (global batch " +
        std::to_string(global_batch) + " x its " + MapName(*shape) +
        " map); it needs global_batch x H x W >= 2, so use a global batch of at least 2");
  }
  return Status::Ok();
}

int64_t FewestSamplesPerDevice(const Graph& graph, int layer_id) {
  const std::optional<Shape> shape = BatchNormInput(graph, graph.layer(layer_id));
  if (!shape) return 1;
  const int64_t per_sample = std::max<int64_t>(1, PerSample(*shape));
  return (2 + per_sample - 1) / per_sample;
}

Status CheckPerDeviceBatchNormTraining(const Plan& plan, const Graph& graph) {
  for (int id = 0; id < graph.num_layers(); ++id) {
    const std::vector<int64_t>& samples = plan.layers[static_cast<size_t>(id)].samples;
    const Layer& layer = graph.layer(id);
    const std::optional<Shape> shape = BatchNormInput(graph, layer);
    if (!shape || samples.empty()) continue;
    const int64_t fewest = *std::min_element(samples.begin(), samples.end());
    if (fewest >= FewestSamplesPerDevice(graph, id)) continue;
    return InvalidArgumentError(
        "batch-norm layer '" + layer.name + "' would see a single value per channel on a device " +
        "holding " + std::to_string(fewest) + " sample(s) of its " + MapName(*shape) +
        " map, with statistics per device; synchronise batch norm or give each of its devices "
        "at least 2 samples");
  }
  return Status::Ok();
}

Status CheckPlanMatchesGraph(const Plan& plan, const Graph& graph) {
  RETURN_IF_ERROR(plan.Validate());
  if (static_cast<int>(plan.layers.size()) != graph.num_layers()) {
    return InvalidArgumentError("plan has " + std::to_string(plan.layers.size()) +
                                " layers but graph '" + graph.name() + "' has " +
                                std::to_string(graph.num_layers()));
  }
  for (int id = 0; id < graph.num_layers(); ++id) {
    if (plan.layers[static_cast<size_t>(id)].layer != graph.layer(id).name) {
      return InvalidArgumentError("plan layer " + std::to_string(id) + " is '" +
                                  plan.layers[static_cast<size_t>(id)].layer +
                                  "' but the graph's is '" + graph.layer(id).name + "'");
    }
  }
  return CheckBatchNormTraining(graph, plan.global_batch);
}

StatusOr<Plan> ParsePlanJson(std::string_view text) {
  ASSIGN_OR_RETURN(const json doc, ParseJson(text, "plan"));
  if (!doc.is_object()) return InvalidArgumentError("plan: the document must be a JSON object");
  RETURN_IF_ERROR(CheckFormatAndVersion(doc, kPlanFormatName, kPlanFormatVersion));
  Plan plan;
  RETURN_IF_ERROR(ReadOptionalField(doc, "model", "", &plan.model));
  ASSIGN_OR_RETURN(plan.global_batch, ReadRequiredField<int64_t>(doc, "global_batch", ""));
  ASSIGN_OR_RETURN(int64_t num_devices, ReadRequiredField<int64_t>(doc, "num_devices", ""));
  if (num_devices < 1 || num_devices > (1 << 24)) {
    return InvalidArgumentError("num_devices must be in [1, 2^24]");
  }
  plan.num_devices = static_cast<int>(num_devices);
  RETURN_IF_ERROR(ReadOptionalField(doc, "amplification_limit", "", &plan.amplification_limit));
  RETURN_IF_ERROR(ReadOptionalField(doc, "profile_source", "", &plan.profile_source));
  if (doc.contains("profile_environment")) {
    ASSIGN_OR_RETURN(plan.profile_environment,
                     EnvironmentFromJson(doc["profile_environment"], "profile_environment"));
  }
  RETURN_IF_ERROR(ReadOptionalField(doc, "single_device_ms", "", &plan.single_device_ms));
  if (doc.contains("totals")) {
    ASSIGN_OR_RETURN(plan.totals, TotalsFromJson(doc, "totals"));
  }
  if (doc.contains("data_parallel")) {
    ASSIGN_OR_RETURN(plan.data_parallel, TotalsFromJson(doc, "data_parallel"));
  }
  ASSIGN_OR_RETURN(const json* layers_field, ReadRequiredArray(doc, "layers", ""));
  const json& layers = *layers_field;
  plan.layers.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string path = "layers[" + std::to_string(i) + "]";
    const json& entry = layers[i];
    if (!entry.is_object()) return InvalidArgumentError(path + " must be an object");
    LayerPlacement placement;
    const std::string fields = path + ".";
    ASSIGN_OR_RETURN(placement.layer, ReadRequiredField<std::string>(entry, "layer", fields));
    ASSIGN_OR_RETURN(std::vector<int64_t> devices,
                     ReadRequiredList<int64_t>(entry, "devices", fields));
    for (int64_t rank : devices) {
      if (rank < 0 || rank >= plan.num_devices) {
        return InvalidArgumentError(path + ".devices: rank " + std::to_string(rank) +
                                    " is outside [0, num_devices)");
      }
      placement.devices.push_back(static_cast<int>(rank));
    }
    ASSIGN_OR_RETURN(placement.samples, ReadRequiredList<int64_t>(entry, "samples", fields));
    RETURN_IF_ERROR(ReadOptionalField(entry, "forward_ms", fields, &placement.forward_ms));
    RETURN_IF_ERROR(ReadOptionalField(entry, "backward_ms", fields, &placement.backward_ms));
    RETURN_IF_ERROR(ReadOptionalField(entry, "comm_ms", fields, &placement.comm_ms));
    plan.layers.push_back(std::move(placement));
  }
  RETURN_IF_ERROR(plan.Validate());
  return plan;
}

std::string PlanToJson(const Plan& plan, int indent) {
  json layers = json::array();
  for (const LayerPlacement& placement : plan.layers) {
    layers.push_back(json{{"layer", placement.layer},
                          {"devices", placement.devices},
                          {"samples", placement.samples},
                          {"forward_ms", placement.forward_ms},
                          {"backward_ms", placement.backward_ms},
                          {"comm_ms", placement.comm_ms}});
  }
  json doc{{"format", kPlanFormatName},
           {"version", kPlanFormatVersion},
           {"model", plan.model},
           {"global_batch", plan.global_batch},
           {"num_devices", plan.num_devices},
           {"amplification_limit", plan.amplification_limit},
           {"profile_source", plan.profile_source},
           {"single_device_ms", plan.single_device_ms},
           {"totals", TotalsToJson(plan.totals)},
           {"data_parallel", TotalsToJson(plan.data_parallel)},
           {"layers", std::move(layers)}};
  if (!plan.profile_environment.empty()) {
    doc["profile_environment"] = EnvironmentToJson(plan.profile_environment);
  }
  return doc.dump(indent);
}

namespace {

// shares scaled from sum(shares) to `batch` by the largest-remainder rule (ScalePlan).
std::vector<int64_t> ScaleShares(const std::vector<int64_t>& shares, int64_t from, int64_t batch) {
  __extension__ using Wide = __int128;  // share x batch may pass int64 for huge batches
  std::vector<int64_t> scaled(shares.size());
  std::vector<int64_t> remainders(shares.size());
  int64_t left = batch;
  for (size_t i = 0; i < shares.size(); ++i) {
    const Wide product = static_cast<Wide>(shares[i]) * batch;
    scaled[i] = static_cast<int64_t>(product / from);
    remainders[i] = static_cast<int64_t>(product % from);
    left -= scaled[i];
  }
  // 0 <= left < shares.size(): the floors lose less than one sample per device.
  std::vector<size_t> order(shares.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainders[a] > remainders[b]; });
  for (int64_t k = 0; k < left; ++k) ++scaled[order[static_cast<size_t>(k)]];
  return scaled;
}

}  // namespace

Plan ScalePlan(const Plan& plan, int64_t batch) {
  Plan scaled = plan;
  scaled.global_batch = batch;
  scaled.totals = PlanTotals{};
  scaled.data_parallel = PlanTotals{};
  scaled.single_device_ms = 0;
  for (LayerPlacement& placement : scaled.layers) {
    placement.samples = ScaleShares(placement.samples, plan.global_batch, batch);
    placement.forward_ms = placement.backward_ms = placement.comm_ms = 0;
  }
  return scaled;
}

Plan DataParallelLayout(const Graph& graph, int64_t global_batch, int devices) {
  Plan plan;
  plan.model = graph.name();
  plan.global_batch = global_batch;
  plan.num_devices = devices;
  const int used = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(devices, global_batch)));
  std::vector<int> ranks(static_cast<size_t>(used));
  for (int r = 0; r < used; ++r) ranks[static_cast<size_t>(r)] = r;
  const std::vector<int64_t> shares = NearEqualShares(global_batch, used);
  for (const Layer& layer : graph.layers()) {
    LayerPlacement placement;
    placement.layer = layer.name;
    placement.devices = ranks;
    placement.samples = shares;
    plan.layers.push_back(std::move(placement));
  }
  plan.totals.devices_used = used;
  plan.data_parallel.devices_used = used;
  return plan;
}

}  // namespace deepool::planner
