// Measured per-layer profiles: the deepool profile JSON format, a table Profile that interpolates
// between measured batch sizes, and ParseProfile, which reads either that JSON or a reference
// A100 `.prof` file (planner/a100_import.h). Format: docs/formats.md, section "Profiles".
//
// Interpolation: per layer, forward and backward times are interpolated piecewise linearly
// between the measured batches, exactly as measured: a time may fall with the batch (on CPUs
// the convolution library picks another kernel at another batch), and its time per sample may
// rise (a CPU's caches spill at a large batch; docs/formats.md). Beyond the
// measured range the table refuses (OUT_OF_RANGE) unless allow_extrapolation, which extends an
// end segment linearly where it rises (never below 0) and otherwise, as for a single measured
// batch, scales the nearest measurement proportionally to the batch.
// Threading: ProfileData is a plain value; a TableProfile is immutable once created and may be
// shared between threads (its fallback must be too).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "planner/cluster.h"
#include "planner/graph.h"
#include "planner/profile.h"
#include "planner/profile_environment.h"

namespace deepool::planner {

// One measurement: a layer at one per-device batch.
struct BatchTime {
  int64_t batch = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  bool operator==(const BatchTime& o) const {
    return batch == o.batch && forward_ms == o.forward_ms && backward_ms == o.backward_ms;
  }
};

struct LayerProfileData {
  std::string name;                // the graph layer's name
  std::string op;                  // OpName() of the layer, informative
  std::vector<BatchTime> batches;  // any order; batches distinct
  bool operator==(const LayerProfileData& o) const {
    return name == o.name && op == o.op && batches == o.batches;
  }
};

// The work of one training iteration outside every layer's forward and backward, at one
// per-device batch: loss, data, autograd's bookkeeping, the optimizer step, the step's own
// synchronisation. Measured by the profiler as a one-rank executor iteration minus the sum of
// the layers' times at that batch.
struct OverheadPoint {
  int64_t batch = 0;
  double ms = 0;
  bool operator==(const OverheadPoint& o) const { return batch == o.batch && ms == o.ms; }
};

// What a profile file holds; the runtime's profiler fills this and calls ProfileToJson.
struct ProfileData {
  std::string device;  // e.g. "a100", "cpu"
  std::string model;   // the graph's name
  // Optional ("precision"): what the times were measured at (precision.h). Absent: not
  // recorded, which stands for fp32 activations with fp32 or TF32 math, as deepool's runtime
  // trains (Profile::precision()).
  std::optional<Precision> precision;
  std::vector<LayerProfileData> layers;
  // Optional ("iteration_overhead" in the file); empty: none measured, charged as 0.
  std::vector<OverheadPoint> iteration_overhead;
  // Optional ("environment"): what the profile was measured on (profile_environment.h).
  ProfileEnvironment environment;
  // Optional ("links"): the link between two ranks of the profiling host, fitted to collectives
  // timed there with the profile (CPU devices: Gloo between processes, which no preset knows).
  std::optional<Link> links;
  bool operator==(const ProfileData& o) const {
    return device == o.device && model == o.model && precision == o.precision &&
           layers == o.layers && iteration_overhead == o.iteration_overhead &&
           environment == o.environment && links == o.links;
  }
};

inline constexpr int kProfileFormatVersion = 1;
// {"format": "deepool.profile", "version": 1, "device": ..., "model": ...,
//  "precision": "bf16" (optional), "layers": [...],
//  "iteration_overhead": [{"batch": 8, "ms": 2.5}, ...] (optional),
//  "environment": {"device_model": ..., "torch": ..., ...} (optional),
//  "links": {"bandwidth_gbps": ..., "latency_us": ..., ...} (optional)}.
// Errors name the field (e.g. "layers[3].batches[0].forward_ms must be >= 0").
StatusOr<ProfileData> ParseProfileJson(std::string_view text);
std::string ProfileToJson(const ProfileData& data, int indent = 2);

struct ProfileOptions {
  bool allow_extrapolation = false;
  // Used for graph layers the profile lacks (and only for those); nullptr: such layers are an
  // error. Must outlive the profile, and be for the profile's precision where it is used
  // (CompatiblePrecisions, profile.h; else FAILED_PRECONDITION naming both).
  const Profile* fallback = nullptr;
};

// Piecewise-linear time of one layer as a function of the batch, through its measurements.
class BatchCurve {
 public:
  // `points` non-empty with distinct positive batches, any order, times >= 0.
  explicit BatchCurve(std::vector<BatchTime> points);
  int64_t min_batch() const { return points_.front().batch; }
  int64_t max_batch() const { return points_.back().batch; }
  bool InRange(int64_t batch) const { return batch >= min_batch() && batch <= max_batch(); }
  // Interpolated (or, outside the range, extrapolated) time; batch >= 1.
  LayerTime At(int64_t batch) const;
  // The measured points, sorted by batch.
  const std::vector<BatchTime>& points() const { return points_; }

 private:
  std::vector<BatchTime> points_;
};

class TableProfile : public Profile {
 public:
  // Checks that every layer of `graph` has times (else NOT_FOUND naming all missing layers,
  // unless options.fallback is given) and that the data is well formed.
  static StatusOr<std::unique_ptr<TableProfile>> Create(const ProfileData& data, const Graph& graph,
                                                        const ProfileOptions& options,
                                                        std::string source);

  TableProfile(const TableProfile&) = delete;  // by_layer_id_ points into curves_
  TableProfile& operator=(const TableProfile&) = delete;

  std::string source() const override { return source_; }
  StatusOr<LayerTime> Time(const Graph& graph, int layer_id, int64_t batch) const override;
  // Interpolated between the measured batches as measured (like a layer's times), the
  // nearest measurement's value beyond them; 0 when the data has none.
  double IterationOverheadMs(int64_t batch) const override;

  const ProfileEnvironment* environment() const override {
    return data_.environment.empty() ? nullptr : &data_.environment;
  }

  std::optional<Precision> precision() const override { return data_.precision; }

  const ProfileData& data() const { return data_; }
  // Graph layers timed by the fallback profile because the data lacks them, in graph order.
  const std::vector<std::string>& fallback_layers() const { return fallback_layers_; }
  // The layer's curve, or nullptr if the table has no times for it.
  const BatchCurve* Curve(std::string_view layer_name) const;

 private:
  TableProfile() = default;
  std::string source_;
  ProfileData data_;
  ProfileOptions options_;
  std::unordered_map<std::string, BatchCurve> curves_;
  std::optional<BatchCurve> overhead_;  // forward_ms holds the overhead
  // By layer id of the graph given to Create, with the name it had: a fast path for that graph
  // (any other graph falls back to the lookup by name).
  std::vector<std::pair<std::string, const BatchCurve*>> by_layer_id_;
  std::vector<std::string> fallback_layers_;
};

// Reads a deepool profile JSON document or a reference A100 `.prof` text (auto-detected: JSON
// starts with '{') and builds a TableProfile for `graph`. The source is
// "profile:<device>/<model>", followed by " (<precision>)" when the file records one, or
// "a100-reference:<model>".
StatusOr<std::unique_ptr<TableProfile>> ParseProfileTable(std::string_view text, const Graph& graph,
                                                          const ProfileOptions& options);
// The precision a profile text records (a deepool profile's "precision"); nullopt for one
// without it and for a reference A100 file. Errors as ParseProfileJson's. For choosing the
// fallback's precision before ParseProfileTable.
StatusOr<std::optional<Precision>> RecordedProfilePrecision(std::string_view text);
StatusOr<std::unique_ptr<Profile>> ParseProfile(std::string_view text, const Graph& graph,
                                                const ProfileOptions& options);

}  // namespace deepool::planner
