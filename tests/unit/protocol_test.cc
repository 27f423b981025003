// The executor protocol's run specs (protocol/run_spec.h) round-trip through their one writer and
// one reader, are written at the oldest version that can express them, and the reader refuses bad
// input by naming the field. Executor commands and events: protocol_executor_lines_test.cc.
#include <catch2/catch.hpp>
#include <functional>
#include <nlohmann/json.hpp>

#include "planner/zoo/zoo.h"
#include "protocol/run_spec.h"
#include "protocol/version.h"
#include "tests/unit/run_spec_test_util.h"

namespace deepool::protocol {
namespace {

using nlohmann::json;

RunSpec Spec() {
  RunSpec spec;
  spec.job_id = "job-1";
  spec.graph = std::make_shared<const planner::Graph>(ZooModel("mlp"));
  spec.plan = planner::DataParallelLayout(*spec.graph, 8, 2);
  spec.iterations = 5;
  spec.seed = 42;
  spec.optimizer.name = "adam";
  spec.optimizer.lr = 0.003;
  spec.optimizer.betas = {0.8, 0.99};
  spec.data.seed = 9;
  spec.checkpoint_path = "/tmp/model.pt";
  spec.gradient_bucket_mb = 2.5;
  spec.sync_batch_norm = false;
  spec.background = SampleBackgroundSpec();
  return spec;
}

TEST_CASE("run spec: the writer's output parses back to the same spec", "[protocol]") {
  const RunSpec spec = Spec();
  const std::string text = RunSpecToJson(spec);
  StatusOr<RunSpec> parsed = ParseRunSpecJson(text);
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->job_id == "job-1");
  CHECK(parsed->graph->num_layers() == spec.graph->num_layers());
  CHECK(parsed->plan.global_batch == 8);
  CHECK(parsed->iterations == 5);
  CHECK(parsed->seed == 42);
  CHECK(parsed->optimizer == spec.optimizer);
  CHECK(parsed->data == spec.data);
  RunSpec images = spec;
  images.data = DataSpec{"image_folder", 4, "/data/train", 3};
  StatusOr<RunSpec> parsed_images = ParseRunSpecJson(RunSpecToJson(images));
  REQUIRE(parsed_images.ok());
  CHECK(parsed_images->data == images.data);
  CHECK(parsed->checkpoint_path == spec.checkpoint_path);
  CHECK(parsed->gradient_bucket_mb == 2.5);
  CHECK_FALSE(parsed->sync_batch_norm);
  CHECK(json::parse(text)["batch_norm"] == "per_device");
  REQUIRE(parsed->background.has_value());
  CHECK(parsed->background->data == spec.background->data);
  CHECK(parsed->background->sharing == spec.background->sharing);
  CHECK(parsed->background->ranks == std::vector<int>{1});
  CHECK(RunSpecToJson(*parsed) == text);
  CHECK(json::parse(text)["version"] == 1);  // adam needs nothing newer
}

TEST_CASE("run spec: batch norm is synchronised unless the spec says per_device", "[protocol]") {
  RunSpec spec = Spec();
  json doc = json::parse(RunSpecToJson(spec));
  doc.erase("batch_norm");  // as a coordinator from before the field wrote it
  StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
  REQUIRE(parsed.ok());
  CHECK(parsed->sync_batch_norm);
  doc["batch_norm"] = "per_device";
  parsed = ParseRunSpecJson(doc.dump());
  REQUIRE(parsed.ok());
  CHECK_FALSE(parsed->sync_batch_norm);
}

TEST_CASE("run spec: planned documents are embedded as written", "[protocol]") {
  RunSpec spec = Spec();
  spec.background.reset();
  const std::string graph_json = planner::GraphToJson(*spec.graph);
  const std::string plan_json = planner::PlanToJson(spec.plan);
  const std::string embedded = RunSpecToJson(spec, PlannedDocuments{graph_json, plan_json}, 2);
  CHECK(embedded == RunSpecToJson(spec));
  // Text that is not JSON becomes null, which the reader refuses by name.
  const json doc = json::parse(RunSpecToJson(spec, PlannedDocuments{"{not json", plan_json}));
  CHECK(doc["graph"].is_null());
  CHECK_THAT(RunSpecRefusal(doc), Catch::Contains("graph"));
  CHECK(BackgroundToJson(SampleBackgroundSpec(), graph_json) ==
        BackgroundToJson(SampleBackgroundSpec()));
}

TEST_CASE("run spec: errors name the field", "[protocol]") {
  const json good = json::parse(RunSpecToJson(Spec()));
  auto error = [&](const std::function<void(json&)>& edit) {
    json doc = good;
    edit(doc);
    return RunSpecRefusal(doc);
  };
  CHECK_THAT(error([](json& d) { d["format"] = "deepool.plan"; }), Catch::Contains("format"));
  CHECK_THAT(error([](json& d) { d.erase("iterations"); }), Catch::Contains("iterations"));
  CHECK_THAT(error([](json& d) { d["iterations"] = "5"; }), Catch::Contains("iterations"));
  CHECK_THAT(error([](json& d) { d["seed"] = -1; }), Catch::Contains("seed"));
  CHECK_THAT(error([](json& d) { d["gradient_bucket_mb"] = -1; }),
             Catch::Contains("gradient_bucket_mb"));
  CHECK_THAT(error([](json& d) { d["gradient_bucket_mb"] = "25"; }),
             Catch::Contains("gradient_bucket_mb"));
  CHECK_THAT(error([](json& d) { d["batch_norm"] = "sync"; }),
             Catch::Contains("batch_norm must be \"synchronized\" or \"per_device\""));
  CHECK_THAT(error([](json& d) { d["batch_norm"] = true; }), Catch::Contains("batch_norm"));
  CHECK_THAT(error([](json& d) { d["graph"] = 3; }), Catch::Contains("graph"));
  CHECK_THAT(error([](json& d) { d["plan"]["layers"] = 3; }), Catch::Contains("plan"));
  CHECK_THAT(error([](json& d) { d["optimizer"]["lr"] = "x"; }), Catch::Contains("optimizer.lr"));
  CHECK_THAT(error([](json& d) { d["optimizer"]["betas"] = {0.9}; }),
             Catch::Contains("optimizer.betas"));
  CHECK_THAT(error([](json& d) { d["data"]["seed"] = "x"; }), Catch::Contains("data.seed"));
  CHECK_THAT(error([](json& d) { d["data"] = 1; }), Catch::Contains("data must be an object"));
  CHECK_THAT(error([](json& d) {
               d["checkpoint"] = {{"path", 1}};
             }),
             Catch::Contains("checkpoint.path"));
  CHECK_THAT(error([](json& d) { d["background"]["batch_size"] = 0; }),
             Catch::Contains("background.batch_size"));
  CHECK_THAT(error([](json& d) { d["background"]["sharing"]["mode"] = "sometimes"; }),
             Catch::Contains("background.sharing.mode"));
  CHECK_THAT(error([](json& d) { d["background"]["ranks"] = {-1}; }),
             Catch::Contains("background.ranks"));
  CHECK_THAT(error([](json& d) { d["background"]["data"]["kind"] = "imagenet"; }),
             Catch::Contains("background") && Catch::Contains("data.kind"));
  CHECK_FALSE(ParseRunSpecJson("[1, 2]").ok());
  CHECK_FALSE(ParseRunSpecJson("{").ok());
}

TEST_CASE("run spec: another protocol version is refused", "[protocol]") {
  json doc = json::parse(RunSpecToJson(Spec()));
  doc["version"] = kProtocolVersion + 1;
  CHECK_THAT(RunSpecRefusal(doc), Catch::Contains("version"));
  doc.erase("version");
  CHECK_THAT(RunSpecRefusal(doc), Catch::Contains("version"));
}

TEST_CASE("run spec: written at the oldest version that can express it", "[protocol][version]") {
  auto written = [](const RunSpec& spec) { return json::parse(RunSpecToJson(spec))["version"]; };
  RunSpec spec = Spec();
  spec.optimizer.name = "sgd";
  CHECK(RequiredProtocolVersion(spec) == 1);
  CHECK(written(spec) == 1);
  spec.optimizer.name = "adam";
  CHECK(written(spec) == 1);
  spec.optimizer.name = "adamw";
  CHECK(RequiredProtocolVersion(spec) == 2);
  CHECK(written(spec) == 2);
  spec.optimizer.name = "sgd";
  spec.background->optimizer.name = "adamw";  // the BG job's optimizer counts too
  CHECK(RequiredProtocolVersion(spec) == 2);
  CHECK(written(spec) == 2);
  spec.background->optimizer.name = "sgd";
  spec.background->data = DataSpec{"image_folder", 0, "/data/bg", 0};  // BG data counts too
  CHECK(RequiredProtocolVersion(spec) == 3);
  spec.background.reset();
  CHECK(written(spec) == 1);
  spec.data = DataSpec{"image_folder", 1, "/data/train", 0};
  CHECK(RequiredProtocolVersion(spec) == 3);
  CHECK(written(spec) == 3);
  spec.data = DataSpec{};
  spec.eval = EvalSpec{DataSpec{"cifar10", 0, "/data/test", 0}, 10};  // evaluation needs 4
  CHECK(RequiredProtocolVersion(spec) == 4);
  CHECK(written(spec) == 4);
  // The versions are ones this build reads.
  CHECK(kOldestProtocolVersion == 1);
  CHECK(kProtocolVersion == 9);
  CHECK(kEvaluationProtocolVersion == 4);
}

TEST_CASE("run spec: adamw round-trips and defaults its weight decay as torch does",
          "[protocol][version]") {
  RunSpec spec = Spec();
  spec.optimizer.name = "adamw";
  spec.optimizer.weight_decay = 0.05;
  StatusOr<RunSpec> parsed = ParseRunSpecJson(RunSpecToJson(spec));
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->optimizer == spec.optimizer);
  json doc = json::parse(RunSpecToJson(spec));
  CHECK(doc["optimizer"]["betas"] == json({0.8, 0.99}));
  CHECK_FALSE(doc["optimizer"].contains("momentum"));
  doc["optimizer"] = {{"name", "adamw"}};
  parsed = ParseRunSpecJson(doc.dump());
  REQUIRE(parsed.ok());
  CHECK(parsed->optimizer.weight_decay == kAdamWDefaultWeightDecay);
  CHECK(kAdamWDefaultWeightDecay == 0.01);
  doc["optimizer"] = {{"name", "adam"}};
  parsed = ParseRunSpecJson(doc.dump());
  REQUIRE(parsed.ok());
  CHECK(parsed->optimizer.weight_decay == 0);
}

TEST_CASE("run spec: a version 1 document, as a coordinator of protocol 1 writes it, is read",
          "[protocol][version]") {
  json doc = json::parse(RunSpecToJson(Spec()));
  doc["version"] = 1;
  doc["optimizer"] = {
      {"name", "adam"}, {"lr", 0.003}, {"betas", {0.8, 0.99}}, {"eps", 1e-8}, {"weight_decay", 0}};
  StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->optimizer.name == "adam");
  doc["optimizer"] = {{"name", "sgd"}, {"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0}};
  REQUIRE(ParseRunSpecJson(doc.dump()).ok());
}

TEST_CASE(
    "run spec: a version 2 document with image_folder data is refused, naming field and "
    "version",
    "[protocol][version]") {
  RunSpec spec = Spec();
  spec.data = DataSpec{"image_folder", 1, "/data/train", 0};
  json doc = json::parse(RunSpecToJson(spec));
  doc["version"] = 2;
  CHECK(RunSpecRefusal(doc) ==
        "data.kind \"image_folder\" needs executor protocol version 3; this run spec is version 2");
  spec.data = DataSpec{};
  spec.background->data = DataSpec{"image_folder", 1, "/data/bg", 0};
  doc = json::parse(RunSpecToJson(spec));
  doc["version"] = 2;
  CHECK_THAT(RunSpecRefusal(doc), Catch::StartsWith("background.data.kind \"image_folder\" needs"));
}

TEST_CASE("run spec: a version 1 document that uses adamw is refused, naming field and version",
          "[protocol][version]") {
  RunSpec spec = Spec();
  spec.optimizer.name = "adamw";
  json doc = json::parse(RunSpecToJson(spec));
  doc["version"] = 1;
  CHECK(RunSpecRefusal(doc) ==
        "optimizer.name \"adamw\" needs executor protocol version 2; this run spec is version 1");
  spec.optimizer.name = "sgd";
  spec.background->optimizer.name = "adamw";
  doc = json::parse(RunSpecToJson(spec));
  doc["version"] = 1;
  CHECK_THAT(RunSpecRefusal(doc),
             Catch::StartsWith("background.optimizer.name \"adamw\" needs executor "
                               "protocol version 2"));
}

TEST_CASE("run spec: eval round-trips and is absent unless set", "[protocol][eval]") {
  RunSpec spec = Spec();
  CHECK_FALSE(json::parse(RunSpecToJson(spec)).contains("eval"));
  StatusOr<RunSpec> parsed = ParseRunSpecJson(RunSpecToJson(spec));
  REQUIRE(parsed.ok());
  CHECK_FALSE(parsed->eval.has_value());
  spec.eval = EvalSpec{DataSpec{"image_folder", 5, "/data/val", 2}, 100};
  const std::string text = RunSpecToJson(spec);
  parsed = ParseRunSpecJson(text);
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  REQUIRE(parsed->eval.has_value());
  CHECK(*parsed->eval == *spec.eval);
  CHECK(RunSpecToJson(*parsed) == text);
  const json doc = json::parse(text);
  CHECK(doc["eval"] == json::parse(R"({"data": {"kind": "image_folder", "path": "/data/val",
      "seed": 5, "skip_bad": 2}, "every_iterations": 100})"));
  json defaults = doc;
  defaults["eval"] = {{"data", {{"kind", "synthetic"}}}};  // every_iterations defaults to 0
  parsed = ParseRunSpecJson(defaults.dump());
  REQUIRE(parsed.ok());
  REQUIRE(parsed->eval.has_value());
  CHECK(parsed->eval->every_iterations == 0);
  CHECK(parsed->eval->data == DataSpec{});
}

TEST_CASE("run spec: eval batch round-trips at version 4 and must be at least 1",
          "[protocol][eval]") {
  RunSpec spec = Spec();
  spec.eval = EvalSpec{DataSpec{"synthetic", 1, "", 0}, 10};
  CHECK_FALSE(json::parse(RunSpecToJson(spec))["eval"].contains("batch"));  // the global batch
  CHECK(spec.eval->PassBatch(32) == 32);
  spec.eval->batch = 96;
  CHECK(spec.eval->PassBatch(32) == 96);
  const std::string text = RunSpecToJson(spec);
  json doc = json::parse(text);
  CHECK(doc["eval"]["batch"] == 96);
  CHECK(doc["version"] == 4);  // batch is part of evaluation's version
  StatusOr<RunSpec> parsed = ParseRunSpecJson(text);
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  REQUIRE(parsed->eval.has_value());
  CHECK(parsed->eval->batch == 96);
  CHECK(*parsed->eval == *spec.eval);
  CHECK(RunSpecToJson(*parsed) == text);
  const std::string message =
      "eval.batch must be >= 1 (the samples of one evaluation pass; leave it out for the job's "
      "global batch)";
  for (int64_t bad : {0, -4}) {
    doc["eval"]["batch"] = bad;
    CHECK(RunSpecRefusal(doc) == message);
  }
  doc["eval"]["batch"] = "large";
  CHECK_THAT(RunSpecRefusal(doc), Catch::Contains("eval.batch"));
  spec.eval->batch = 0;
  CHECK(ValidateEvalSpec(*spec.eval, "eval.").message() == message);
}

TEST_CASE("run spec: a bad eval is refused naming the field", "[protocol][eval]") {
  RunSpec spec = Spec();
  spec.eval = EvalSpec{DataSpec{"cifar10", 0, "/data/test", 0}, 10};
  const json good = json::parse(RunSpecToJson(spec));
  auto error = [&good](const std::function<void(json&)>& edit) {
    json doc = good;
    edit(doc);
    return RunSpecRefusal(doc);
  };
  CHECK(error([](json& d) { d["eval"]["every_iterations"] = -1; }) ==
        "eval.every_iterations must be >= 0");
  CHECK(error([](json& d) { d["eval"]["data"].erase("path"); }) ==
        "eval.data.path is required for cifar10");
  CHECK(error([](json& d) { d["eval"]["data"]["kind"] = "imagenet"; }) ==
        "eval.data.kind \"imagenet\" is not synthetic, cifar10, image_folder or tokens");
  CHECK(error([](json& d) { d["eval"].erase("data"); }) == "missing field eval.data");
  CHECK_THAT(error([](json& d) { d["eval"]["every"] = 3; }), Catch::Contains("eval.every"));
  CHECK_THAT(error([](json& d) { d["eval"]["every_iterations"] = "often"; }),
             Catch::Contains("eval.every_iterations"));
  CHECK(error([](json& d) { d["eval"] = 3; }) == "eval must be an object");
  // The plain data's messages keep their prefix.
  CHECK(error([](json& d) {
          d["data"] = {{"kind", "cifar10"}};
        }) == "data.path is required for cifar10");
}

TEST_CASE("run spec: a version 3 document with eval is refused, naming field and version",
          "[protocol][version][eval]") {
  RunSpec spec = Spec();
  spec.eval = EvalSpec{DataSpec{"synthetic", 1, "", 0}, 0};
  json doc = json::parse(RunSpecToJson(spec));
  CHECK(doc["version"] == 4);
  doc["version"] = 3;
  CHECK(RunSpecRefusal(doc) ==
        "eval needs executor protocol version 4; this run spec is version 3");
  doc.erase("eval");  // the same document without eval is a version 3 one
  CHECK(ParseRunSpecJson(doc.dump()).ok());
}

TEST_CASE("run spec: epochs replace iterations at version 5", "[protocol][version][epochs]") {
  RunSpec spec = Spec();
  spec.epochs = 3;
  json doc = json::parse(RunSpecToJson(spec));
  CHECK(doc["version"] == 5);
  CHECK(doc["epochs"] == 3);
  CHECK_FALSE(doc.contains("iterations"));
  StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->epochs == 3);
  doc["version"] = 4;
  CHECK(RunSpecRefusal(doc) ==
        "epochs needs executor protocol version 5; this run spec is version 4");
  doc["version"] = 5;
  doc["iterations"] = 10;
  CHECK(RunSpecRefusal(doc) == "iterations and epochs: give one of the two");
  doc.erase("iterations");
  doc["epochs"] = 0;
  CHECK(RunSpecRefusal(doc) == "epochs must be >= 1");
  // An iterations spec writes no epochs and stays at the oldest version.
  CHECK_FALSE(json::parse(RunSpecToJson(Spec())).contains("epochs"));
}

TEST_CASE("run spec: a precision other than fp32 is written at version 6",
          "[protocol][version][precision]") {
  // fp32 writes no field and needs no newer version: old executors train fp32.
  CHECK_FALSE(json::parse(RunSpecToJson(Spec())).contains("precision"));
  CHECK(RequiredProtocolVersion(Spec()) == 1);
  for (planner::Precision precision :
       {planner::Precision::kTf32, planner::Precision::kBf16, planner::Precision::kFp16}) {
    RunSpec spec = Spec();
    spec.precision = precision;
    CHECK(RequiredProtocolVersion(spec) == 6);
    json doc = json::parse(RunSpecToJson(spec));
    CHECK(doc["version"] == 6);
    CHECK(doc["precision"] == planner::PrecisionName(precision));
    StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
    INFO(parsed.status().ToString());
    REQUIRE(parsed.ok());
    CHECK(parsed->precision == precision);
  }
  RunSpec spec = Spec();
  spec.precision = planner::Precision::kBf16;
  json doc = json::parse(RunSpecToJson(spec));
  doc["version"] = 5;
  CHECK(RunSpecRefusal(doc) ==
        "precision \"bf16\" needs executor protocol version 6; this run spec is version 5");
  doc["version"] = 6;
  doc["precision"] = "fp8";
  CHECK(RunSpecRefusal(doc) == "unknown precision \"fp8\" (known: fp32, tf32, bf16, fp16)");
  doc["precision"] = "fp32";  // explicit fp32 reads at any version
  doc["version"] = 1;
  StatusOr<RunSpec> fp32 = ParseRunSpecJson(doc.dump());
  INFO(fp32.status().ToString());
  REQUIRE(fp32.ok());
  CHECK(fp32->precision == planner::Precision::kFp32);
}

TEST_CASE("run spec: a background job's precision other than fp32 is written at version 6",
          "[protocol][version][precision]") {
  // An executor of version 5 would not know the field and train the BG job at fp32.
  RunSpec spec = Spec();
  spec.background->precision = planner::Precision::kBf16;
  CHECK(RequiredProtocolVersion(spec) == 6);
  json doc = json::parse(RunSpecToJson(spec));
  CHECK(doc["version"] == 6);
  CHECK(doc["background"]["precision"] == "bf16");
  StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->background->precision == planner::Precision::kBf16);
  doc["version"] = 5;
  CHECK(RunSpecRefusal(doc) ==
        "background.precision \"bf16\" needs executor protocol version 6; this run spec is "
        "version 5");
}

TEST_CASE("run spec: init names a weights file at version 6", "[protocol][version][init]") {
  RunSpec spec = Spec();
  spec.init_path = "/weights/resnet50.safetensors";
  json doc = json::parse(RunSpecToJson(spec));
  CHECK(doc["version"] == kInitProtocolVersion);
  CHECK(doc["init"] == json{{"path", "/weights/resnet50.safetensors"}});
  StatusOr<RunSpec> parsed = ParseRunSpecJson(doc.dump());
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(parsed->init_path == spec.init_path);
  doc["version"] = 5;
  CHECK(RunSpecRefusal(doc) ==
        "init needs executor protocol version 6; this run spec is version 5");
  doc["version"] = 6;
  doc["init"] = "/weights/w.pt";
  CHECK(RunSpecRefusal(doc) == "init must be {\"path\": FILE}");
  doc["init"] = {{"path", ""}};
  CHECK(RunSpecRefusal(doc) == "init.path is empty");
  CHECK_FALSE(json::parse(RunSpecToJson(Spec())).contains("init"));
}

TEST_CASE("epochs become iterations: ceil(epochs x samples / global batch)", "[protocol][epochs]") {
  CHECK(*IterationsForEpochs(1, 1024, 12) == 86);  // 85 whole batches and 4 samples
  CHECK(*IterationsForEpochs(3, 1024, 12) == 256);
  CHECK(*IterationsForEpochs(2, 100, 50) == 4);
  CHECK(*IterationsForEpochs(1, 5, 64) == 1);  // a set smaller than the batch: one iteration
  // 1e6 epochs of ImageNet at batch 1 overflow 1e9 iterations, not 64 bits.
  StatusOr<int64_t> huge = IterationsForEpochs(1'000'000, 1'281'167, 1);
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.status().message() ==
        "epochs: 1000000 epochs of 1281167 samples at a global batch of 1 are more than "
        "1000000000 iterations");
  CHECK_FALSE(IterationsForEpochs(int64_t{1} << 40, int64_t{1} << 40, 1).ok());
  CHECK_FALSE(IterationsForEpochs(0, 10, 1).ok());
}

TEST_CASE("tokens data: its JSON, its id type and the version it needs", "[protocol][tokens]") {
  StatusOr<DataSpec> data = ParseDataJson(
      nlohmann::json::parse(R"({"kind":"tokens","path":"/c/train.bin","seed":3,"dtype":"uint32"})"),
      "data.");
  REQUIRE(data.ok());
  CHECK(*data == DataSpec{"tokens", 3, "/c/train.bin", 0, "uint32"});
  CHECK(ValidateDataSpec(*data).ok());
  CHECK(*ParseDataJson(DataToJson(*data), "data.") == *data);
  CHECK(TokenBytes("uint16") == 2);
  CHECK(TokenBytes("uint32") == 4);
  CHECK(TokenBytes("int64") == 0);
  CHECK(DataProtocolVersion("tokens") == kTokensProtocolVersion);
  data->dtype = "int64";
  CHECK(ValidateDataSpec(*data).message() == "data.dtype must be uint16 or uint32, not int64");
}

TEST_CASE("data flags: synthetic and cifar10 and image_folder and tokens with a path",
          "[protocol][eval]") {
  StatusOr<DataSpec> data = ParseDataFlag("synthetic", "--data");
  REQUIRE(data.ok());
  CHECK(*data == DataSpec{});
  data = ParseDataFlag("cifar10:/data/cifar:test", "--data");
  REQUIRE(data.ok());
  CHECK(*data == DataSpec{"cifar10", 0, "/data/cifar:test", 0});  // the first colon splits
  data = ParseDataFlag("image_folder:val", "--eval-data");
  REQUIRE(data.ok());
  CHECK(*data == DataSpec{"image_folder", 0, "val", 0});
  data = ParseDataFlag("tokens:/corpus/val.bin", "--eval-data");
  REQUIRE(data.ok());
  CHECK(*data == DataSpec{"tokens", 0, "/corpus/val.bin", 0, "uint16"});
  for (const char* bad : {"imagenet:/d", "cifar10:", "cifar10", "image_folder", "", "Synthetic"}) {
    INFO(bad);
    StatusOr<DataSpec> refused = ParseDataFlag(bad, "--eval-data");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().message() ==
          "--eval-data must be synthetic, cifar10:PATH, image_folder:PATH or tokens:PATH, not " +
              std::string(bad));
  }
}

TEST_CASE("run spec: versions outside the range this build reads are refused",
          "[protocol][version]") {
  json doc = json::parse(RunSpecToJson(Spec()));
  doc["version"] = kOldestProtocolVersion - 1;
  CHECK(RunSpecRefusal(doc) == "unsupported version 0 (this build reads versions 1 to 9)");
  doc["version"] = kProtocolVersion + 1;
  CHECK(RunSpecRefusal(doc) == "unsupported version 10 (this build reads versions 1 to 9)");
  doc["version"] = kProtocolVersion;  // a newer writer may write any version this build reads
  CHECK(ParseRunSpecJson(doc.dump()).ok());
}

}  // namespace
}  // namespace deepool::protocol
