// Per-layer timing profiles: forward and backward time of each graph layer as a function of the
// per-device batch. Sources: a profile JSON file (measured by the runtime's profiler), the
// reference A100 files, or an analytical device model (see profile_table.h, device_model.h).
// Threading: implementations are immutable after construction and safe to share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "planner/precision.h"
#include "planner/profile_environment.h"

namespace deepool::planner {

class Graph;

struct LayerTime {
  double forward_ms = 0;
  double backward_ms = 0;
  double total_ms() const { return forward_ms + backward_ms; }
};

class Profile {
 public:
  virtual ~Profile() = default;
  // Where the numbers come from, for plans and reports ("file:vgg.json", "analytical:a100").
  virtual std::string source() const = 0;
  // Time of graph layer `layer_id` at a per-device batch of `batch` (>= 1) samples.
  // Errors (NOT_FOUND for an unprofiled layer, OUT_OF_RANGE beyond the measured batches)
  // name the layer.
  virtual StatusOr<LayerTime> Time(const Graph& graph, int layer_id, int64_t batch) const = 0;
  // Time(graph, layer_id, b) for every b of `batches`, in order, into `times` (resized to as
  // many): the same answers in one call, stopping at the first error, which it returns. The
  // cost model asks for a layer at all its shares this way, so that a source with work per
  // layer whatever the batch (the analytical model's shapes and GEMM sizes) does it once. The
  // default asks Time for each batch.
  virtual Status Times(const Graph& graph, int layer_id, const std::vector<int64_t>& batches,
                       std::vector<LayerTime>* times) const;
  // The iteration's work outside the layers (loss, data, autograd, optimizer step) when each
  // device holds `batch` samples of the output layer; 0 where the source does not measure it.
  virtual double IterationOverheadMs(int64_t /*batch*/) const { return 0; }
  // What the times were measured on; nullptr where the source does not say (analytical models,
  // reference files, profiles measured before it was recorded).
  virtual const ProfileEnvironment* environment() const { return nullptr; }
  // The precision the times are for (precision.h): an analytical model's, a profile file's
  // "precision". nullopt where the source does not record it (reference files, profiles
  // measured before it was recorded): those were measured as deepool's runtime trains, fp32
  // activations with fp32 or TF32 math (MayBeUnrecordedPrecision). The cost model sizes
  // activation re-splits by it (4 bytes per element when nullopt).
  virtual std::optional<Precision> precision() const { return std::nullopt; }
};

// What a profile that does not record its precision may stand for: fp32 and tf32 (both keep
// fp32 activations; the math depends on the library: cuDNN's convolutions use TF32 by default,
// libtorch's matrix multiplies not).
bool MayBeUnrecordedPrecision(Precision precision);

// OK when `profile` is for `wanted`: it records `wanted`, or records nothing and `wanted` is
// one MayBeUnrecordedPrecision allows. FAILED_PRECONDITION naming the profile's source, its
// precision and `wanted` otherwise: planning at one precision with the times of another would
// mix the two (the other's compute with this one's transfer sizes), so it is refused.
Status CheckProfilePrecision(const Profile& profile, Precision wanted);
// Whether two profiles' precisions can be mixed (a table and the fallback that times the
// layers it lacks): equal, or one unrecorded and the other one MayBeUnrecordedPrecision allows.
bool CompatiblePrecisions(std::optional<Precision> a, std::optional<Precision> b);

}  // namespace deepool::planner
