#include "worker/runtime/data/token_file.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "planner/plan.h"
#include "tests/temp_dir.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;

// Token i of the file is i mod `modulo`, written little-endian in `bytes` bytes per id.
fs::path WriteTokens(const fs::path& dir, int64_t count, int bytes, int64_t modulo = 1 << 30) {
  const fs::path path = dir / ("tokens" + std::to_string(bytes) + ".bin");
  std::ofstream out(path, std::ios::binary);
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t token = static_cast<uint32_t>(i % modulo);
    for (int b = 0; b < bytes; ++b) out.put(static_cast<char>((token >> (8 * b)) & 0xff));
  }
  return path;
}

StatusOr<std::unique_ptr<DataSource>> Open(const fs::path& path, int64_t length, int64_t batch,
                                           TokenDataOptions options = {},
                                           int64_t vocabulary = 1 << 30) {
  return OpenTokenFile(path.string(), {length}, vocabulary, batch, options);
}

TEST_CASE("token windows are next-token pairs at offsets drawn from the seed", "[data][tokens]") {
  TempDir dir;
  for (int bytes : {2, 4}) {
    INFO(bytes << "-byte ids");
    // Token i is i (mod 2^16 for uint16), so a row's first input tells its offset.
    const fs::path path = WriteTokens(dir.path(), 5000, bytes, bytes == 2 ? 65536 : 1 << 30);
    auto data = Open(path, 8, 6, {3, bytes});
    INFO(data.status().ToString());
    REQUIRE(data.ok());
    REQUIRE((*data)->num_samples() == (5000 - 1) / 8);
    std::set<int64_t> starts;
    for (int64_t iteration = 0; iteration < 5; ++iteration) {
      auto batch = (*data)->GlobalBatch(iteration);
      REQUIRE(batch.ok());
      REQUIRE(batch->inputs.scalar_type() == torch::kInt64);
      REQUIRE(batch->inputs.sizes() == std::vector<int64_t>{6, 8});
      REQUIRE(batch->labels.sizes() == std::vector<int64_t>{6, 8});
      for (int64_t row = 0; row < 6; ++row) {
        const int64_t start = batch->inputs[row][0].item<int64_t>();
        REQUIRE(start + 8 < 5000);
        starts.insert(start);
        REQUIRE(batch->inputs[row].equal(torch::arange(start, start + 8, torch::kInt64)));
        REQUIRE(batch->labels[row].equal(torch::arange(start + 1, start + 9, torch::kInt64)));
      }
    }
    REQUIRE(starts.size() > 25);  // 30 draws from 4,992 offsets: hardly any repeat
    // Rows do not depend on how ranks split the batch; another seed draws other windows.
    auto whole = (*data)->GlobalBatch(2);
    auto again = Open(path, 8, 6, {3, bytes});
    auto part = (*again)->Samples(2, 4, 6);
    REQUIRE(part->inputs.equal(whole->inputs.narrow(0, 4, 2)));
    auto other = Open(path, 8, 6, {4, bytes});
    REQUIRE_FALSE((*other)->GlobalBatch(2)->inputs.equal(whole->inputs));
  }
}

TEST_CASE("held-out token files are read as consecutive windows", "[data][tokens]") {
  TempDir dir;
  const fs::path path = WriteTokens(dir.path(), 41, 2);  // (41 - 1) / 8 = 5 windows
  auto data = Open(path, 8, 4, {0, 2, DataUse::kEvaluation});
  REQUIRE(data.ok());
  REQUIRE((*data)->num_samples() == 5);
  std::vector<int64_t> starts;
  for (int64_t pass = 0; pass < 2; ++pass) {
    auto batch = (*data)->GlobalBatch(pass);
    REQUIRE(batch.ok());
    for (int64_t row = 0; row < 4; ++row) starts.push_back(batch->inputs[row][0].item<int64_t>());
    REQUIRE(batch->labels[0][7].item<int64_t>() == batch->inputs[0][0].item<int64_t>() + 8);
  }
  // Windows 0..4, then the file again from the start (rows past num_samples pad the last pass).
  REQUIRE(starts == std::vector<int64_t>{0, 8, 16, 24, 32, 0, 8, 16});
}

TEST_CASE("bad token files are refused by name", "[data][tokens]") {
  TempDir dir;
  SECTION("missing") {
    auto data = Open(dir.File("none.bin"), 8, 4);
    REQUIRE(data.status().code() == StatusCode::kNotFound);
    REQUIRE_THAT(data.status().message(), Catch::Contains("none.bin"));
  }
  SECTION("a length that is not a whole number of ids") {
    const fs::path path = WriteTokens(dir.path(), 100, 2);
    std::ofstream(path, std::ios::binary | std::ios::app).put('x');
    auto data = Open(path, 8, 4);
    REQUIRE(data.status().code() == StatusCode::kInvalidArgument);
    REQUIRE_THAT(data.status().message(),
                 Catch::Contains("201 bytes, not a whole number of 2-byte token ids"));
    REQUIRE(Open(path, 8, 4, {0, 4}).status().code() == StatusCode::kInvalidArgument);
  }
  SECTION("shorter than one window") {
    auto data = Open(WriteTokens(dir.path(), 8, 2), 8, 4);
    REQUIRE_THAT(data.status().message(), Catch::Contains("needs 9"));
  }
  SECTION("a token beyond the vocabulary fails the batch naming the token") {
    const fs::path path = WriteTokens(dir.path(), 41, 2);  // ids 0..40
    auto data = Open(path, 8, 5, {0, 2, DataUse::kEvaluation}, /*vocabulary=*/30);
    REQUIRE(data.ok());
    auto batch = (*data)->GlobalBatch(0);  // windows 0..4: the fourth reaches id 30
    REQUIRE(batch.status().code() == StatusCode::kInvalidArgument);
    REQUIRE_THAT(batch.status().message(),
                 Catch::Contains("token 30 is 30, beyond the model's vocabulary of 30"));
    REQUIRE_THAT(batch.status().message(), Catch::Contains(path.string()));
  }
  SECTION("a graph input that is not a sequence") {
    auto data = OpenTokenFile(WriteTokens(dir.path(), 100, 2).string(), {3, 8, 8}, 10, 4, {});
    REQUIRE_THAT(data.status().message(), Catch::Contains("shape [T]"));
  }
}

}  // namespace
}  // namespace deepool::worker
