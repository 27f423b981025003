#include "worker/runtime/layers/resplit.h"

#include <catch2/catch.hpp>

namespace deepool::worker {
namespace {

planner::LayerPlacement Place(std::vector<int> devices, int64_t batch) {
  planner::LayerPlacement placement;
  placement.layer = "l";
  placement.samples = planner::NearEqualShares(batch, static_cast<int>(devices.size()));
  placement.devices = std::move(devices);
  return placement;
}

TEST_CASE("re-split pieces cover each destination's range in order", "[resplit]") {
  // 8 samples: {0,1,2} hold [0,3) [3,6) [6,8); {1,3} hold [0,4) [4,8).
  auto from = Place({0, 1, 2}, 8);
  auto to = Place({1, 3}, 8);
  auto pieces = ResplitPieces(from, to);
  std::vector<ResplitPiece> expected{{0, 1, 0, 3}, {1, 1, 3, 4}, {1, 3, 4, 6}, {2, 3, 6, 8}};
  REQUIRE(pieces == expected);
}

TEST_CASE("re-split between identical layouts keeps everything local", "[resplit]") {
  auto layout = Place({0, 2, 3}, 10);
  for (const auto& piece : ResplitPieces(layout, layout)) {
    REQUIRE(piece.src == piece.dst);
  }
  REQUIRE(ResplitPieces(layout, layout).size() == 3);
}

TEST_CASE("re-split from one device scatters, to one device gathers", "[resplit]") {
  auto one = Place({2}, 7);
  auto many = Place({0, 1, 2, 3}, 7);  // 2,2,2,1
  auto scatter = ResplitPieces(one, many);
  REQUIRE(scatter.size() == 4);
  int64_t covered = 0;
  for (const auto& piece : scatter) {
    REQUIRE(piece.src == 2);
    REQUIRE(piece.first == covered);
    covered = piece.last;
  }
  REQUIRE(covered == 7);
  auto gather = ResplitPieces(many, one);
  REQUIRE(gather.size() == 4);
  for (size_t i = 0; i < gather.size(); ++i) {
    REQUIRE(gather[i].dst == 2);
    REQUIRE(gather[i].src == static_cast<int>(i));
  }
}

}  // namespace
}  // namespace deepool::worker
