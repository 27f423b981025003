#include "weights/torch_archive.h"

#include <unordered_map>

#include "weights/weights_index.h"

namespace deepool::weights {
namespace {

// A state_dict's pickle is a few hundred bytes per tensor; far more is not one.
constexpr uint64_t kMaxPickleBytes = uint64_t{64} << 20;

// The torch archive's name: the folder of its <archive>/data.pkl record.
const ZipEntry* FindPickle(const std::vector<ZipEntry>& entries, std::string* archive) {
  for (const ZipEntry& entry : entries) {
    const size_t slash = entry.name.find('/');
    if (slash != std::string::npos &&
        entry.name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      *archive = entry.name.substr(0, slash);
      return &entry;
    }
  }
  return nullptr;
}

// torch.save writes "little" or "big" (since PyTorch 1.12); older archives have no record and
// are little-endian, as every machine that wrote them was.
Status CheckByteOrder(ByteSource& source, const ZipEntry& record) {
  ASSIGN_OR_RETURN(const std::string order, ReadStoredZipEntry(source, record, 16));
  if (order == "little") return Status::Ok();
  if (order == "big") return UnimplementedError("a big-endian torch archive");
  return DataLossError("the byteorder record says '" + order + "'");
}

}  // namespace

StatusOr<TorchArchive> ReadTorchArchive(ByteSource& source) {
  ASSIGN_OR_RETURN(const std::vector<ZipEntry> entries, ReadZipDirectory(source));
  TorchArchive archive;
  const ZipEntry* pickle = FindPickle(entries, &archive.name);
  if (pickle == nullptr) return DataLossError("a zip archive without a <name>/data.pkl record");
  std::unordered_map<std::string, const ZipEntry*> records;
  for (const ZipEntry& entry : entries) records[entry.name] = &entry;
  if (auto order = records.find(archive.name + "/byteorder"); order != records.end()) {
    RETURN_IF_ERROR(CheckByteOrder(source, *order->second));
  }
  ASSIGN_OR_RETURN(const std::string pickled, ReadStoredZipEntry(source, *pickle, kMaxPickleBytes));
  ASSIGN_OR_RETURN(archive.tensors, ReadStateDictPickle(pickled));
  for (const PickledTensor& tensor : archive.tensors) {
    const std::string record = archive.name + "/data/" + tensor.storage_key;
    auto it = records.find(record);
    if (it == records.end()) {
      return DataLossError("tensor '" + tensor.key + "': its storage record " + record +
                           " is missing");
    }
    const uint64_t element_bytes = static_cast<uint64_t>(DtypeBytes(tensor.dtype));
    if (static_cast<uint64_t>(tensor.storage_elements) > it->second->size / element_bytes) {
      return DataLossError("tensor '" + tensor.key + "': its storage of " +
                           std::to_string(tensor.storage_elements) + " " + tensor.dtype +
                           " elements does not fit the " + std::to_string(it->second->size) +
                           " bytes of " + record);
    }
    archive.storages.emplace(tensor.storage_key, *it->second);
  }
  return archive;
}

}  // namespace deepool::weights
