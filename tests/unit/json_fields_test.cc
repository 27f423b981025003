#include "common/json_fields.h"

#include <catch2/catch.hpp>

namespace deepool {
namespace {

using nlohmann::json;

const json kDoc = json::parse(R"({
  "name": "job", "lr": 0.5, "iterations": 8, "whole_float": 8.0, "half": 8.5,
  "big": 3000000000, "negative": -1, "flag": true, "nothing": null,
  "optimizer": {"momentum": "high"}, "layers": [1, 2]
})");

TEST_CASE("outside JSON is parsed up to 100 levels deep and refused deeper", "[json_fields]") {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  CHECK(ParseJson(nested(100), "doc").ok());
  StatusOr<json> deep = ParseJson(nested(101), "doc");
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.status().code() == StatusCode::kInvalidArgument);
  CHECK(deep.status().message() == "doc: nested deeper than 100 levels");
  // Brackets inside strings (escaped quotes too) are text, not nesting.
  const std::string text = R"({"a": "\"[[[[)" + std::string(200, '[') + R"("})";
  StatusOr<json> quoted = ParseJson(text, "doc");
  REQUIRE(quoted.ok());
  CHECK((*quoted)["a"].get<std::string>().size() == 205);
  CHECK(ParseJson("{", "doc").status().message() == "doc: not valid JSON");
}

TEST_CASE("optional fields keep their default when absent or null", "[json_fields]") {
  std::string name = "default";
  REQUIRE(ReadOptionalField(kDoc, "missing", "", &name).ok());
  REQUIRE(ReadOptionalField(kDoc, "nothing", "", &name).ok());
  CHECK(name == "default");
  REQUIRE(ReadOptionalField(kDoc, "name", "", &name).ok());
  CHECK(name == "job");

  double lr = 0;
  REQUIRE(ReadOptionalField(kDoc, "lr", "", &lr).ok());
  CHECK(lr == 0.5);
  int64_t iterations = 0;
  REQUIRE(ReadOptionalField(kDoc, "iterations", "", &iterations).ok());
  CHECK(iterations == 8);
  bool flag = false;
  REQUIRE(ReadOptionalField(kDoc, "flag", "", &flag).ok());
  CHECK(flag);
}

TEST_CASE("a wrong type names the field with its path", "[json_fields]") {
  double momentum = 0;
  Status status = ReadOptionalField(kDoc["optimizer"], "momentum", "optimizer.", &momentum);
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK(status.message() == "field optimizer.momentum must be a number");
  CHECK(momentum == 0);

  bool flag = false;
  CHECK(ReadOptionalField(kDoc, "name", "", &flag).message() == "field name must be true or false");
  std::string text;
  CHECK(ReadOptionalField(kDoc, "lr", "", &text).message() == "field lr must be a string");
}

TEST_CASE("integers accept integral floats and refuse what does not fit", "[json_fields]") {
  int whole = 0;
  REQUIRE(ReadOptionalField(kDoc, "whole_float", "", &whole).ok());
  CHECK(whole == 8);
  CHECK(ReadOptionalField(kDoc, "half", "", &whole).message() == "field half must be an integer");
  CHECK(ReadOptionalField(kDoc, "lr", "", &whole).message() == "field lr must be an integer");
  CHECK(ReadOptionalField(kDoc, "big", "", &whole).message() == "field big is out of range");
  int64_t big = 0;
  REQUIRE(ReadOptionalField(kDoc, "big", "", &big).ok());
  CHECK(big == 3000000000);
  uint64_t seed = 7;
  CHECK(ReadOptionalField(kDoc, "negative", "", &seed).message() ==
        "field negative is out of range");
  CHECK(seed == 7);
  int negative = 0;
  REQUIRE(ReadOptionalField(kDoc, "negative", "", &negative).ok());
  CHECK(negative == -1);
}

TEST_CASE("required fields say when they are missing", "[json_fields]") {
  auto name = ReadRequiredField<std::string>(kDoc, "name", "");
  REQUIRE(name.ok());
  CHECK(*name == "job");
  CHECK(ReadRequiredField<double>(kDoc, "rate", "data.").status().message() ==
        "missing field data.rate");
  CHECK(ReadRequiredField<double>(kDoc, "nothing", "").status().message() ==
        "missing field nothing");
  CHECK(ReadRequiredField<int>(kDoc, "name", "").status().message() ==
        "field name must be an integer");

  auto layers = ReadRequiredArray(kDoc, "layers", "");
  REQUIRE(layers.ok());
  CHECK((*layers)->size() == 2);
  CHECK(ReadRequiredArray(kDoc, "optimizer", "").status().message() ==
        "field optimizer must be an array");
  auto optimizer = ReadRequiredObject(kDoc, "optimizer", "");
  REQUIRE(optimizer.ok());
  CHECK((*optimizer)->contains("momentum"));
  CHECK(ReadRequiredObject(kDoc, "layers", "x.").status().message() ==
        "field x.layers must be an object");
  CHECK(ReadRequiredObject(kDoc, "absent", "").status().message() == "missing field absent");
}

TEST_CASE("unknown fields and document headers", "[json_fields]") {
  json link = {{"bandwidth_gbps", 1}, {"bandwith_gbps", 2}};
  CHECK(CheckKnownFields(link, {"bandwidth_gbps", "latency_us"}, "intra_node.").message() ==
        "unknown field intra_node.bandwith_gbps");
  CHECK(CheckKnownFields(link, {"bandwidth_gbps", "bandwith_gbps"}, "").ok());

  json doc = {{"format", "deepool.cluster"}, {"version", 1}};
  CHECK(CheckFormatAndVersion(doc, "deepool.cluster", 1).ok());
  CHECK_THAT(CheckFormatAndVersion(doc, "deepool.plan", 1).message(),
             Catch::Contains("deepool.plan"));
  CHECK_THAT(CheckFormatAndVersion(doc, "deepool.cluster", 2).message(),
             Catch::Contains("unsupported version 1"));
  doc.erase("version");
  CHECK_THAT(CheckFormatAndVersion(doc, "deepool.cluster", 1).message(),
             Catch::Contains("version"));
}

}  // namespace
}  // namespace deepool
