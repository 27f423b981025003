#include "weights/weights_index.h"

#include "weights/byte_source.h"
#include "weights/safetensors_header.h"
#include "weights/torch_archive.h"

namespace deepool::weights {
namespace {

StatusOr<WeightsIndex> IndexTorchArchive(ByteSource& source) {
  ASSIGN_OR_RETURN(const TorchArchive archive, ReadTorchArchive(source));
  WeightsIndex index;
  for (const PickledTensor& tensor : archive.tensors) {
    index.push_back({tensor.key, tensor.dtype, tensor.shape});
  }
  return index;
}

StatusOr<WeightsIndex> IndexSafetensors(ByteSource& source) {
  std::string first;
  if (source.size() < 8) return DataLossError("shorter than the 8-byte header length");
  RETURN_IF_ERROR(source.Read(0, 8, &first));
  ASSIGN_OR_RETURN(const uint64_t header_bytes, SafetensorsHeaderBytes(first, source.size()));
  std::string header;
  RETURN_IF_ERROR(source.Read(8, header_bytes, &header));
  ASSIGN_OR_RETURN(const std::vector<SafetensorsEntry> entries,
                   ParseSafetensorsHeader(header, source.size() - 8 - header_bytes));
  WeightsIndex index;
  for (const SafetensorsEntry& entry : entries)
    index.push_back({entry.name, entry.dtype, entry.shape});
  return index;
}

StatusOr<WeightsIndex> Index(ByteSource& source) {
  std::string magic;
  // A torch archive is a zip: its first local file header starts "PK\3\4".
  if (source.size() >= 4) {
    RETURN_IF_ERROR(source.Read(0, 4, &magic));
    if (magic == std::string("PK\3\4", 4)) return IndexTorchArchive(source);
  }
  return IndexSafetensors(source);
}

}  // namespace

int DtypeBytes(std::string_view dtype) {
  static const std::pair<const char*, int> kBytes[] = {
      {"float64", 8}, {"float32", 4}, {"float16", 2}, {"bfloat16", 2}, {"int64", 8},
      {"int32", 4},   {"int16", 2},   {"int8", 1},    {"uint8", 1},    {"bool", 1}};
  for (const auto& [name, bytes] : kBytes) {
    if (dtype == name) return bytes;
  }
  return 0;
}

StatusOr<WeightsIndex> ReadWeightsIndex(const std::string& path) {
  ASSIGN_OR_RETURN(FileByteSource source, FileByteSource::Open(path));
  StatusOr<WeightsIndex> index = Index(source);
  if (!index.ok()) return index.status().WithContext("weights file '" + path + "'");
  return index;
}

StatusOr<WeightsIndex> IndexWeightsBytes(std::string_view bytes) {
  MemoryByteSource source(bytes);
  return Index(source);
}

}  // namespace deepool::weights
