// The data source's pinned prefetch on a GPU node (label "gpu"; skipped without a GPU): batches
// come back in page-locked memory, row for row the source's, so the executor's copy to the
// device can be queued (HostMemory::kPinned needs a CUDA driver, hence not a CPU test).
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "tests/runtime/gpu_test_util.h"
#include "worker/runtime/data/data.h"

namespace deepool::worker {
namespace {

Batch Fetch(DataSource& source, int64_t iteration, int64_t first, int64_t last) {
  auto batch = source.Samples(iteration, first, last);
  INFO(batch.status().ToString());
  REQUIRE(batch.ok());
  return std::move(batch).value();
}

TEST_CASE("prefetching into pinned memory gives the source's rows, page-locked", "[gpu][data]") {
  if (!testing::HaveGpus(1)) return;
  auto plain = MakeSyntheticData({3, 40, 40}, 7, 8, 5);
  auto pinned = WithPrefetch(MakeSyntheticData({3, 40, 40}, 7, 8, 5), HostMemory::kPinned);
  auto pageable = WithPrefetch(MakeSyntheticData({3, 40, 40}, 7, 8, 5));
  for (int64_t iteration = 0; iteration < 4; ++iteration) {
    Batch want = Fetch(*plain, iteration, 2, 7);
    Batch got = Fetch(*pinned, iteration, 2, 7);
    CHECK(got.inputs.is_pinned());
    CHECK(got.labels.is_pinned());
    CHECK_FALSE(Fetch(*pageable, iteration, 2, 7).inputs.is_pinned());
    CHECK(torch::equal(got.inputs, want.inputs));
    CHECK(torch::equal(got.labels, want.labels));
    // A queued copy from the pinned rows lands intact.
    torch::Tensor on_device = got.inputs.to(torch::kCUDA, /*non_blocking=*/true);
    CHECK(torch::equal(on_device.cpu(), want.inputs));
  }
}

}  // namespace
}  // namespace deepool::worker
