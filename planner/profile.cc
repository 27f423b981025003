// Profiles: the default batch of times, and their precision: what an unrecorded one may stand
// for, and the checks against a wanted one.
#include "planner/profile.h"

namespace deepool::planner {

Status Profile::Times(const Graph& graph, int layer_id, const std::vector<int64_t>& batches,
                      std::vector<LayerTime>* times) const {
  times->resize(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    ASSIGN_OR_RETURN((*times)[i], Time(graph, layer_id, batches[i]));
  }
  return Status::Ok();
}

bool MayBeUnrecordedPrecision(Precision precision) {
  return precision == Precision::kFp32 || precision == Precision::kTf32;
}

bool CompatiblePrecisions(std::optional<Precision> a, std::optional<Precision> b) {
  if (a && b) return *a == *b;
  if (a) return MayBeUnrecordedPrecision(*a);
  if (b) return MayBeUnrecordedPrecision(*b);
  return true;
}

Status CheckProfilePrecision(const Profile& profile, Precision wanted) {
  const std::optional<Precision> recorded = profile.precision();
  if (CompatiblePrecisions(recorded, wanted)) return Status::Ok();
  const std::string what =
      recorded ? std::string("is for ") + PrecisionName(*recorded)
               : std::string(
                     "does not record its precision (fp32 activations, fp32 or tf32 math, "
                     "as deepool's runtime trains)");
  return FailedPreconditionError("profile " + profile.source() + " " + what + ": cannot plan at " +
                                 PrecisionName(wanted) +
                                 " with its times; use a profile measured at " +
                                 PrecisionName(wanted) + " or an analytical device at it");
}

}  // namespace deepool::planner
