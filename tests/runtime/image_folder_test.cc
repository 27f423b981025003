#include "worker/runtime/data/image_folder.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "planner/plan.h"
#include "tests/runtime/image_files.h"
#include "tests/temp_dir.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using deepool::testing::TempDir;
using testing::WriteSolidPng;

int SampleIdOf(const Batch& batch, int64_t row) {
  const auto pixel = batch.inputs[row].select(1, 3).select(1, 3);  // [3]
  return pixel[0].item<int>() + 256 * pixel[1].item<int>();
}

// root/<class>/<n>.png: `per_class` solid images per class, ids numbered in listing order.
void WriteFolder(const fs::path& root, int classes, int per_class) {
  int id = 0;
  for (int c = 0; c < classes; ++c) {
    for (int n = 0; n < per_class; ++n) {
      WriteSolidPng(root / ("class" + std::to_string(c)) / (std::to_string(10 + n) + ".png"), id++);
    }
  }
}

StatusOr<std::unique_ptr<DataSource>> Open(const fs::path& path, int64_t batch,
                                           ImageDataOptions options = {}) {
  return OpenImageFolder(path.string(), {3, 8, 8}, 10, batch, options);
}

TEST_CASE("image folders list classes in name order and images below them", "[data][images]") {
  TempDir dir;
  const fs::path root = dir.path();
  WriteSolidPng(root / "b" / "x.png", 0);
  WriteSolidPng(root / "a" / "deeper" / "y.PNG", 0);
  WriteSolidPng(root / "a" / "z.png", 0);
  std::ofstream(root / "a" / "notes.txt") << "not an image";
  auto files = FindImageFiles(root.string());
  INFO(files.status().ToString());
  REQUIRE(files.ok());
  REQUIRE(files->num_classes == 2);
  REQUIRE(files->paths == std::vector<std::string>{(root / "a" / "deeper" / "y.PNG").string(),
                                                   (root / "a" / "z.png").string(),
                                                   (root / "b" / "x.png").string()});
  REQUIRE(files->labels == std::vector<int64_t>{0, 0, 1});

  fs::create_directories(root / "c");
  auto empty_class = FindImageFiles(root.string());
  REQUIRE(empty_class.status().code() == StatusCode::kInvalidArgument);
  REQUIRE_THAT(empty_class.status().message(), Catch::Contains((root / "c").string()));
  REQUIRE(FindImageFiles((root / "missing").string()).status().code() == StatusCode::kNotFound);
}

TEST_CASE("list files give paths relative to the list and labels", "[data][images]") {
  TempDir dir;
  const fs::path root = dir.path();
  WriteSolidPng(root / "img" / "one.png", 0);
  std::ofstream(root / "train.tsv") << "# comment\nimg/one.png\t3\n\n"
                                    << (root / "img" / "one.png").string() << "\t0\n";
  auto files = FindImageFiles((root / "train.tsv").string());
  INFO(files.status().ToString());
  REQUIRE(files.ok());
  REQUIRE(files->labels == std::vector<int64_t>{3, 0});
  REQUIRE(files->num_classes == 4);
  REQUIRE(files->paths[0] == (root / "img" / "one.png").string());

  std::ofstream(root / "bad.tsv") << "img/one.png\t3\nimg/one.png three\n";
  auto bad = FindImageFiles((root / "bad.tsv").string());
  REQUIRE(bad.status().code() == StatusCode::kInvalidArgument);
  REQUIRE_THAT(bad.status().message(), Catch::Contains("bad.tsv line 2"));
}

TEST_CASE("an image folder serves every image once per epoch, as uint8 rows with labels",
          "[data][images]") {
  TempDir dir;
  const fs::path root = dir.path();
  WriteFolder(root, 3, 4);  // 12 images, ids 0..11, label id / 4
  auto data = Open(root, 5);
  INFO(data.status().ToString());
  REQUIRE(data.ok());
  std::multiset<int> seen;
  for (int64_t iteration = 0; iteration < 12; ++iteration) {  // 60 rows: five epochs
    auto batch = (*data)->GlobalBatch(iteration);
    REQUIRE(batch.ok());
    REQUIRE(batch->inputs.scalar_type() == torch::kUInt8);
    REQUIRE(batch->inputs.sizes() == std::vector<int64_t>{5, 3, 8, 8});
    for (int64_t row = 0; row < 5; ++row) {
      const int id = SampleIdOf(*batch, row);
      REQUIRE(batch->labels[row].item<int64_t>() == id / 4);
      // The whole image is that sample's colour: the crop and flip never mix samples.
      REQUIRE(batch->inputs[row][0].eq(id % 256).all().item<bool>());
      seen.insert(id);
      if (seen.size() == 12) {
        REQUIRE(std::set<int>(seen.begin(), seen.end()).size() == 12);
        seen.clear();
      }
    }
  }
}

TEST_CASE("a held-out image folder is read in file order through the evaluation transform",
          "[data][images]") {
  TempDir dir;
  const fs::path root = dir.path();
  WriteFolder(root, 3, 4);  // 12 images, ids 0..11 in listing order
  auto data = Open(root, 5, {7, 0, DataUse::kEvaluation});
  REQUIRE(data.ok());
  REQUIRE((*data)->num_samples() == 12);
  // Rows i*5 + r are samples 0..11, then the set again from the start: passes 0-2 cover every
  // sample once, whatever the seed (nothing is shuffled).
  for (int64_t iteration = 0; iteration < 3; ++iteration) {
    auto batch = (*data)->GlobalBatch(iteration);
    REQUIRE(batch.ok());
    for (int64_t row = 0; row < 5; ++row) {
      const int expected = static_cast<int>((iteration * 5 + row) % 12);
      REQUIRE(SampleIdOf(*batch, row) == expected);
      REQUIRE(batch->labels[row].item<int64_t>() == expected / 4);
      REQUIRE(batch->inputs[row][0].eq(expected % 256).all().item<bool>());
    }
  }
  // The evaluation transform draws nothing: the same rows for another seed. Training shuffles.
  auto other_seed = Open(root, 5, {8, 0, DataUse::kEvaluation});
  REQUIRE((*other_seed)->GlobalBatch(1)->inputs.equal((*data)->GlobalBatch(1)->inputs));
  auto training = Open(root, 5, {7, 0});
  const bool same_order =
      (*training)->GlobalBatch(0)->labels.equal((*data)->GlobalBatch(0)->labels) &&
      (*training)->GlobalBatch(1)->labels.equal((*data)->GlobalBatch(1)->labels);
  REQUIRE_FALSE(same_order);
}

TEST_CASE("a source opened again at a mid-epoch iteration continues at the exact sample",
          "[data][images][epochs]") {
  // What a resumed job does: a new process opens the set and starts at the checkpoint's
  // iteration, here 7 of a 10-image set at 4 rows (row 28: epoch 2, sample offset 8), with more
  // ranks than the first run had. Its rows, pixels included, are the uninterrupted run's.
  TempDir dir;
  const fs::path root = dir.path();
  WriteFolder(root, 2, 5);
  auto uninterrupted = Open(root, 4, {9, 0});
  REQUIRE(uninterrupted.ok());
  std::vector<Batch> expected;
  for (int64_t iteration = 0; iteration < 10; ++iteration) {
    auto batch = (*uninterrupted)->GlobalBatch(iteration);
    REQUIRE(batch.ok());
    expected.push_back(*batch);
  }
  const std::vector<int64_t> shares = planner::NearEqualShares(4, 3);
  for (int64_t iteration = 7; iteration < 10; ++iteration) {
    int64_t first = 0;
    for (int64_t share : shares) {
      auto resumed = Open(root, 4, {9, 0});
      REQUIRE(resumed.ok());
      auto part = (*resumed)->Samples(iteration, first, first + share);
      REQUIRE(part.ok());
      const Batch& whole = expected[static_cast<size_t>(iteration)];
      REQUIRE(part->inputs.equal(whole.inputs.narrow(0, first, share)));
      REQUIRE(part->labels.equal(whole.labels.narrow(0, first, share)));
      first += share;
    }
  }
}

TEST_CASE("image rows depend on the seed, not on how ranks split the batch", "[data][images]") {
  TempDir dir;
  const fs::path root = dir.path();
  WriteFolder(root, 2, 5);
  auto whole = Open(root, 6, {3, 0});
  REQUIRE(whole.ok());
  const std::vector<int64_t> shares = planner::NearEqualShares(6, 4);
  for (int64_t iteration = 0; iteration < 4; ++iteration) {
    auto expected = (*whole)->GlobalBatch(iteration);
    REQUIRE(expected.ok());
    int64_t first = 0;
    for (int64_t share : shares) {
      auto rank = Open(root, 6, {3, 0});  // each rank opens its own source
      auto part = (*rank)->Samples(iteration, first, first + share);
      REQUIRE(part.ok());
      REQUIRE(part->inputs.equal(expected->inputs.narrow(0, first, share)));
      REQUIRE(part->labels.equal(expected->labels.narrow(0, first, share)));
      first += share;
    }
  }
  auto other_seed = Open(root, 6, {4, 0});
  const bool same_rows =
      (*other_seed)->GlobalBatch(0)->inputs.equal((*whole)->GlobalBatch(0)->inputs) &&
      (*other_seed)->GlobalBatch(1)->inputs.equal((*whole)->GlobalBatch(1)->inputs);
  REQUIRE_FALSE(same_rows);
}

TEST_CASE("a bad image fails the batch by name unless skip_bad allows it", "[data][images]") {
  TempDir dir;
  const fs::path root = dir.path();
  WriteFolder(root, 1, 6);
  std::ofstream(root / "class0" / "16.png") << "truncated, not a PNG";  // a seventh file
  const std::string bad = (root / "class0" / "16.png").string();
  auto strict = Open(root, 7);
  REQUIRE(strict.ok());
  auto failed = (*strict)->GlobalBatch(0);  // 7 rows of 7 images: the bad one is among them
  REQUIRE(failed.status().code() == StatusCode::kInvalidArgument);
  REQUIRE_THAT(failed.status().message(), Catch::Contains(bad));

  auto lenient = Open(root, 7, {0, 1});
  auto batch = (*lenient)->GlobalBatch(0);
  INFO(batch.status().ToString());
  REQUIRE(batch.ok());
  // The bad image's row took another image: all rows hold good images, one of them twice.
  std::set<int> ids;
  for (int64_t row = 0; row < 7; ++row) ids.insert(SampleIdOf(*batch, row));
  REQUIRE(ids.size() == 6);

  std::ofstream(root / "class0" / "17.png") << "";
  auto two_bad = Open(root, 8, {0, 1});
  auto over = (*two_bad)->GlobalBatch(0);
  REQUIRE(over.status().code() == StatusCode::kInvalidArgument);
  REQUIRE_THAT(over.status().message(), Catch::Contains("more than data.skip_bad 1"));
}

TEST_CASE("image folders refuse graphs they cannot feed", "[data][images]") {
  TempDir dir;
  const fs::path root = dir.path();
  WriteFolder(root, 3, 1);
  REQUIRE(OpenImageFolder(root.string(), {3, 8, 9}, 10, 4, {}).status().code() ==
          StatusCode::kInvalidArgument);
  auto few_classes = OpenImageFolder(root.string(), {3, 8, 8}, 2, 4, {});
  REQUIRE(few_classes.status().code() == StatusCode::kInvalidArgument);
  REQUIRE_THAT(few_classes.status().message(), Catch::Contains("3 classes"));
}

TEST_CASE("uint8 images are normalised as ToTensor and Normalize do", "[data][images]") {
  const torch::Tensor bytes = torch::tensor({0, 128, 255}, torch::kUInt8).view({1, 3, 1, 1});
  const torch::Tensor inputs = ModelInputs(bytes);
  REQUIRE(inputs.scalar_type() == torch::kFloat32);
  REQUIRE(inputs[0][0][0][0].item<float>() == Approx((0.0f - 0.485f) / 0.229f));
  REQUIRE(inputs[0][1][0][0].item<float>() == Approx((128.0f / 255 - 0.456f) / 0.224f));
  REQUIRE(inputs[0][2][0][0].item<float>() == Approx((1.0f - 0.406f) / 0.225f));
  const torch::Tensor floats = torch::ones({2, 3});
  REQUIRE(ModelInputs(floats).equal(floats));
}

}  // namespace
}  // namespace deepool::worker
