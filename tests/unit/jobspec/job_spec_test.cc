#include "jobspec/job_spec.h"

#include <google/protobuf/unknown_field_set.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <utility>

#include "jobspec/job_spec_json.h"
#include "jobspec/job_spec_proto.h"
#include "protocol/version.h"

namespace deepool::jobspec {
namespace {

// A minimal spec with `extra` (",\"field\":value,...") added; a field given in `extra` replaces
// the minimal one, since a key given twice is refused. `extra` is kept as written.
std::string Spec(const std::string& extra) {
  const nlohmann::json given =
      extra.empty() ? nlohmann::json::object() : nlohmann::json::parse("{" + extra.substr(1) + "}");
  std::string text = "{";
  for (const auto& [key, value] : {std::pair<const char*, const char*>{"name", "\"demo\""},
                                   {"model", "\"resnet50\""},
                                   {"global_batch", "32"},
                                   {"iterations", "10"}}) {
    if (given.contains(key)) continue;
    text += std::string(text.size() > 1 ? "," : "") + "\"" + key + "\":" + value;
  }
  return text + (text.size() > 1 ? extra : extra.substr(extra.empty() ? 0 : 1)) + "}";
}

std::string ErrorOf(const std::string& text) {
  StatusOr<JobSpec> spec = ParseJobSpecJson(text);
  REQUIRE_FALSE(spec.ok());
  CHECK(spec.status().code() == StatusCode::kInvalidArgument);
  return spec.status().message();
}

TEST_CASE("a minimal job spec takes the documented defaults", "[job_spec]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(Spec(""));
  REQUIRE(spec.ok());
  CHECK(spec->name == "demo");
  CHECK(spec->model == "resnet50");
  CHECK(spec->role == JobRole::kFg);
  CHECK(spec->gpus == 1);
  CHECK(spec->priority == 0);
  CHECK(spec->amplification_limit == 2.0);
  CHECK(spec->optimizer.name == "sgd");
  CHECK(spec->data.kind == "synthetic");
  CHECK(spec->profile == "measured");
  CHECK(spec->batch_norm == "synchronized");
  CHECK(SynchronizesBatchNorm(*spec));
  CHECK_FALSE(spec->concurrent_branches);
  CHECK_FALSE(spec->requeue_on_failure);
}

TEST_CASE("a full job spec is read field by field and round-trips", "[job_spec]") {
  const std::string text = R"({"name":"bg1","model":"small_cnn","role":"bg","priority":5,
    "global_batch":16,"gpus":1,"amplification_limit":0,"iterations":3,
    "optimizer":{"name":"adam","lr":0.001,"betas":[0.8,0.99],"eps":1e-6,"weight_decay":0.1},
    "data":{"kind":"cifar10","path":"/data/cifar"},"seed":7,"requeue_on_failure":true,
    "profile":"analytical","checkpoint":{"path":"/tmp/ck.pt"},"num_classes":10,"image_size":32})";
  StatusOr<JobSpec> spec = ParseJobSpecJson(text);
  REQUIRE(spec.ok());
  CHECK(spec->role == JobRole::kBg);
  CHECK(spec->priority == 5);
  CHECK(spec->optimizer.name == "adam");
  CHECK(spec->optimizer.betas[0] == 0.8);
  CHECK(spec->optimizer.eps == 1e-6);
  CHECK(spec->data.path == "/data/cifar");
  CHECK(spec->checkpoint_path == "/tmp/ck.pt");
  CHECK(spec->requeue_on_failure);
  CHECK(spec->num_classes == 10);

  StatusOr<JobSpec> again = JobSpecFromJson(JobSpecToJson(*spec));
  REQUIRE(again.ok());
  CHECK(JobSpecToJson(*again) == JobSpecToJson(*spec));
}

TEST_CASE("adamw takes torch's defaults and needs executor protocol 2", "[job_spec][version]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(Spec(R"(,"optimizer":{"name":"adamw","lr":0.001})"));
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  CHECK(spec->optimizer.name == "adamw");
  CHECK(spec->optimizer.momentum == 0);
  CHECK(spec->optimizer.weight_decay == 0.01);  // torch.optim.AdamW's
  CHECK(spec->optimizer.betas == std::array<double, 2>{0.9, 0.999});
  CHECK(spec->optimizer.eps == 1e-8);
  CHECK(RequiredProtocolVersion(*spec) == 2);
  // Given, it is kept (0 too); adam's stays 0.
  spec = ParseJobSpecJson(
      Spec(R"(,"optimizer":{"name":"adamw","weight_decay":0,"betas":[0.8,0.99],"eps":1e-6})"));
  REQUIRE(spec.ok());
  CHECK(spec->optimizer.weight_decay == 0);
  CHECK(spec->optimizer.betas[0] == 0.8);
  StatusOr<JobSpec> again = JobSpecFromJson(JobSpecToJson(*spec));
  REQUIRE(again.ok());
  CHECK(JobSpecToJson(*again) == JobSpecToJson(*spec));
  spec = ParseJobSpecJson(Spec(R"(,"optimizer":{"name":"adam"})"));
  REQUIRE(spec.ok());
  CHECK(spec->optimizer.weight_decay == 0);
  CHECK(RequiredProtocolVersion(*spec) == 1);
  spec = ParseJobSpecJson(Spec(""));
  REQUIRE(spec.ok());
  CHECK(RequiredProtocolVersion(*spec) == 1);
  CHECK(ErrorOf(Spec(R"(,"optimizer":{"name":"AdamW"})")) ==
        "optimizer.name: must be \"sgd\", \"adam\" or \"adamw\", got \"AdamW\"");
}

TEST_CASE("an inline graph is kept as its JSON text", "[job_spec]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(
      R"({"graph":{"format":"deepool.graph","name":"g"},"global_batch":4,"iterations":1})");
  REQUIRE(spec.ok());
  CHECK(spec->model.empty());
  CHECK(nlohmann::json::parse(spec->graph_json.str())["name"] == "g");
}

TEST_CASE("malformed job specs are refused naming the field", "[job_spec]") {
  CHECK(ErrorOf("not json").find("JSON") != std::string::npos);
  CHECK(ErrorOf(R"({"model":"x","iterations":1})").rfind("global_batch", 0) == 0);
  CHECK(ErrorOf(R"({"model":"x","global_batch":1})").rfind("iterations", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"global_batch":0)")).rfind("global_batch", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"gpus":64)")).rfind("gpus", 0) == 0);  // more than the batch
  CHECK(ErrorOf(Spec(R"(,"role":"bg","gpus":2)")).rfind("gpus", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"role":"middle")")).rfind("role", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"amplification_limit":0.5)")).rfind("amplification_limit", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"iterations":"ten")")) == "field iterations must be an integer");
  CHECK(ErrorOf(Spec(R"(,"optimizer":{"name":"lbfgs"})")).rfind("optimizer.name", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"optimizer":{"lr":-1})")).rfind("optimizer.lr", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"optimizer":{"betas":[0.9]})")).rfind("optimizer.betas", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"optimizer":{"learning_rate":1})")) ==
        "unknown field optimizer.learning_rate");
  CHECK(ErrorOf(Spec(R"(,"data":{"kind":"cifar10"})")).rfind("data.path", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"data":{"kind":"imagenet"})")).rfind("data.kind", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"profile":"guess")")).rfind("profile", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"priority":100000)")).rfind("priority", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"gpu":2)")) == "unknown field gpu");
  CHECK(ErrorOf(R"({"model":"a","graph":{},"global_batch":1,"iterations":1})").rfind("model", 0) ==
        0);
  CHECK(ErrorOf(R"({"global_batch":1,"iterations":1})").rfind("model", 0) == 0);
}

TEST_CASE("a spec that repeats a key or is not JSON is refused saying where", "[job_spec]") {
  // The last "gpus" would win silently: 8 devices asked for, 1 planned.
  CHECK(ErrorOf("{\"model\": \"resnet50\", \"gpus\": 8, \"global_batch\": 32,\n"
                "  \"iterations\": 10, \"gpus\": 1}") ==
        "job spec: duplicate key \"gpus\" at line 2, column 21 (keys must be unique within an "
        "object)");
  CHECK(ErrorOf(Spec(R"(,"optimizer":{"lr":0.1,"lr":0.2})"))
            .rfind("job spec: duplicate key \"lr\" at line 1, column 91", 0) == 0);
  CHECK(ErrorOf("{\"model\": \"resnet50\",\n  \"global_batch\": 32\n  \"iterations\": 10}") ==
        "job spec: not valid JSON at line 3, column 14: syntax error while parsing object - "
        "unexpected string literal; expected '}'");
  // The spec that `deepool submit` reads from a file goes through the same reader.
  StatusOr<v1::JobSpec> message = ParseJobSpecProto(R"({"name":"a","name":"b"})");
  REQUIRE_FALSE(message.ok());
  CHECK_THAT(message.status().message(), Catch::StartsWith("job spec: duplicate key \"name\""));
}

TEST_CASE("strings that are not UTF-8 are refused naming the field", "[job_spec]") {
  v1::JobSpec spec;
  spec.set_model("resnet50");
  spec.set_global_batch(8);
  spec.set_iterations(1);
  REQUIRE(JobSpecFromProto(spec).ok());
  v1::JobSpec bad_name = spec;
  bad_name.set_name("caf\xc3");  // a sequence cut short
  StatusOr<JobSpec> refused = JobSpecFromProto(bad_name);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message() == "name: is not valid UTF-8");
  v1::JobSpec bad_optimizer = spec;
  bad_optimizer.mutable_optimizer()->set_name("sgd\xff");
  CHECK(JobSpecFromProto(bad_optimizer).status().message() == "optimizer.name: is not valid UTF-8");
  v1::JobSpec surrogate = spec;
  surrogate.mutable_data()->set_path("/data/\xed\xa0\x80");  // U+D800, a UTF-16 surrogate
  CHECK(JobSpecFromProto(surrogate).status().message() == "data.path: is not valid UTF-8");
  // UTF-8 names pass (to the other rules).
  v1::JobSpec accented = spec;
  accented.set_name("r\xc3\xa9seau \xf0\x9f\x9a\x80");
  CHECK(JobSpecFromProto(accented).ok());
  // A JSON document built in memory (`deepool submit --name` from argv) is checked as it
  // becomes the message, before anything is sent.
  nlohmann::json doc = {{"model", "resnet50"}, {"global_batch", 8}, {"iterations", 1}};
  doc["name"] = "\xc0\xaf";  // an overlong '/'
  CHECK(JobSpecProtoFromJson(doc).status().message() == "name: is not valid UTF-8");
}

TEST_CASE("the gradient bucket size is read checked and kept, 25 MiB by default", "[job_spec]") {
  StatusOr<JobSpec> standard = ParseJobSpecJson(Spec(""));
  REQUIRE(standard.ok());
  CHECK(standard->gradient_bucket_mb == 25);
  StatusOr<JobSpec> spec = ParseJobSpecJson(Spec(R"(,"gradient_bucket_mb":0.5)"));
  REQUIRE(spec.ok());
  CHECK(spec->gradient_bucket_mb == 0.5);
  CHECK(JobSpecFromProto(JobSpecToProto(*spec))->gradient_bucket_mb == 0.5);
  CHECK(JobSpecFromJson(JobSpecToJson(*spec))->gradient_bucket_mb == 0.5);
  CHECK(ParseJobSpecProto(Spec(R"(,"gradient_bucket_mb":100)"))->gradient_bucket_mb() == 100);
  CHECK(ErrorOf(Spec(R"(,"gradient_bucket_mb":0)")) ==
        "gradient_bucket_mb: must be > 0 and at most 4096 MiB");
  CHECK(ErrorOf(Spec(R"(,"gradient_bucket_mb":-1)")).rfind("gradient_bucket_mb", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"gradient_bucket_mb":5000)")).rfind("gradient_bucket_mb", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"gradient_bucket_mb":"big")")) ==
        "field gradient_bucket_mb must be a number");
  // A record stored before the field existed reads back with the default.
  nlohmann::json old = JobSpecToJson(*spec);
  old.erase("gradient_bucket_mb");
  CHECK(JobSpecFromJson(old)->gradient_bucket_mb == 25);
}

TEST_CASE("a binary spec with fields this coordinator does not know is refused", "[job_spec]") {
  v1::JobSpec spec;
  spec.set_model("resnet50");
  spec.set_global_batch(8);
  spec.set_iterations(1);
  REQUIRE(JobSpecFromProto(spec).ok());
  v1::JobSpec padded = spec;
  padded.GetReflection()->MutableUnknownFields(&padded)->AddLengthDelimited(999,
                                                                            std::string(1000, 'x'));
  StatusOr<JobSpec> refused = JobSpecFromProto(padded);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(refused.status().message(), Catch::StartsWith("unknown field #999"));
  v1::JobSpec nested = spec;
  v1::OptimizerSpec* optimizer = nested.mutable_optimizer();
  optimizer->GetReflection()->MutableUnknownFields(optimizer)->AddVarint(77, 1);
  CHECK_THAT(JobSpecFromProto(nested).status().message(),
             Catch::StartsWith("unknown field optimizer.#77"));
}

TEST_CASE("a spec's numbers, paths and graph have upper bounds", "[job_spec]") {
  CHECK(ErrorOf(Spec(R"(,"global_batch":2000000)")) == "global_batch: must be in [1, 1048576]");
  CHECK(ErrorOf(Spec(R"(,"iterations":2000000000)")).rfind("iterations", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"num_classes":2000000)")).rfind("num_classes", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"image_size":100000)")).rfind("image_size", 0) == 0);
  CHECK(ErrorOf(Spec(R"(,"checkpoint":"/tmp/a\nFAILED")")) ==
        "checkpoint.path: has control characters");
  CHECK(ErrorOf(Spec(R"(,"name":"\u001b[2Jfake")")) == "name: has control characters");
  CHECK(ErrorOf(Spec(R"(,"data":{"kind":"cifar10","path":")" + std::string(5000, 'a') + "\"}"))
            .rfind("data.path: must be at most", 0) == 0);
  const std::string padded_graph =
      R"({"format":"deepool.graph","name":")" + std::string(9 << 20, 'x') + "\"}";
  CHECK_THAT(ErrorOf(R"({"graph":)" + padded_graph + R"(,"global_batch":4,"iterations":1})"),
             Catch::StartsWith("graph: is ") && Catch::Contains("at most 8388608"));
}

TEST_CASE("the JSON spec becomes the API message with nothing defaulted", "[job_spec]") {
  StatusOr<v1::JobSpec> minimal = ParseJobSpecProto(Spec(""));
  REQUIRE(minimal.ok());
  CHECK(minimal->global_batch() == 32);
  CHECK_FALSE(minimal->has_gpus());  // absent stays unset: JobSpecFromProto's defaults apply
  CHECK_FALSE(minimal->has_amplification_limit());
  CHECK(minimal->role() == v1::JOB_ROLE_UNSPECIFIED);
  CHECK_FALSE(minimal->has_optimizer());

  // JSON and message take the one path: the same spec either way.
  const std::string full = Spec(
      R"(,"role":"bg","optimizer":{"name":"adam","betas":[0.8,0.99]},"checkpoint":"/tmp/c.pt")");
  StatusOr<v1::JobSpec> message = ParseJobSpecProto(full);
  REQUIRE(message.ok());
  CHECK(message->role() == v1::JOB_ROLE_BG);
  CHECK(message->optimizer().betas_size() == 2);
  StatusOr<JobSpec> from_message = JobSpecFromProto(*message);
  StatusOr<JobSpec> from_json = ParseJobSpecJson(full);
  REQUIRE(from_message.ok());
  REQUIRE(from_json.ok());
  CHECK(JobSpecToJson(*from_message) == JobSpecToJson(*from_json));
  CHECK(from_json->checkpoint_path == "/tmp/c.pt");

  CHECK(ParseJobSpecProto(Spec(R"(,"role":"middle")")).status().message().rfind("role", 0) == 0);
  CHECK(ParseJobSpecProto("[1]").status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("periodic checkpoints are read checked and carried through the message and store",
          "[job_spec][checkpoint]") {
  const std::string text =
      Spec(R"(,"checkpoint":{"path":"/tmp/final.pt","dir":"/tmp/ck","every_iterations":50,)"
           R"("every_seconds":900,"keep":3})");
  StatusOr<JobSpec> spec = ParseJobSpecJson(text);
  REQUIRE(spec.ok());
  CHECK(spec->checkpoint_path == "/tmp/final.pt");
  CHECK(spec->checkpoint_dir == "/tmp/ck");
  CHECK(spec->checkpoint_every_iterations == 50);
  CHECK(spec->checkpoint_keep == 3);
  CHECK(spec->checkpoint_every_seconds == 900);
  StatusOr<JobSpec> again = JobSpecFromJson(JobSpecToJson(*spec));
  REQUIRE(again.ok());
  CHECK(again->checkpoint_dir == "/tmp/ck");
  CHECK(again->checkpoint_every_iterations == 50);
  CHECK(again->checkpoint_keep == 3);
  CHECK(again->checkpoint_every_seconds == 900);
  StatusOr<JobSpec> through_message = JobSpecFromProto(JobSpecToProto(*spec));
  REQUIRE(through_message.ok());
  CHECK(JobSpecToJson(*through_message) == JobSpecToJson(*spec));

  CHECK(ErrorOf(Spec(R"(,"checkpoint":{"every_iterations":5})")) ==
        "checkpoint: every_iterations, every_seconds and keep need checkpoint.dir");
  CHECK(ErrorOf(Spec(R"(,"checkpoint":{"every_seconds":5})")) ==
        "checkpoint: every_iterations, every_seconds and keep need checkpoint.dir");
  CHECK(ErrorOf(Spec(R"(,"checkpoint":{"dir":"/tmp/ck","every_seconds":-1})")) ==
        "checkpoint.every_seconds: must be in [0, 1e7]");
  CHECK(ErrorOf(Spec(R"(,"checkpoint":{"dir":"/tmp/ck","keep":0})")) ==
        "checkpoint.keep: must be in [1, 1000]");
  CHECK(ErrorOf(Spec(R"(,"checkpoint":{"dir":"/tmp/ck","every_iterations":-1})")) ==
        "checkpoint.every_iterations: must be >= 0");
  CHECK_THAT(ErrorOf(Spec(R"(,"checkpoint":{"dir":"/tmp/ck","every":5})")),
             Catch::Contains("checkpoint.every"));
  CHECK(ErrorOf(Spec(R"(,"checkpoint":{"dir":"/tmp/a\nb"})")) ==
        "checkpoint.dir: has control characters");
}

TEST_CASE("the node-loss policy is read checked and kept", "[job_spec][elastic]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(Spec(R"(,"gpus":4,"on_node_loss":"replan")"));
  REQUIRE(spec.ok());
  CHECK(spec->on_node_loss == "replan");
  CHECK(RequeuesOnFailure(*spec));
  CHECK(ReplansOnNodeLoss(*spec));
  CHECK(JobSpecFromProto(JobSpecToProto(*spec))->on_node_loss == "replan");
  CHECK(JobSpecFromJson(JobSpecToJson(*spec))->on_node_loss == "replan");
  CHECK(RequeuesOnFailure(*ParseJobSpecJson(Spec(R"(,"requeue_on_failure":true)"))));
  CHECK_FALSE(RequeuesOnFailure(*ParseJobSpecJson(Spec(""))));
  CHECK(ErrorOf(Spec(R"(,"on_node_loss":"retry")")) ==
        "on_node_loss: must be fail, wait or replan");
  CHECK(ErrorOf(Spec(R"(,"on_node_loss":"fail","requeue_on_failure":true)")) ==
        "on_node_loss: is fail but requeue_on_failure is true");
  CHECK_THAT(ErrorOf(Spec(R"(,"role":"bg","on_node_loss":"replan")")),
             Catch::StartsWith("on_node_loss: replan is for FG jobs"));
}

TEST_CASE("per-device batch norm is read checked and kept", "[job_spec]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(Spec(R"(,"gpus":4,"batch_norm":"per_device")"));
  REQUIRE(spec.ok());
  CHECK(spec->batch_norm == "per_device");
  CHECK_FALSE(SynchronizesBatchNorm(*spec));
  CHECK(JobSpecFromProto(JobSpecToProto(*spec))->batch_norm == "per_device");
  CHECK(JobSpecFromJson(JobSpecToJson(*spec))->batch_norm == "per_device");
  CHECK(ErrorOf(Spec(R"(,"batch_norm":"sync")")) ==
        "batch_norm: must be \"synchronized\" or \"per_device\"");
  CHECK(ErrorOf(Spec(R"(,"batch_norm":1)")) == "field batch_norm must be a string");
}

TEST_CASE("image folder data is read checked and kept, skip_bad too", "[job_spec]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(
      Spec(R"(,"data":{"kind":"image_folder","path":"/data/train","seed":3,"skip_bad":5})"));
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  CHECK(spec->data.kind == "image_folder");
  CHECK(spec->data.path == "/data/train");
  CHECK(spec->data.seed == 3);
  CHECK(spec->data.skip_bad == 5);
  for (const StatusOr<JobSpec>& copy :
       {JobSpecFromProto(JobSpecToProto(*spec)), JobSpecFromJson(JobSpecToJson(*spec))}) {
    REQUIRE(copy.ok());
    CHECK(copy->data.kind == "image_folder");
    CHECK(copy->data.path == "/data/train");
    CHECK(copy->data.skip_bad == 5);
  }
  CHECK(ErrorOf(Spec(R"(,"data":{"kind":"image_folder"})")) ==
        "data.path: is required for image_folder");
  CHECK(ErrorOf(Spec(R"(,"data":{"kind":"image_folder","path":"/d","skip_bad":-1})")) ==
        "data.skip_bad: must be >= 0");
}

TEST_CASE("token data is read checked and kept with its id type", "[job_spec][tokens]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(
      Spec(R"(,"data":{"kind":"tokens","path":"/corpus/train.bin","seed":4,"dtype":"uint32"})"));
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  CHECK(spec->data.kind == "tokens");
  CHECK(spec->data.dtype == "uint32");
  CHECK(RequiredProtocolVersion(*spec) == protocol::kTokensProtocolVersion);
  for (const StatusOr<JobSpec>& copy :
       {JobSpecFromProto(JobSpecToProto(*spec)), JobSpecFromJson(JobSpecToJson(*spec))}) {
    REQUIRE(copy.ok());
    CHECK(copy->data.dtype == "uint32");
    CHECK(copy->data.path == "/corpus/train.bin");
  }
  // uint16 by default, as nanoGPT writes them.
  StatusOr<JobSpec> plain =
      ParseJobSpecJson(Spec(R"(,"data":{"kind":"tokens","path":"/corpus/train.bin"})"));
  REQUIRE(plain.ok());
  CHECK(plain->data.dtype == "uint16");
  CHECK(ErrorOf(Spec(R"(,"data":{"kind":"tokens","path":"/c","dtype":"int8"})")) ==
        "data.dtype: must be \"uint16\" or \"uint32\", got \"int8\"");
  CHECK(ErrorOf(Spec(R"(,"data":{"kind":"tokens"})")) == "data.path: is required for tokens");
}

TEST_CASE("eval is read checked and kept through the message and the store", "[job_spec][eval]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(
      Spec(R"(,"eval":{"data":{"kind":"image_folder","path":"/data/val","seed":2,"skip_bad":1},)"
           R"("every_iterations":100})"));
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  REQUIRE(spec->eval.has_value());
  CHECK(spec->eval->data.kind == "image_folder");
  CHECK(spec->eval->data.path == "/data/val");
  CHECK(spec->eval->data.seed == 2);
  CHECK(spec->eval->data.skip_bad == 1);
  CHECK(spec->eval->every_iterations == 100);
  const nlohmann::json written = JobSpecToJson(*spec);
  CHECK(written["eval"] == nlohmann::json::parse(R"({"data": {"kind": "image_folder",
      "path": "/data/val", "seed": 2, "skip_bad": 1}, "every_iterations": 100})"));
  for (const StatusOr<JobSpec>& copy :
       {JobSpecFromProto(JobSpecToProto(*spec)), JobSpecFromJson(written)}) {
    REQUIRE(copy.ok());
    CHECK(JobSpecToJson(*copy) == written);
  }
  // Absent: no evaluation, and nothing written.
  StatusOr<JobSpec> plain = ParseJobSpecJson(Spec(""));
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->eval.has_value());
  CHECK_FALSE(JobSpecToJson(*plain).contains("eval"));
  CHECK_FALSE(JobSpecToProto(*plain).has_eval());
  CHECK_FALSE(JobSpecFromProto(JobSpecToProto(*plain))->eval.has_value());
  // every_iterations defaults to 0: only at the end.
  StatusOr<JobSpec> at_end = ParseJobSpecJson(Spec(R"(,"eval":{"data":{"kind":"synthetic"}})"));
  REQUIRE(at_end.ok());
  REQUIRE(at_end->eval.has_value());
  CHECK(at_end->eval->every_iterations == 0);
  CHECK(at_end->eval->data.kind == "synthetic");
  CHECK_FALSE(at_end->eval->batch.has_value());  // passes of the global batch
}

TEST_CASE("eval batch is kept through the message and the store", "[job_spec][eval]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(
      Spec(R"(,"eval":{"data":{"kind":"synthetic"},"every_iterations":10,"batch":96})"));
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  REQUIRE(spec->eval.has_value());
  CHECK(spec->eval->batch == 96);
  const nlohmann::json written = JobSpecToJson(*spec);
  CHECK(written["eval"]["batch"] == 96);
  const v1::JobSpec message = JobSpecToProto(*spec);
  CHECK(message.eval().has_batch());
  CHECK(message.eval().batch() == 96);
  for (const StatusOr<JobSpec>& copy : {JobSpecFromProto(message), JobSpecFromJson(written)}) {
    REQUIRE(copy.ok());
    REQUIRE(copy->eval.has_value());
    CHECK(copy->eval->batch == 96);
    CHECK(JobSpecToJson(*copy) == written);
  }
  // Unset in the message: the global batch, and nothing written.
  v1::JobSpec unset = message;
  unset.mutable_eval()->clear_batch();
  StatusOr<JobSpec> from_unset = JobSpecFromProto(unset);
  REQUIRE(from_unset.ok());
  CHECK_FALSE(from_unset->eval->batch.has_value());
  CHECK_FALSE(JobSpecToJson(*from_unset)["eval"].contains("batch"));
}

TEST_CASE("a bad eval is refused naming the field", "[job_spec][eval]") {
  CHECK(ErrorOf(Spec(R"(,"eval":{"data":{"kind":"synthetic"},"every_iterations":-1})")) ==
        "eval.every_iterations: must be >= 0");
  CHECK(ErrorOf(Spec(R"(,"eval":{"data":{"kind":"cifar10"}})")) ==
        "eval.data.path: is required for cifar10");
  CHECK(ErrorOf(Spec(R"(,"eval":{"data":{"kind":"imagenet","path":"/d"}})")) ==
        "eval.data.kind: must be \"synthetic\", \"cifar10\", \"image_folder\" or \"tokens\", got "
        "\"imagenet\"");
  CHECK(ErrorOf(Spec(R"(,"eval":{"data":{"kind":"image_folder","path":"/d","skip_bad":-2}})")) ==
        "eval.data.skip_bad: must be >= 0");
  CHECK(ErrorOf(Spec(R"(,"eval":{"data":{"kind":"cifar10","path":"/a\nb"}})")) ==
        "eval.data.path: has control characters");
  CHECK(ErrorOf(Spec(R"(,"eval":{"every_iterations":5})")) == "eval.data: is required");
  for (const char* batch : {"0", "-3"}) {
    CHECK(ErrorOf(Spec(std::string(R"(,"eval":{"data":{"kind":"synthetic"},"batch":)") + batch +
                       "}")) ==
          "eval.batch: must be >= 1 (the samples of one evaluation pass; leave it out for the "
          "global batch)");
  }
  CHECK_THAT(ErrorOf(Spec(R"(,"eval":{"data":{"kind":"synthetic"},"batch":"big"})")),
             Catch::Contains("eval.batch"));
  CHECK_THAT(ErrorOf(Spec(R"(,"eval":{"data":{"kind":"synthetic"},"every":5})")),
             Catch::Contains("eval.every"));
  CHECK_THAT(ErrorOf(Spec(R"(,"eval":{"data":{"kind":"synthetic","pth":"/d"}})")),
             Catch::Contains("eval.data.pth"));
  CHECK(ErrorOf(Spec(R"(,"eval":{"data":3})")) == "eval.data: must be an object");
  CHECK(ErrorOf(Spec(R"(,"eval":5)")) == "eval: must be an object");
  CHECK(ErrorOf(Spec(R"(,"role":"bg","eval":{"data":{"kind":"synthetic"}})")) ==
        "eval: only foreground jobs are evaluated");
  // The job's own data keeps its messages.
  CHECK(ErrorOf(Spec(R"(,"data":{"kind":"cifar10"})")) == "data.path: is required for cifar10");
}

TEST_CASE("eval needs executor protocol 4 and counts in the fingerprint and the bytes",
          "[job_spec][eval][version]") {
  StatusOr<JobSpec> plain = ParseJobSpecJson(Spec(""));
  REQUIRE(plain.ok());
  CHECK(RequiredProtocolVersion(*plain) == 1);
  JobSpec evaluated = *plain;
  evaluated.eval = EvalSpec{DataSpec{"cifar10", 0, "/data/cifar-test", 0}, 10};
  REQUIRE(ValidateJobSpec(evaluated).ok());
  CHECK(RequiredProtocolVersion(evaluated) == 4);
  CHECK(RequiredProtocolVersion(evaluated) == protocol::kEvaluationProtocolVersion);
  CHECK(SpecFingerprint(evaluated) != SpecFingerprint(*plain));
  JobSpec other_every = evaluated;
  other_every.eval->every_iterations = 20;
  CHECK(SpecFingerprint(other_every) != SpecFingerprint(evaluated));
  JobSpec other_path = evaluated;
  other_path.eval->data.path = "/data/cifar-val";
  CHECK(SpecFingerprint(other_path) != SpecFingerprint(evaluated));
  CHECK(SpecBytes(evaluated) == SpecBytes(*plain) + 16);  // "/data/cifar-test"
}

TEST_CASE("epochs replace iterations for FG jobs and need executor protocol 5",
          "[job_spec][epochs][version]") {
  const std::string text = R"({"name":"demo","model":"resnet50","global_batch":32,"epochs":3})";
  StatusOr<JobSpec> spec = ParseJobSpecJson(text);
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  CHECK(spec->epochs == 3);
  CHECK(spec->iterations == 0);
  CHECK(RequiredProtocolVersion(*spec) == protocol::kEpochsProtocolVersion);
  CHECK(protocol::kEpochsProtocolVersion == 5);
  const nlohmann::json written = JobSpecToJson(*spec);
  CHECK(written["epochs"] == 3);
  CHECK_FALSE(written.contains("iterations"));
  const v1::JobSpec message = JobSpecToProto(*spec);
  CHECK(message.epochs() == 3);
  CHECK_FALSE(message.has_iterations());
  for (const StatusOr<JobSpec>& copy : {JobSpecFromProto(message), JobSpecFromJson(written)}) {
    REQUIRE(copy.ok());
    CHECK(JobSpecToJson(*copy) == written);
  }
  // An iterations job writes no epochs, and a different length is a different spec.
  StatusOr<JobSpec> counted = ParseJobSpecJson(Spec(""));
  REQUIRE(counted.ok());
  CHECK_FALSE(JobSpecToJson(*counted).contains("epochs"));
  CHECK_FALSE(JobSpecToProto(*counted).has_epochs());
  CHECK(RequiredProtocolVersion(*counted) == 1);
  CHECK(SpecFingerprint(*counted) != SpecFingerprint(*spec));

  CHECK(ErrorOf(Spec(R"(,"epochs":2)")) ==
        "iterations: give exactly one of \"iterations\" and \"epochs\"");
  CHECK(ErrorOf(R"({"name":"demo","model":"resnet50","global_batch":32})") ==
        "iterations: give exactly one of \"iterations\" and \"epochs\"");
  CHECK(ErrorOf(R"({"name":"d","model":"resnet50","global_batch":32,"epochs":-1})") ==
        "epochs: must be in [1, 1000000]");
  CHECK(ErrorOf(R"({"name":"d","model":"resnet50","global_batch":32,"epochs":1000001})") ==
        "epochs: must be in [1, 1000000]");
  CHECK(ErrorOf(R"({"name":"d","model":"resnet50","global_batch":32,"epochs":1,"role":"bg"})") ==
        "epochs: are for foreground jobs (give a bg job iterations)");
}

TEST_CASE("init is read checked and kept and needs executor protocol 6", "[job_spec][init]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(Spec(R"(,"init":{"path":"/weights/vit.safetensors"})"));
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  CHECK(spec->init_path == "/weights/vit.safetensors");
  CHECK(RequiredProtocolVersion(*spec) == protocol::kInitProtocolVersion);
  const nlohmann::json written = JobSpecToJson(*spec);
  CHECK(written["init"] == nlohmann::json{{"path", "/weights/vit.safetensors"}});
  for (const StatusOr<JobSpec>& copy :
       {JobSpecFromProto(JobSpecToProto(*spec)), JobSpecFromJson(written)}) {
    REQUIRE(copy.ok());
    CHECK(JobSpecToJson(*copy) == written);
  }
  StatusOr<JobSpec> plain = ParseJobSpecJson(Spec(""));
  REQUIRE(plain.ok());
  CHECK_FALSE(JobSpecToJson(*plain).contains("init"));
  CHECK_FALSE(JobSpecToProto(*plain).has_init());
  CHECK(SpecFingerprint(*plain) != SpecFingerprint(*spec));
  CHECK(ErrorOf(Spec(R"(,"init":"/w.pt")")) == "init: must be {\"path\": FILE}");
  CHECK(ErrorOf(Spec(R"(,"init":{})")) == "init.path: is required");
  CHECK(ErrorOf(Spec(R"(,"init":{"path":"/a\nb"})")) == "init.path: has control characters");
  CHECK_THAT(ErrorOf(Spec(R"(,"init":{"file":"/w.pt"})")), Catch::Contains("init.file"));
}

TEST_CASE("concurrent branches are read checked and kept, for FG jobs only", "[job_spec]") {
  StatusOr<JobSpec> spec = ParseJobSpecJson(Spec(R"(,"gpus":8,"concurrent_branches":true)"));
  REQUIRE(spec.ok());
  CHECK(spec->concurrent_branches);
  CHECK(JobSpecFromProto(JobSpecToProto(*spec))->concurrent_branches);
  CHECK(JobSpecFromJson(JobSpecToJson(*spec))->concurrent_branches);
  CHECK_FALSE(ParseJobSpecJson(Spec(R"(,"concurrent_branches":false)"))->concurrent_branches);
  CHECK(ErrorOf(Spec(R"(,"concurrent_branches":"yes")")) ==
        "field concurrent_branches must be true or false");
  CHECK_THAT(ErrorOf(Spec(R"(,"role":"bg","concurrent_branches":true)")),
             Catch::StartsWith("concurrent_branches: is for FG jobs"));
  // A record stored before the field existed reads back without it.
  nlohmann::json old = JobSpecToJson(ParseJobSpecJson(Spec("")).value());
  old.erase("concurrent_branches");
  StatusOr<JobSpec> legacy = JobSpecFromJson(old);
  REQUIRE(legacy.ok());
  CHECK_FALSE(legacy->concurrent_branches);
}

}  // namespace
}  // namespace deepool::jobspec
