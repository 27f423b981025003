#include "weights/safetensors_header.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "weights/weights_index.h"

namespace deepool::weights {
namespace {

using nlohmann::json;

const char* TorchDtypeOf(const std::string& name) {
  static const std::pair<const char*, const char*> kDtypes[] = {
      {"F64", "float64"}, {"F32", "float32"}, {"F16", "float16"}, {"BF16", "bfloat16"},
      {"I64", "int64"},   {"I32", "int32"},   {"I16", "int16"},   {"I8", "int8"},
      {"U8", "uint8"},    {"BOOL", "bool"}};
  for (const auto& [text, dtype] : kDtypes) {
    if (name == text) return dtype;
  }
  return nullptr;
}

StatusOr<SafetensorsEntry> ReadEntry(const std::string& name, const json& doc,
                                     uint64_t data_bytes) {
  auto bad = [&](const std::string& what) { return DataLossError(name + ": " + what); };
  if (!doc.is_object()) return bad("is not an object");
  SafetensorsEntry entry;
  entry.name = name;
  if (!doc.contains("dtype") || !doc["dtype"].is_string()) return bad("dtype is missing");
  const char* dtype = TorchDtypeOf(doc["dtype"].get<std::string>());
  if (dtype == nullptr)
    return bad("dtype " + doc["dtype"].get<std::string>() + " is not supported");
  entry.dtype = dtype;
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
  const uint64_t bytes = elements * static_cast<uint64_t>(DtypeBytes(entry.dtype));
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

}  // namespace

StatusOr<uint64_t> SafetensorsHeaderBytes(std::string_view first_bytes, uint64_t file_bytes) {
  if (first_bytes.size() < 8 || file_bytes < 8) {
    return DataLossError("shorter than the 8-byte header length");
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_bytes =
        (header_bytes << 8) | static_cast<unsigned char>(first_bytes[static_cast<size_t>(i)]);
  }
  if (header_bytes > kMaxSafetensorsHeaderBytes || header_bytes > file_bytes - 8) {
    return DataLossError("header length " + std::to_string(header_bytes) + " does not fit the " +
                         std::to_string(file_bytes) + "-byte file");
  }
  return header_bytes;
}

StatusOr<std::vector<SafetensorsEntry>> ParseSafetensorsHeader(std::string_view header,
                                                               uint64_t data_bytes) {
  const json doc = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return DataLossError("header is not a JSON object");
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, entry_doc] : doc.items()) {
    if (name == "__metadata__") continue;
    ASSIGN_OR_RETURN(SafetensorsEntry entry, ReadEntry(name, entry_doc, data_bytes));
    entries.push_back(std::move(entry));
  }
  std::stable_sort(
      entries.begin(), entries.end(),
      [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < entries.size(); ++k) {
    if (entries[k].begin < entries[k - 1].end) {
      return DataLossError(entries[k].name + ": its data overlaps " + entries[k - 1].name + "'s");
    }
  }
  return entries;
}

}  // namespace deepool::weights
