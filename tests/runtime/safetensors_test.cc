// Weights files a job starts from: safetensors files written here byte by byte from the format's
// definition, and torch archives, told apart by their first bytes.
#include "worker/runtime/checkpoints/safetensors.h"

#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/temp_dir.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;

// 8-byte little-endian header length, the JSON header, the data.
void WriteRaw(const fs::path& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header << data;
}

std::string Bytes(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

TEST_CASE("a safetensors file's tensors load with their names dtypes and shapes",
          "[checkpoint][init]") {
  TempDir dir;
  const torch::Tensor weight = torch::arange(6, torch::kFloat32).reshape({2, 3});
  const torch::Tensor bias = torch::tensor({0.5, -1.5}, torch::kFloat32).to(torch::kBFloat16);
  const torch::Tensor steps = torch::tensor({7}, torch::kInt64);
  std::string data = Bytes(weight) + Bytes(bias) + Bytes(steps);
  nlohmann::json header = {
      {"__metadata__", {{"format", "pt"}}},
      {"fc.weight", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
      {"fc.bias", {{"dtype", "BF16"}, {"shape", {2}}, {"data_offsets", {24, 28}}}},
      {"bn.num_batches_tracked", {{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {28, 36}}}}};
  WriteRaw(dir.File("w.safetensors"), header.dump(), data);
  for (auto load : {&LoadSafetensors, &LoadStateDictFile}) {
    StatusOr<StateDict> state = load(dir.File("w.safetensors"));
    INFO(state.status().ToString());
    REQUIRE(state.ok());
    REQUIRE(state->size() == 3);  // in data order
    CHECK((*state)[0].first == "fc.weight");
    CHECK((*state)[0].second.equal(weight));
    CHECK((*state)[1].first == "fc.bias");
    CHECK((*state)[1].second.scalar_type() == torch::kBFloat16);
    CHECK((*state)[1].second.equal(bias));
    CHECK((*state)[2].first == "bn.num_batches_tracked");
    CHECK((*state)[2].second.equal(steps));
  }
}

TEST_CASE("a torch archive loads through the same entry point", "[checkpoint][init]") {
  TempDir dir;
  const StateDict saved = {{"fc.weight", torch::ones({2, 2})}, {"fc.bias", torch::zeros({2})}};
  REQUIRE(SaveCheckpoint(dir.File("w.pt"), saved).ok());
  StatusOr<StateDict> state = LoadStateDictFile(dir.File("w.pt"));
  INFO(state.status().ToString());
  REQUIRE(state.ok());
  REQUIRE(state->size() == 2);
  CHECK(LoadStateDictFile(dir.File("missing")).status().code() == StatusCode::kNotFound);
}

std::string ErrorOf(const fs::path& path) {
  StatusOr<StateDict> state = LoadSafetensors(path.string());
  REQUIRE_FALSE(state.ok());
  CHECK(state.status().code() == StatusCode::kDataLoss);
  return state.status().message();
}

TEST_CASE("a corrupt safetensors file is refused naming the entry", "[checkpoint][init]") {
  TempDir dir;
  const fs::path path = dir.File("bad.safetensors");
  const std::string eight(8, '\0');
  auto entry = [](const std::string& dtype, nlohmann::json shape, uint64_t b, uint64_t e) {
    return nlohmann::json{{"dtype", dtype}, {"shape", shape}, {"data_offsets", {b, e}}};
  };
  {
    std::ofstream(path, std::ios::binary) << "abc";
    CHECK_THAT(ErrorOf(path), Catch::Contains("shorter than the 8-byte header length"));
  }
  WriteRaw(path, "{not json", eight);
  CHECK_THAT(ErrorOf(path), Catch::Contains("header is not a JSON object"));
  WriteRaw(path, nlohmann::json{{"w", entry("F32", {2}, 0, 8)}}.dump(), "1234");  // cut short
  CHECK_THAT(ErrorOf(path), Catch::Contains("w: data_offsets [0, 8] lie outside the 4 bytes"));
  WriteRaw(path, nlohmann::json{{"w", entry("F32", {3}, 0, 8)}}.dump(), eight);
  CHECK_THAT(ErrorOf(path), Catch::Contains("w: data_offsets hold 8 bytes; its dtype and shape "
                                            "need 12"));
  WriteRaw(path, nlohmann::json{{"w", entry("F8_E4M3", {8}, 0, 8)}}.dump(), eight);
  CHECK_THAT(ErrorOf(path), Catch::Contains("w: dtype F8_E4M3 is not supported"));
  WriteRaw(path,
           nlohmann::json{{"a", entry("F32", {2}, 0, 8)}, {"b", entry("F32", {1}, 4, 8)}}.dump(),
           eight);
  CHECK_THAT(ErrorOf(path), Catch::Contains("b: its data overlaps a's"));
  WriteRaw(path, nlohmann::json{{"w", entry("F32", {-2}, 0, 8)}}.dump(), eight);
  CHECK_THAT(ErrorOf(path), Catch::Contains("w: shape has a size that is not a count"));
  {
    std::ofstream out(path, std::ios::binary);  // a length far past the file
    out << std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) << "{}";
  }
  CHECK_THAT(ErrorOf(path), Catch::Contains("does not fit the 10-byte file"));
  CHECK_THAT(ErrorOf(path), Catch::Contains(path.string()));
}

}  // namespace
}  // namespace deepool::worker
