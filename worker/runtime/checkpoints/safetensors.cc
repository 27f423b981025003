#include "worker/runtime/checkpoints/safetensors.h"

#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>
#include <vector>

#include "weights/safetensors_header.h"
#include "worker/runtime/checkpoints/torch_archive_loader.h"

namespace deepool::worker {
namespace {

// The header's dtype names (weights/weights_index.h) as torch's types.
std::optional<torch::ScalarType> ScalarTypeOf(const std::string& dtype) {
  static const std::pair<const char*, torch::ScalarType> kDtypes[] = {
      {"float64", torch::kFloat64},   {"float32", torch::kFloat32}, {"float16", torch::kFloat16},
      {"bfloat16", torch::kBFloat16}, {"int64", torch::kInt64},     {"int32", torch::kInt32},
      {"int16", torch::kInt16},       {"int8", torch::kInt8},       {"uint8", torch::kUInt8},
      {"bool", torch::kBool}};
  for (const auto& [name, type] : kDtypes) {
    if (dtype == name) return type;
  }
  return std::nullopt;
}

StatusOr<std::vector<char>> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open weights file '" + path + "'");
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

StatusOr<StateDict> ParseSafetensors(const std::vector<char>& bytes) {
  const std::string_view file(bytes.data(), bytes.size());
  ASSIGN_OR_RETURN(const uint64_t header_bytes,
                   weights::SafetensorsHeaderBytes(file.substr(0, 8), file.size()));
  ASSIGN_OR_RETURN(const std::vector<weights::SafetensorsEntry> entries,
                   weights::ParseSafetensorsHeader(file.substr(8, header_bytes),
                                                   file.size() - 8 - header_bytes));
  const char* data = bytes.data() + 8 + header_bytes;
  StateDict state;
  for (const weights::SafetensorsEntry& entry : entries) {
    const std::optional<torch::ScalarType> dtype = ScalarTypeOf(entry.dtype);
    if (!dtype) return InternalError(entry.name + ": no torch type for " + entry.dtype);
    torch::Tensor tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(*dtype));
    if (entry.end > entry.begin) {
      std::memcpy(tensor.data_ptr(), data + entry.begin, entry.end - entry.begin);
    }
    state.emplace_back(entry.name, std::move(tensor));
  }
  return state;
}

}  // namespace

StatusOr<StateDict> LoadSafetensors(const std::string& path) {
  ASSIGN_OR_RETURN(const std::vector<char> bytes, ReadFile(path));
  StatusOr<StateDict> state = ParseSafetensors(bytes);
  if (!state.ok()) return state.status().WithContext("safetensors file '" + path + "'");
  return state;
}

StatusOr<StateDict> LoadStateDictFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open weights file '" + path + "'");
  char magic[4] = {};
  in.read(magic, sizeof magic);
  // A torch archive is a zip: its first local file header starts "PK\3\4".
  if (in.gcount() == 4 && std::memcmp(magic, "PK\3\4", 4) == 0) return LoadTorchArchive(path);
  return LoadSafetensors(path);
}

}  // namespace deepool::worker
