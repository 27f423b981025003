#include "worker/runtime/checkpoints/safetensors.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace deepool::worker {
namespace {

using nlohmann::json;

// A header far larger than any model's names and shapes is a corrupt length, not a header.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

struct Entry {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

std::optional<torch::ScalarType> DtypeOf(const std::string& name) {
  static const std::pair<const char*, torch::ScalarType> kDtypes[] = {
      {"F64", torch::kFloat64},   {"F32", torch::kFloat32}, {"F16", torch::kFloat16},
      {"BF16", torch::kBFloat16}, {"I64", torch::kInt64},   {"I32", torch::kInt32},
      {"I16", torch::kInt16},     {"I8", torch::kInt8},     {"U8", torch::kUInt8},
      {"BOOL", torch::kBool}};
  for (const auto& [text, dtype] : kDtypes) {
    if (name == text) return dtype;
  }
  return std::nullopt;
}

StatusOr<Entry> ReadEntry(const std::string& name, const json& doc, uint64_t data_bytes) {
  auto bad = [&](const std::string& what) { return DataLossError(name + ": " + what); };
  if (!doc.is_object()) return bad("is not an object");
  Entry entry;
  entry.name = name;
  if (!doc.contains("dtype") || !doc["dtype"].is_string()) return bad("dtype is missing");
  const std::optional<torch::ScalarType> dtype = DtypeOf(doc["dtype"].get<std::string>());
  if (!dtype) return bad("dtype " + doc["dtype"].get<std::string>() + " is not supported");
  entry.dtype = *dtype;
  if (!doc.contains("shape") || !doc["shape"].is_array()) return bad("shape is missing");
  uint64_t elements = 1;
  for (const json& size : doc["shape"]) {
    if (!size.is_number_unsigned()) return bad("shape has a size that is not a count");
    const uint64_t n = size.get<uint64_t>();
    if (n != 0 && elements > data_bytes / n) return bad("shape is larger than the file");
    elements *= n;
    entry.shape.push_back(static_cast<int64_t>(n));
  }
  const json& offsets = doc.contains("data_offsets") ? doc["data_offsets"] : json();
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return bad("data_offsets must be [begin, end]");
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  const uint64_t bytes = elements * c10::elementSize(entry.dtype);
  if (entry.begin > entry.end || entry.end > data_bytes) {
    return bad("data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
               "] lie outside the " + std::to_string(data_bytes) + " bytes of data");
  }
  if (entry.end - entry.begin != bytes) {
    return bad("data_offsets hold " + std::to_string(entry.end - entry.begin) +
               " bytes; its dtype and shape need " + std::to_string(bytes));
  }
  return entry;
}

StatusOr<std::vector<char>> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open weights file '" + path + "'");
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

StatusOr<StateDict> ParseSafetensors(const std::vector<char>& bytes) {
  if (bytes.size() < 8) return DataLossError("shorter than the 8-byte header length");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_bytes = (header_bytes << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  }
  if (header_bytes > kMaxHeaderBytes || header_bytes > bytes.size() - 8) {
    return DataLossError("header length " + std::to_string(header_bytes) + " does not fit the " +
                         std::to_string(bytes.size()) + "-byte file");
  }
  const json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + header_bytes, nullptr,
                                  /*allow_exceptions=*/false);
  if (!header.is_object()) return DataLossError("header is not a JSON object");
  const uint64_t data_bytes = bytes.size() - 8 - header_bytes;
  std::vector<Entry> entries;
  for (const auto& [name, doc] : header.items()) {
    if (name == "__metadata__") continue;
    ASSIGN_OR_RETURN(Entry entry, ReadEntry(name, doc, data_bytes));
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < entries.size(); ++k) {
    if (entries[k].begin < entries[k - 1].end) {
      return DataLossError(entries[k].name + ": its data overlaps " + entries[k - 1].name + "'s");
    }
  }
  const char* data = bytes.data() + 8 + header_bytes;
  StateDict state;
  for (const Entry& entry : entries) {
    torch::Tensor tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.dtype));
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
  if (in.gcount() == 4 && std::memcmp(magic, "PK\3\4", 4) == 0) return LoadCheckpoint(path);
  return LoadSafetensors(path);
}

}  // namespace deepool::worker
