#include "worker/runtime/layers/resplit.h"

#include <algorithm>

namespace deepool::worker {

std::vector<ResplitPiece> ResplitPieces(const planner::LayerPlacement& from,
                                        const planner::LayerPlacement& to) {
  std::vector<ResplitPiece> pieces;
  for (int dst : to.devices) {
    auto [dst_first, dst_last] = to.SampleRange(dst);
    for (int src : from.devices) {
      auto [src_first, src_last] = from.SampleRange(src);
      int64_t first = std::max(dst_first, src_first);
      int64_t last = std::min(dst_last, src_last);
      if (first < last) pieces.push_back({src, dst, first, last});
    }
  }
  std::stable_sort(pieces.begin(), pieces.end(), [](const ResplitPiece& a, const ResplitPiece& b) {
    return a.dst != b.dst ? a.dst < b.dst : a.first < b.first;
  });
  return pieces;
}

}  // namespace deepool::worker
