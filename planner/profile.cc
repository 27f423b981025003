// Profiles' precision: what an unrecorded one may stand for, and the checks against a wanted one.
#include "planner/profile.h"

namespace deepool::planner {

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
