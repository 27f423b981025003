#include "weights/zip_directory.h"

#include <algorithm>

namespace deepool::weights {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndLocator = 0x07064b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kDirectoryHeader = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint64_t kEndRecordBytes = 22;
constexpr uint64_t kMaxCommentBytes = 0xffff;
constexpr uint64_t kDirectoryHeaderBytes = 46;
constexpr uint64_t kLocalHeaderBytes = 30;
// A directory far larger than any state_dict's thousands of records is a corrupt size.
constexpr uint64_t kMaxDirectoryBytes = uint64_t{256} << 20;

uint64_t Little(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
  }
  return value;
}

struct Directory {
  uint64_t entries = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// The zip64 end record that a locator just before the classic one points to.
StatusOr<Directory> ReadZip64End(ByteSource& source, uint64_t end_record_at) {
  if (end_record_at < 20) return DataLossError("zip64 sizes without a zip64 locator");
  std::string locator;
  RETURN_IF_ERROR(source.Read(end_record_at - 20, 20, &locator));
  if (Little(locator, 0, 4) != kZip64EndLocator) {
    return DataLossError("zip64 sizes without a zip64 locator");
  }
  std::string record;
  RETURN_IF_ERROR(source.Read(Little(locator, 8, 8), 56, &record));
  if (Little(record, 0, 4) != kZip64EndOfDirectory) {
    return DataLossError("the zip64 locator points at no zip64 end record");
  }
  return Directory{Little(record, 32, 8), Little(record, 48, 8), Little(record, 40, 8)};
}

StatusOr<Directory> FindDirectory(ByteSource& source) {
  const uint64_t size = source.size();
  if (size < kEndRecordBytes) return DataLossError("too short to be a zip archive");
  const uint64_t tail_bytes = std::min(size, kEndRecordBytes + kMaxCommentBytes);
  std::string tail;
  RETURN_IF_ERROR(source.Read(size - tail_bytes, tail_bytes, &tail));
  // The end record is the last one whose comment reaches exactly to the end of the file.
  for (uint64_t at = tail_bytes - kEndRecordBytes + 1; at-- > 0;) {
    if (Little(tail, at, 4) != kEndOfDirectory) continue;
    if (at + kEndRecordBytes + Little(tail, at + 20, 2) != tail_bytes) continue;
    Directory directory{Little(tail, at + 10, 2), Little(tail, at + 16, 4),
                        Little(tail, at + 12, 4)};
    if (directory.entries == 0xffff || directory.offset == 0xffffffff ||
        directory.bytes == 0xffffffff) {
      return ReadZip64End(source, size - tail_bytes + at);
    }
    return directory;
  }
  return DataLossError("no zip end-of-central-directory record (truncated?)");
}

// Replaces the 0xffffffff sizes and offset of a directory header with its zip64 extra field's.
Status ApplyZip64Extra(const std::string& extra, ZipEntry* entry) {
  for (size_t at = 0; at + 4 <= extra.size();) {
    const uint64_t id = Little(extra, at, 2);
    const uint64_t length = Little(extra, at + 2, 2);
    if (at + 4 + length > extra.size()) break;
    if (id == 0x0001) {
      size_t field = at + 4;
      for (uint64_t* value : {&entry->size, &entry->compressed_size, &entry->local_header_offset}) {
        if (*value != 0xffffffff) continue;
        if (field + 8 > at + 4 + length) return DataLossError(entry->name + ": short zip64 field");
        *value = Little(extra, field, 8);
        field += 8;
      }
      return Status::Ok();
    }
    at += 4 + length;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<ZipEntry>> ReadZipDirectory(ByteSource& source) {
  ASSIGN_OR_RETURN(const Directory directory, FindDirectory(source));
  if (directory.bytes > kMaxDirectoryBytes ||
      !FitsIn(directory.offset, directory.bytes, source.size())) {
    return DataLossError("the zip directory's " + std::to_string(directory.bytes) + " bytes at " +
                         std::to_string(directory.offset) + " do not fit the file");
  }
  if (directory.entries > directory.bytes / kDirectoryHeaderBytes) {
    return DataLossError("the zip directory claims " + std::to_string(directory.entries) +
                         " entries in " + std::to_string(directory.bytes) + " bytes");
  }
  std::string bytes;
  RETURN_IF_ERROR(source.Read(directory.offset, directory.bytes, &bytes));
  std::vector<ZipEntry> entries;
  size_t at = 0;
  for (uint64_t k = 0; k < directory.entries; ++k) {
    if (at + kDirectoryHeaderBytes > bytes.size() || Little(bytes, at, 4) != kDirectoryHeader) {
      return DataLossError("zip directory entry " + std::to_string(k) + " is damaged");
    }
    const size_t name_bytes = Little(bytes, at + 28, 2);
    const size_t extra_bytes = Little(bytes, at + 30, 2);
    const size_t comment_bytes = Little(bytes, at + 32, 2);
    const size_t end = at + kDirectoryHeaderBytes + name_bytes + extra_bytes + comment_bytes;
    if (end > bytes.size()) {
      return DataLossError("zip directory entry " + std::to_string(k) + " runs past the directory");
    }
    ZipEntry entry;
    entry.name = bytes.substr(at + kDirectoryHeaderBytes, name_bytes);
    entry.method = static_cast<uint16_t>(Little(bytes, at + 10, 2));
    entry.compressed_size = Little(bytes, at + 20, 4);
    entry.size = Little(bytes, at + 24, 4);
    entry.local_header_offset = Little(bytes, at + 42, 4);
    RETURN_IF_ERROR(ApplyZip64Extra(
        bytes.substr(at + kDirectoryHeaderBytes + name_bytes, extra_bytes), &entry));
    if (!FitsIn(entry.local_header_offset, entry.compressed_size, source.size())) {
      return DataLossError("zip record " + entry.name + " lies outside the file");
    }
    entries.push_back(std::move(entry));
    at = end;
  }
  return entries;
}

StatusOr<std::string> ReadStoredZipEntry(ByteSource& source, const ZipEntry& entry,
                                         uint64_t max_bytes) {
  if (entry.method != 0) {
    return UnimplementedError("zip record " + entry.name + " is compressed (method " +
                              std::to_string(entry.method) + "); torch archives store records");
  }
  if (entry.size != entry.compressed_size) {
    return DataLossError("zip record " + entry.name + " is stored with two different sizes");
  }
  if (entry.size > max_bytes) {
    return ResourceExhaustedError("zip record " + entry.name + " has " +
                                  std::to_string(entry.size) + " bytes; at most " +
                                  std::to_string(max_bytes) + " are read");
  }
  std::string header;
  RETURN_IF_ERROR(source.Read(entry.local_header_offset, kLocalHeaderBytes, &header));
  if (Little(header, 0, 4) != kLocalHeader) {
    return DataLossError("zip record " + entry.name +
                         " has no local header where the directory "
                         "says");
  }
  const uint64_t data_at =
      entry.local_header_offset + kLocalHeaderBytes + Little(header, 26, 2) + Little(header, 28, 2);
  std::string data;
  RETURN_IF_ERROR(source.Read(data_at, entry.size, &data));
  return data;
}

}  // namespace deepool::weights
