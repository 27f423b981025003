// Precision names and element widths.
#include "planner/precision.h"

namespace deepool::planner {

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kTf32:
      return "tf32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

std::vector<Precision> AllPrecisions() {
  return {Precision::kFp32, Precision::kTf32, Precision::kBf16, Precision::kFp16};
}

StatusOr<Precision> ParsePrecision(std::string_view name) {
  std::string known;
  for (Precision precision : AllPrecisions()) {
    if (name == PrecisionName(precision)) return precision;
    known += (known.empty() ? "" : ", ") + std::string(PrecisionName(precision));
  }
  return InvalidArgumentError("unknown precision \"" + std::string(name) + "\" (known: " + known +
                              ")");
}

int BytesPerElement(Precision precision) {
  return precision == Precision::kBf16 || precision == Precision::kFp16 ? 2 : 4;
}

}  // namespace deepool::planner
