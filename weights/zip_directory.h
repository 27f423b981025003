// The central directory of a zip archive (PKWARE's APPNOTE: the end-of-central-directory record,
// its zip64 form, and each file's header with the zip64 extra field), enough to find and read
// the records of a torch archive. Sizes and offsets are checked against the file's size.
// Threading: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "weights/byte_source.h"

namespace deepool::weights {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0: stored; anything else is compressed
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t local_header_offset = 0;
};

// The archive's entries in directory order. DATA_LOSS for a file that is not a zip archive or
// whose directory lies outside it.
StatusOr<std::vector<ZipEntry>> ReadZipDirectory(ByteSource& source);

// A stored (uncompressed) entry's bytes, at most `max_bytes` of them: UNIMPLEMENTED for a
// compressed one, RESOURCE_EXHAUSTED past max_bytes, DATA_LOSS for a damaged local header.
StatusOr<std::string> ReadStoredZipEntry(ByteSource& source, const ZipEntry& entry,
                                         uint64_t max_bytes);

}  // namespace deepool::weights
