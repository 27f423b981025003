// The ranks' torch archive loader (worker/runtime/checkpoints/torch_archive_loader.h) against
// what Python's torch.load gives for the same files (tests/data/weights/make_weights.py):
// torch.save(model.state_dict()) writes a collections.OrderedDict, which libtorch's unpickler
// cannot rebuild and this loader must.
#include "worker/runtime/checkpoints/torch_archive_loader.h"

#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "tests/source_dir.h"
#include "worker/runtime/checkpoints/safetensors.h"

namespace deepool::worker {
namespace {

std::string DataPath(const std::string& name) {
  return std::string(DEEPOOL_SOURCE_DIR) + "/tests/data/weights/" + name;
}

std::map<std::string, at::Tensor> ByKey(const StateDict& state) {
  return std::map<std::string, at::Tensor>(state.begin(), state.end());
}

TEST_CASE("An OrderedDict state_dict loads to exactly the tensors torch.load gives") {
  auto state = LoadStateDictFile(DataPath("views_ordered.pt"));
  INFO(state.status().ToString());
  REQUIRE(state.ok());
  // What torch.load gave, written contiguously by make_weights.py.
  auto expected = LoadSafetensors(DataPath("views_expected.safetensors"));
  REQUIRE(expected.ok());
  REQUIRE(state->size() == expected->size());
  for (size_t k = 0; k < state->size(); ++k) {
    const auto& [key, tensor] = (*state)[k];
    INFO(key);
    CHECK(key == (*expected)[k].first);  // the pickled dict's order
    const at::Tensor& want = (*expected)[k].second;
    CHECK(tensor.scalar_type() == want.scalar_type());
    CHECK(tensor.sizes() == want.sizes());
    CHECK(torch::equal(tensor, want));
  }
  auto tensors = ByKey(*state);
  // The tied pair shares one storage, as torch.load gives it.
  CHECK(tensors["wte.weight"].data_ptr() == tensors["lm_head.weight"].data_ptr());
  CHECK(tensors["half.weight"].scalar_type() == at::kBFloat16);
  // The strided view at an offset keeps its layout.
  CHECK(tensors["view"].storage_offset() == 10);
  CHECK(tensors["view"].strides() == at::IntArrayRef({8, 3}));
  CHECK(
      torch::equal(tensors["view"],
                   torch::arange(40, torch::kFloat).reshape({5, 8}).slice(0, 1).slice(1, 2, 8, 3)));
}

TEST_CASE("The OrderedDict and the plain dict files of one module load to the same tensors") {
  auto ordered = LoadTorchArchive(DataPath("tiny_cnn_ordered.pt"));
  auto plain = LoadTorchArchive(DataPath("tiny_cnn_dict.pt"));
  REQUIRE(ordered.ok());
  REQUIRE(plain.ok());
  REQUIRE(ordered->size() == plain->size());
  for (size_t k = 0; k < ordered->size(); ++k) {
    INFO((*ordered)[k].first);
    CHECK((*ordered)[k].first == (*plain)[k].first);
    CHECK(torch::equal((*ordered)[k].second, (*plain)[k].second));
  }
}

TEST_CASE("Every dtype the index knows loads with its values") {
  auto state = LoadTorchArchive(DataPath("dtypes.pt"));
  INFO(state.status().ToString());
  REQUIRE(state.ok());
  auto tensors = ByKey(*state);
  CHECK(tensors["f64"].scalar_type() == at::kDouble);
  CHECK(tensors["f16"].scalar_type() == at::kHalf);
  CHECK(tensors["bf16"].scalar_type() == at::kBFloat16);
  CHECK(tensors["i32"].scalar_type() == at::kInt);
  CHECK(tensors["i16"].scalar_type() == at::kShort);
  CHECK(tensors["i8"].scalar_type() == at::kChar);
  CHECK(tensors["u8"].scalar_type() == at::kByte);
  CHECK(tensors["flag"].scalar_type() == at::kBool);
  CHECK(tensors["count"].dim() == 0);
  CHECK(tensors["count"].item<int64_t>() == 7);
  CHECK(tensors["empty"].sizes() == at::IntArrayRef({0, 70000}));
}

TEST_CASE("A damaged or missing archive is an error naming the file") {
  auto missing = LoadTorchArchive(DataPath("no_such.pt"));
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("no_such.pt"));
  auto not_zip = LoadTorchArchive(DataPath("make_weights.py"));
  CHECK(not_zip.status().code() == StatusCode::kDataLoss);
  // Its byteorder record says "big": the bytes would load scrambled.
  auto big = LoadTorchArchive(DataPath("big_endian.pt"));
  CHECK(big.status().code() == StatusCode::kUnimplemented);
  CHECK_THAT(big.status().message(),
             Catch::Contains("big_endian.pt") && Catch::Contains("big-endian"));
}

}  // namespace
}  // namespace deepool::worker
