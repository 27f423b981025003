// The weights index (weights/weights_index.h) on files the project's torch wrote
// (tests/data/weights/make_weights.py): keys, dtypes and shapes in the file's order, and
// damaged or hostile bytes refused with an error, never a crash.
#include "weights/weights_index.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "tests/source_dir.h"
#include "weights/byte_source.h"
#include "weights/torch_archive.h"
#include "weights/torch_pickle.h"

namespace deepool::weights {
namespace {

std::string DataPath(const std::string& name) {
  return std::string(DEEPOOL_SOURCE_DIR) + "/tests/data/weights/" + name;
}

std::string ReadBytes(const std::string& name) {
  std::ifstream in(DataPath(name), std::ios::binary);
  REQUIRE(in);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string Describe(const WeightsIndex& index) {
  std::string text;
  for (const TensorIndexEntry& t : index) {
    text += t.key + " " + t.dtype + " [";
    for (size_t d = 0; d < t.shape.size(); ++d) text += (d ? "," : "") + std::to_string(t.shape[d]);
    text += "]\n";
  }
  return text;
}

const char kTinyCnn[] =
    "conv.weight float32 [4,3,3,3]\n"
    "conv.bias float32 [4]\n"
    "bn.weight float32 [4]\n"
    "bn.bias float32 [4]\n"
    "bn.running_mean float32 [4]\n"
    "bn.running_var float32 [4]\n"
    "bn.num_batches_tracked int64 []\n"
    "fc.weight float32 [2,4]\n"
    "fc.bias float32 [2]\n";

TEST_CASE("An OrderedDict a plain dict and a safetensors file of the same tensors give one index") {
  // tiny_cnn_ordered.pt is torch.save(module.state_dict()): an OrderedDict with _metadata.
  for (const char* name : {"tiny_cnn_ordered.pt", "tiny_cnn_dict.pt", "tiny_cnn.safetensors"}) {
    INFO(name);
    auto index = ReadWeightsIndex(DataPath(name));
    REQUIRE(index.ok());
    CHECK(Describe(*index) == kTinyCnn);
  }
}

TEST_CASE("A tensor stored once under two keys is indexed under both") {
  auto index = ReadWeightsIndex(DataPath("tied.pt"));
  REQUIRE(index.ok());
  CHECK(Describe(*index) == "wte.weight float32 [4,3]\nlm_head.weight float32 [4,3]\n");
}

TEST_CASE("Every dtype the ranks load, a scalar, a strided view and a wide stride are indexed") {
  auto index = ReadWeightsIndex(DataPath("dtypes.pt"));
  REQUIRE(index.ok());
  CHECK(Describe(*index) ==
        "f64 float64 [2]\nf16 float16 [2]\nbf16 bfloat16 [2]\ni32 int32 [2]\ni16 int16 [2]\n"
        "i8 int8 [2]\nu8 uint8 [2]\nflag bool [2]\ncount int64 []\nview float32 [5,2]\n"
        "empty int8 [0,70000]\n");
}

TEST_CASE("A missing file is NOT_FOUND naming it") {
  auto index = ReadWeightsIndex(DataPath("none.pt"));
  REQUIRE_FALSE(index.ok());
  CHECK(index.status().code() == StatusCode::kNotFound);
  CHECK_THAT(index.status().message(), Catch::Contains("none.pt"));
}

TEST_CASE("Every truncation of a torch archive and of a safetensors file is an error") {
  for (const char* name : {"tiny_cnn_dict.pt", "tied.pt", "tiny_cnn.safetensors"}) {
    const std::string bytes = ReadBytes(name);
    for (size_t size = 0; size < bytes.size(); ++size) {
      auto index = IndexWeightsBytes(std::string_view(bytes).substr(0, size));
      INFO(name << " cut to " << size << " bytes");
      CHECK_FALSE(index.ok());
    }
  }
}

TEST_CASE("Changing any one byte of a torch archive gives an index or an error, never a crash") {
  for (const char* name : {"tiny_cnn_dict.pt", "dtypes.pt"}) {
    const std::string bytes = ReadBytes(name);
    int refused = 0;
    for (size_t at = 0; at < bytes.size(); ++at) {
      for (unsigned char value : {0x00, 0x01, 0x7f, 0xff}) {
        std::string changed = bytes;
        changed[at] = static_cast<char>(value);
        refused += IndexWeightsBytes(changed).ok() ? 0 : 1;
      }
    }
    INFO(name);
    CHECK(refused > 0);
  }
}

TEST_CASE("A pickle that calls anything but a state_dict's functions is refused naming it") {
  // PROTO 2, GLOBAL os.system, BINUNICODE "true", TUPLE1, REDUCE, STOP.
  const std::string call_system(
      "\x80\x02"
      "cos\nsystem\nX\x04\x00\x00\x00true\x85R.",
      26);
  auto tensors = ReadStateDictPickle(call_system);
  REQUIRE_FALSE(tensors.ok());
  CHECK(tensors.status().code() == StatusCode::kUnimplemented);
  CHECK_THAT(tensors.status().message(), Catch::Contains("os.system"));

  // INST (protocol 0's call-a-class opcode) is not one torch.save emits.
  auto inst = ReadStateDictPickle(std::string("\x80\x02(ios\nsystem\n.", 15));
  REQUIRE_FALSE(inst.ok());
  CHECK_THAT(inst.status().message(), Catch::Contains("opcode 0x69"));
}

TEST_CASE("A pickle of something other than a dict of tensors is INVALID_ARGUMENT") {
  auto list = ReadStateDictPickle(std::string("\x80\x02]q\x00.", 6));
  REQUIRE_FALSE(list.ok());
  CHECK(list.status().code() == StatusCode::kInvalidArgument);
  // {"a": 1}
  auto number =
      ReadStateDictPickle(std::string("\x80\x02}X\x01\x00\x00\x00"
                                      "aK\x01s.",
                                      14));
  REQUIRE_FALSE(number.ok());
  CHECK_THAT(number.status().message(), Catch::Contains("'a' is not a tensor"));
}

TEST_CASE("Damaged pickles are DATA_LOSS") {
  for (const std::string& pickle :
       {std::string("\x80\x02}", 3),                   // no STOP
        std::string("\x80\x02s.", 4),                  // SETITEM on an empty stack
        std::string("\x80\x02h\x05.", 5),              // BINGET of a memo never put
        std::string("\x80\x02X\xff\xff\xff\x7f.", 8),  // a string past the end
        std::string("\x80\x02}}.", 5)}) {              // two values left
    auto tensors = ReadStateDictPickle(pickle);
    REQUIRE_FALSE(tensors.ok());
    CHECK(tensors.status().code() == StatusCode::kDataLoss);
  }
}

}  // namespace
}  // namespace deepool::weights

namespace deepool::weights {
namespace {

TEST_CASE("A torch archive gives each tensor's storage and its offset and strides in it") {
  const std::string bytes = ReadBytes("views_ordered.pt");
  MemoryByteSource source(bytes);
  auto archive = ReadTorchArchive(source);
  INFO(archive.status().ToString());
  REQUIRE(archive.ok());
  std::map<std::string, PickledTensor> by_key;
  for (const PickledTensor& t : archive->tensors) by_key[t.key] = t;
  REQUIRE(by_key.size() == 5);
  CHECK(by_key["wte.weight"].storage_key == by_key["lm_head.weight"].storage_key);
  CHECK(by_key["half.weight"].dtype == "bfloat16");
  CHECK(by_key["view"].shape == std::vector<int64_t>{4, 2});
  CHECK(by_key["view"].stride == std::vector<int64_t>{8, 3});
  CHECK(by_key["view"].storage_offset == 10);
  CHECK(by_key["view"].storage_elements == 40);
  CHECK(by_key["wte.weight"].stride == std::vector<int64_t>{3, 1});
  CHECK(archive->storages.size() == 4);
}

}  // namespace
}  // namespace deepool::weights

namespace deepool::weights {
namespace {

TEST_CASE("A big-endian torch archive is refused naming its byte order") {
  auto index = ReadWeightsIndex(DataPath("big_endian.pt"));
  REQUIRE_FALSE(index.ok());
  CHECK(index.status().code() == StatusCode::kUnimplemented);
  CHECK_THAT(index.status().message(), Catch::Contains("big-endian"));
  // The same archive saying "little" (tied.pt) is read.
  CHECK(ReadWeightsIndex(DataPath("tied.pt")).ok());
}

}  // namespace
}  // namespace deepool::weights
