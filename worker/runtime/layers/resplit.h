// Re-splitting a batch-major tensor between two device sets by the plan's sample-range rule
// (planner/plan.h): each device of a layer holds a contiguous range of the global batch, in the
// batch's order. Moving from one layer's layout to another's is a set of pieces, each a sample
// range that one rank sends to another (or keeps, when src == dst). The backward pass uses the
// same pieces in the opposite direction. Pure functions; no communication here.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "planner/plan.h"

namespace deepool::worker {

struct ResplitPiece {
  int src = 0;        // rank that holds the samples under the `from` layout
  int dst = 0;        // rank that needs them under the `to` layout
  int64_t first = 0;  // [first, last): samples of the global batch
  int64_t last = 0;
  int64_t size() const { return last - first; }
  bool operator==(const ResplitPiece& o) const {
    return src == o.src && dst == o.dst && first == o.first && last == o.last;
  }
};

// "2->0 [8, 12)", for logs and test failures.
inline std::ostream& operator<<(std::ostream& os, const ResplitPiece& piece) {
  return os << piece.src << "->" << piece.dst << " [" << piece.first << ", " << piece.last << ")";
}

// Every non-empty overlap between a `from` device's range and a `to` device's range, ordered by
// (dst, first): the pieces with one dst, concatenated in order, are exactly dst's range. Every
// rank computes the same list, so its order is part of the canonical transfer order (executor.h).
std::vector<ResplitPiece> ResplitPieces(const planner::LayerPlacement& from,
                                        const planner::LayerPlacement& to);

}  // namespace deepool::worker
