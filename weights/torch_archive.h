// A torch archive (the zip torch.save and deepool's checkpoints write) read without libtorch:
// its <archive>/data.pkl state_dict (torch_pickle.h) and, for each storage the tensors use, the
// zip record <archive>/data/<storage key> that holds it, checked to be there and to hold the
// storage's elements. The weights index (weights_index.h) reads only this; the ranks' loader
// (worker/runtime/checkpoints/torch_archive_loader.h) then reads each storage record once.
//
// Errors: UNIMPLEMENTED for what a state_dict file does not use (another pickled class, a
// compressed record, a big-endian archive: its <archive>/byteorder record says "big");
// DATA_LOSS for a damaged archive. Never a crash, whatever the bytes.
// Threading: free functions without shared state.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "weights/byte_source.h"
#include "weights/torch_pickle.h"
#include "weights/zip_directory.h"

namespace deepool::weights {

struct TorchArchive {
  std::string name;                          // the folder of <name>/data.pkl
  std::vector<PickledTensor> tensors;        // in the pickled dict's order
  std::map<std::string, ZipEntry> storages;  // storage key -> its record, each checked
};

StatusOr<TorchArchive> ReadTorchArchive(ByteSource& source);

}  // namespace deepool::weights
