#include "worker/runtime/checkpoints/torch_archive_loader.h"

#include <torch/torch.h>

#include <cstring>
#include <map>

#include "weights/byte_source.h"
#include "weights/torch_archive.h"

namespace deepool::worker {
namespace {

StatusOr<at::ScalarType> ScalarTypeOf(const std::string& dtype) {
  static const std::pair<const char*, at::ScalarType> kTypes[] = {
      {"float32", at::kFloat},     {"float64", at::kDouble}, {"float16", at::kHalf},
      {"bfloat16", at::kBFloat16}, {"int64", at::kLong},     {"int32", at::kInt},
      {"int16", at::kShort},       {"int8", at::kChar},      {"uint8", at::kByte},
      {"bool", at::kBool}};
  for (const auto& [name, type] : kTypes) {
    if (dtype == name) return type;
  }
  return UnimplementedError("a storage of dtype " + dtype);
}

// One CPU tensor per storage, owning a copy of the record's first `elements` elements.
StatusOr<at::Tensor> ReadStorage(weights::ByteSource& source, const weights::ZipEntry& record,
                                 const weights::PickledTensor& first) {
  ASSIGN_OR_RETURN(const at::ScalarType type, ScalarTypeOf(first.dtype));
  ASSIGN_OR_RETURN(std::string bytes, weights::ReadStoredZipEntry(source, record, record.size));
  // ReadTorchArchive checked that the record holds the storage's elements.
  at::Tensor storage = torch::empty({first.storage_elements}, torch::dtype(type));
  std::memcpy(storage.data_ptr(), bytes.data(), storage.nbytes());
  return storage;
}

StatusOr<StateDict> Load(weights::ByteSource& source) {
  ASSIGN_OR_RETURN(const weights::TorchArchive archive, weights::ReadTorchArchive(source));
  std::map<std::string, at::Tensor> storages;
  StateDict state;
  for (const weights::PickledTensor& tensor : archive.tensors) {
    auto it = storages.find(tensor.storage_key);
    if (it == storages.end()) {
      ASSIGN_OR_RETURN(at::Tensor storage,
                       ReadStorage(source, archive.storages.at(tensor.storage_key), tensor));
      it = storages.emplace(tensor.storage_key, std::move(storage)).first;
    }
    const at::Tensor& storage = it->second;
    ASSIGN_OR_RETURN(const at::ScalarType type, ScalarTypeOf(tensor.dtype));
    if (storage.scalar_type() != type || storage.numel() != tensor.storage_elements) {
      return DataLossError("tensor '" + tensor.key + "' names storage " + tensor.storage_key +
                           " with another dtype or size than an earlier tensor");
    }
    // The pickle reader checked that offset and strides stay within the storage.
    state.emplace_back(tensor.key,
                       storage.as_strided(tensor.shape, tensor.stride, tensor.storage_offset));
  }
  return state;
}

}  // namespace

StatusOr<StateDict> LoadTorchArchive(const std::string& path) {
  StatusOr<weights::FileByteSource> source = weights::FileByteSource::Open(path);
  if (!source.ok()) return source.status().WithContext("weights file '" + path + "'");
  try {
    StatusOr<StateDict> state = Load(*source);
    if (!state.ok()) return state.status().WithContext("weights file '" + path + "'");
    return state;
  } catch (const std::exception& e) {
    return InternalError("weights file '" + path + "': " + e.what());
  }
}

}  // namespace deepool::worker
