// Profile JSON parse/write, batch curves and the table profile.
#include "planner/profile_table.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "common/json_fields.h"
#include "planner/a100_import.h"

namespace deepool::planner {
namespace {

using nlohmann::json;

constexpr std::string_view kProfileFormatName = "deepool.profile";

double Lerp(int64_t x0, double y0, int64_t x1, double y1, int64_t x) {
  if (x1 == x0) return y0;
  return y0 + (y1 - y0) * static_cast<double>(x - x0) / static_cast<double>(x1 - x0);
}

StatusOr<double> TimeField(const json& object, const char* key, const std::string& path) {
  ASSIGN_OR_RETURN(const double value, ReadRequiredField<double>(object, key, path + "."));
  if (!std::isfinite(value) || value < 0) {
    return InvalidArgumentError("field " + path + "." + key + " must be a finite number >= 0");
  }
  return value;
}

// Checks one layer's measurements: non-empty, batches >= 1 and distinct, times finite >= 0.
Status CheckLayerData(const LayerProfileData& layer, const std::string& path) {
  if (layer.name.empty()) return InvalidArgumentError(path + ".name must not be empty");
  if (layer.batches.empty()) return InvalidArgumentError(path + ".batches must not be empty");
  std::set<int64_t> seen;
  for (size_t i = 0; i < layer.batches.size(); ++i) {
    const BatchTime& point = layer.batches[i];
    const std::string where = path + ".batches[" + std::to_string(i) + "]";
    if (point.batch < 1) return InvalidArgumentError(where + ".batch must be >= 1");
    if (!seen.insert(point.batch).second) {
      return InvalidArgumentError(where + ".batch " + std::to_string(point.batch) +
                                  " repeats in layer " + layer.name);
    }
    for (double value : {point.forward_ms, point.backward_ms}) {
      if (!std::isfinite(value) || value < 0) {
        return InvalidArgumentError(where + " times must be finite and >= 0");
      }
    }
  }
  return Status::Ok();
}

// The optional "iteration_overhead" array: objects {"batch", "ms"}, batches >= 1 and distinct.
Status ReadOverhead(const json& doc, std::vector<OverheadPoint>* points) {
  if (!doc.contains("iteration_overhead")) return Status::Ok();
  ASSIGN_OR_RETURN(const json* items, ReadRequiredArray(doc, "iteration_overhead", ""));
  std::set<int64_t> seen;
  for (size_t i = 0; i < items->size(); ++i) {
    const json& item = (*items)[i];
    const std::string where = "iteration_overhead[" + std::to_string(i) + "]";
    if (!item.is_object()) return InvalidArgumentError(where + " must be an object");
    RETURN_IF_ERROR(CheckKnownFields(item, {"batch", "ms"}, where + "."));
    OverheadPoint point;
    ASSIGN_OR_RETURN(point.batch, ReadRequiredField<int64_t>(item, "batch", where + "."));
    if (point.batch < 1) return InvalidArgumentError(where + ".batch must be >= 1");
    if (!seen.insert(point.batch).second) {
      return InvalidArgumentError(where + ".batch " + std::to_string(point.batch) + " repeats");
    }
    ASSIGN_OR_RETURN(point.ms, TimeField(item, "ms", where));
    points->push_back(point);
  }
  return Status::Ok();
}

// "bf16", or what an unrecorded precision stands for.
std::string PrecisionLabel(std::optional<Precision> precision) {
  return precision ? PrecisionName(*precision) : "an unrecorded precision (fp32 or tf32)";
}

bool IsJsonText(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// JSON

StatusOr<ProfileData> ParseProfileJson(std::string_view text) {
  ASSIGN_OR_RETURN(const json doc, ParseJson(text, "profile"));
  auto fail = [](const Status& status) { return status.WithContext("profile"); };
  if (!doc.is_object()) return fail(InvalidArgumentError("the document must be an object"));
  if (Status header = CheckFormatAndVersion(doc, kProfileFormatName, kProfileFormatVersion);
      !header.ok()) {
    return fail(header);
  }
  Status known = CheckKnownFields(doc,
                                  {"format", "version", "device", "model", "precision", "layers",
                                   "iteration_overhead", "environment", "links"},
                                  "");
  if (!known.ok()) return fail(known);
  ProfileData data;
  auto device = ReadRequiredField<std::string>(doc, "device", "");
  if (!device.ok()) return fail(device.status());
  data.device = *device;
  auto model = ReadRequiredField<std::string>(doc, "model", "");
  if (!model.ok()) return fail(model.status());
  data.model = *model;
  if (doc.contains("precision")) {
    std::string name;
    Status read = ReadOptionalField(doc, "precision", "", &name);
    if (!read.ok()) return fail(read);
    StatusOr<Precision> precision = ParsePrecision(name);
    if (!precision.ok()) return fail(precision.status().WithContext("field precision"));
    data.precision = *precision;
  }

  auto layers = ReadRequiredArray(doc, "layers", "");
  if (!layers.ok()) return fail(layers.status());
  std::set<std::string> names;
  for (size_t i = 0; i < (*layers)->size(); ++i) {
    const json& entry = (**layers)[i];
    const std::string path = "layers[" + std::to_string(i) + "]";
    if (!entry.is_object()) return fail(InvalidArgumentError(path + " must be an object"));
    known = CheckKnownFields(entry, {"name", "op", "batches"}, path + ".");
    if (!known.ok()) return fail(known);
    LayerProfileData layer;
    auto name = ReadRequiredField<std::string>(entry, "name", path + ".");
    if (!name.ok()) return fail(name.status());
    layer.name = *name;
    if (!names.insert(layer.name).second) {
      return fail(InvalidArgumentError(path + ".name \"" + layer.name + "\" repeats"));
    }
    Status op = ReadOptionalField(entry, "op", path + ".", &layer.op);
    if (!op.ok()) return fail(op);
    auto batches = ReadRequiredArray(entry, "batches", path + ".");
    if (!batches.ok()) return fail(batches.status());
    for (size_t j = 0; j < (*batches)->size(); ++j) {
      const json& item = (**batches)[j];
      const std::string where = path + ".batches[" + std::to_string(j) + "]";
      if (!item.is_object()) return fail(InvalidArgumentError(where + " must be an object"));
      known = CheckKnownFields(item, {"batch", "forward_ms", "backward_ms"}, where + ".");
      if (!known.ok()) return fail(known);
      BatchTime point;
      auto batch = ReadRequiredField<int64_t>(item, "batch", where + ".");
      if (!batch.ok()) return fail(batch.status());
      point.batch = *batch;
      auto forward = TimeField(item, "forward_ms", where);
      if (!forward.ok()) return fail(forward.status());
      point.forward_ms = *forward;
      auto backward = TimeField(item, "backward_ms", where);
      if (!backward.ok()) return fail(backward.status());
      point.backward_ms = *backward;
      layer.batches.push_back(point);
    }
    Status valid = CheckLayerData(layer, path);
    if (!valid.ok()) return fail(valid);
    data.layers.push_back(std::move(layer));
  }
  Status overhead = ReadOverhead(doc, &data.iteration_overhead);
  if (!overhead.ok()) return fail(overhead);
  if (doc.contains("environment")) {
    StatusOr<ProfileEnvironment> environment =
        EnvironmentFromJson(doc["environment"], "environment");
    if (!environment.ok()) return fail(environment.status());
    data.environment = *std::move(environment);
  }
  if (doc.contains("links")) {
    StatusOr<Link> links = LinkFromJson(doc["links"], "links");
    if (!links.ok()) return fail(links.status());
    data.links = *links;
  }
  return data;
}

std::string ProfileToJson(const ProfileData& data, int indent) {
  json layers = json::array();
  for (const LayerProfileData& layer : data.layers) {
    std::vector<BatchTime> sorted = layer.batches;
    std::sort(sorted.begin(), sorted.end(),
              [](const BatchTime& a, const BatchTime& b) { return a.batch < b.batch; });
    json batches = json::array();
    for (const BatchTime& point : sorted) {
      batches.push_back({{"batch", point.batch},
                         {"forward_ms", point.forward_ms},
                         {"backward_ms", point.backward_ms}});
    }
    layers.push_back({{"name", layer.name}, {"op", layer.op}, {"batches", std::move(batches)}});
  }
  json doc = {{"format", kProfileFormatName},
              {"version", kProfileFormatVersion},
              {"device", data.device},
              {"model", data.model},
              {"layers", std::move(layers)}};
  if (data.precision) doc["precision"] = PrecisionName(*data.precision);
  if (!data.iteration_overhead.empty()) {
    std::vector<OverheadPoint> sorted = data.iteration_overhead;
    std::sort(sorted.begin(), sorted.end(),
              [](const OverheadPoint& a, const OverheadPoint& b) { return a.batch < b.batch; });
    json points = json::array();
    for (const OverheadPoint& point : sorted) {
      points.push_back({{"batch", point.batch}, {"ms", point.ms}});
    }
    doc["iteration_overhead"] = std::move(points);
  }
  if (!data.environment.empty()) doc["environment"] = EnvironmentToJson(data.environment);
  if (data.links) doc["links"] = LinkToJson(*data.links);
  return doc.dump(indent);
}

// ---------------------------------------------------------------------------------------------
// Curves

BatchCurve::BatchCurve(std::vector<BatchTime> points) : points_(std::move(points)) {
  std::sort(points_.begin(), points_.end(),
            [](const BatchTime& a, const BatchTime& b) { return a.batch < b.batch; });
}

namespace {

// One series (forward or backward) beyond the measured range, from the end segment [a, b]
// (a.batch < b.batch) and the measured point nearest `batch`: the segment extended when the time
// rises with the batch along it; a falling one (a faster kernel at the larger batch) says
// nothing about batches further out, so the time then scales with the batch from the nearest
// point. Never below 0.
double Outside(const BatchTime& a, const BatchTime& b, double BatchTime::*series,
               const BatchTime& nearest, int64_t batch) {
  if (a.*series <= b.*series)
    return std::max(0.0, Lerp(a.batch, a.*series, b.batch, b.*series, batch));
  return nearest.*series * static_cast<double>(batch) / static_cast<double>(nearest.batch);
}

}  // namespace

LayerTime BatchCurve::At(int64_t batch) const {
  const size_t n = points_.size();
  if (n == 1) {
    // One measurement: exact at its batch, proportional to the batch elsewhere.
    const double scale = static_cast<double>(batch) / static_cast<double>(points_[0].batch);
    return {points_[0].forward_ms * scale, points_[0].backward_ms * scale};
  }
  if (batch < points_.front().batch || batch > points_.back().batch) {
    const bool below = batch < points_.front().batch;
    const BatchTime& a = below ? points_[0] : points_[n - 2];
    const BatchTime& b = below ? points_[1] : points_[n - 1];
    const BatchTime& nearest = below ? a : b;
    return {Outside(a, b, &BatchTime::forward_ms, nearest, batch),
            Outside(a, b, &BatchTime::backward_ms, nearest, batch)};
  }
  // The segment [lo, lo + 1] that holds `batch`.
  auto upper = std::upper_bound(points_.begin(), points_.end(), batch,
                                [](int64_t b, const BatchTime& p) { return b < p.batch; });
  const size_t lo = std::min(static_cast<size_t>(upper - points_.begin()), n - 1) - 1;
  const BatchTime& a = points_[lo];
  const BatchTime& b = points_[lo + 1];
  return {Lerp(a.batch, a.forward_ms, b.batch, b.forward_ms, batch),
          Lerp(a.batch, a.backward_ms, b.batch, b.backward_ms, batch)};
}

// ---------------------------------------------------------------------------------------------
// Table profile

StatusOr<std::unique_ptr<TableProfile>> TableProfile::Create(const ProfileData& data,
                                                             const Graph& graph,
                                                             const ProfileOptions& options,
                                                             std::string source) {
  std::unique_ptr<TableProfile> profile(new TableProfile());
  profile->source_ = std::move(source);
  profile->data_ = data;
  profile->options_ = options;
  for (size_t i = 0; i < data.layers.size(); ++i) {
    const LayerProfileData& layer = data.layers[i];
    RETURN_IF_ERROR(CheckLayerData(layer, "layers[" + std::to_string(i) + "]"));
    if (!profile->curves_.emplace(layer.name, BatchCurve(layer.batches)).second) {
      return InvalidArgumentError("profile: layer \"" + layer.name + "\" appears twice");
    }
  }
  if (!data.iteration_overhead.empty()) {
    std::vector<BatchTime> points;
    for (const OverheadPoint& point : data.iteration_overhead) {
      if (point.batch < 1 || !std::isfinite(point.ms) || point.ms < 0) {
        return InvalidArgumentError("profile: iteration_overhead at batch " +
                                    std::to_string(point.batch) + " is not a time >= 0");
      }
      points.push_back({point.batch, point.ms, 0});
    }
    profile->overhead_.emplace(std::move(points));
  }
  // A profile of another model (or a stale one) shows as a layer whose op changed.
  for (const LayerProfileData& layer : data.layers) {
    auto id = graph.FindLayer(layer.name);
    if (id && !layer.op.empty() && layer.op != OpName(graph.layer(*id).op)) {
      return InvalidArgumentError("profile: layer " + layer.name + " is " + layer.op +
                                  " in the profile but " + OpName(graph.layer(*id).op) +
                                  " in graph " + graph.name());
    }
  }
  std::vector<std::string> missing;
  for (const Layer& layer : graph.layers()) {
    const BatchCurve* curve = profile->Curve(layer.name);
    if (curve == nullptr) missing.push_back(layer.name);
    profile->by_layer_id_.emplace_back(layer.name, curve);
  }
  if (!missing.empty()) {
    if (options.fallback == nullptr) {
      std::string names;
      for (const std::string& name : missing) names += (names.empty() ? "" : ", ") + name;
      return NotFoundError("profile " + profile->source_ + " has no times for " +
                           std::to_string(missing.size()) + " of " +
                           std::to_string(graph.num_layers()) + " layers of " + graph.name() +
                           ": " + names);
    }
    if (!CompatiblePrecisions(data.precision, options.fallback->precision())) {
      return FailedPreconditionError(
          "profile " + profile->source_ + " is for " + PrecisionLabel(data.precision) +
          " but its fallback " + options.fallback->source() + " is for " +
          PrecisionLabel(options.fallback->precision()) +
          ": the layers it lacks must be timed at the profile's precision");
    }
    profile->fallback_layers_ = std::move(missing);
    profile->source_ += " + " + options.fallback->source() + " for " +
                        std::to_string(profile->fallback_layers_.size()) + " layers";
  }
  return profile;
}

const BatchCurve* TableProfile::Curve(std::string_view layer_name) const {
  auto it = curves_.find(std::string(layer_name));
  return it == curves_.end() ? nullptr : &it->second;
}

StatusOr<LayerTime> TableProfile::Time(const Graph& graph, int layer_id, int64_t batch) const {
  if (layer_id < 0 || layer_id >= graph.num_layers()) {
    return InvalidArgumentError("layer id " + std::to_string(layer_id) + " is not in graph " +
                                graph.name());
  }
  const Layer& layer = graph.layer(layer_id);
  if (batch < 1) {
    return InvalidArgumentError("layer " + layer.name + ": batch must be >= 1, got " +
                                std::to_string(batch));
  }
  const size_t index = static_cast<size_t>(layer_id);
  const BatchCurve* curve = index < by_layer_id_.size() && by_layer_id_[index].first == layer.name
                                ? by_layer_id_[index].second
                                : Curve(layer.name);
  if (curve == nullptr) {
    if (options_.fallback != nullptr) return options_.fallback->Time(graph, layer_id, batch);
    return NotFoundError("profile " + source_ + " has no times for layer " + layer.name);
  }
  if (!curve->InRange(batch) && !options_.allow_extrapolation) {
    return OutOfRangeError("layer " + layer.name + ": batch " + std::to_string(batch) +
                           " is outside the measured range [" + std::to_string(curve->min_batch()) +
                           ", " + std::to_string(curve->max_batch()) +
                           "] (extrapolation was not requested)");
  }
  return curve->At(batch);
}

double TableProfile::IterationOverheadMs(int64_t batch) const {
  if (!overhead_) return 0;
  const int64_t clamped = std::clamp(batch, overhead_->min_batch(), overhead_->max_batch());
  return overhead_->At(clamped).forward_ms;
}

StatusOr<std::unique_ptr<TableProfile>> ParseProfileTable(std::string_view text, const Graph& graph,
                                                          const ProfileOptions& options) {
  if (IsJsonText(text)) {
    ASSIGN_OR_RETURN(ProfileData data, ParseProfileJson(text));
    std::string source = "profile:" + data.device + "/" + data.model;
    if (data.precision) source += std::string(" (") + PrecisionName(*data.precision) + ")";
    return TableProfile::Create(data, graph, options, std::move(source));
  }
  ASSIGN_OR_RETURN(A100Import imported, ImportA100Profile(text, graph));
  return TableProfile::Create(imported.data, graph, options, "a100-reference:" + graph.name());
}

StatusOr<std::optional<Precision>> RecordedProfilePrecision(std::string_view text) {
  if (!IsJsonText(text)) return std::optional<Precision>();
  ASSIGN_OR_RETURN(ProfileData data, ParseProfileJson(text));
  return data.precision;
}

StatusOr<std::unique_ptr<Profile>> ParseProfile(std::string_view text, const Graph& graph,
                                                const ProfileOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<TableProfile> table, ParseProfileTable(text, graph, options));
  return std::unique_ptr<Profile>(std::move(table));
}

}  // namespace deepool::planner
