#include "common/forked_ranks.h"

#include <catch2/catch.hpp>
#include <csignal>

namespace deepool {
namespace {

TEST_CASE("forked ranks get rank 0's port and report their exit codes by rank", "[forked_ranks]") {
  auto pipe = PortPipe::Create();
  REQUIRE(pipe.ok());
  auto codes = ForkRanks(3, [&](int rank) {
    if (rank == 0) return pipe->Publish(4242, 2).ok() ? 7 : 1;
    StatusOr<int> port = pipe->Await();
    return port.ok() && *port == 4242 ? 10 + rank : 1;
  });
  REQUIRE(codes.ok());
  CHECK(*codes == std::vector<int>{7, 11, 12});
}

TEST_CASE("a forked rank killed by a signal reports -1", "[forked_ranks]") {
  auto codes = ForkRanks(2, [](int rank) {
    if (rank == 1) std::raise(SIGKILL);
    return 0;
  });
  REQUIRE(codes.ok());
  CHECK(*codes == std::vector<int>{0, -1});
}

}  // namespace
}  // namespace deepool
