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
  CHECK_THAT(ParseJson("{", "doc").status().message(), Catch::StartsWith("doc: not valid JSON"));
}

TEST_CASE("malformed JSON is refused naming its line and column", "[json_fields]") {
  auto error_of = [](const std::string& text) {
    StatusOr<json> doc = ParseJson(text, "spec");
    REQUIRE_FALSE(doc.ok());
    CHECK(doc.status().code() == StatusCode::kInvalidArgument);
    return doc.status().message();
  };
  CHECK(error_of("{\n  \"a\": 1,\n  \"b\" 2\n}") ==
        "spec: not valid JSON at line 3, column 7: syntax error while parsing object separator - "
        "unexpected number literal; expected ':'");
  // The end of the input is the column after the last character.
  CHECK_THAT(error_of("{\"a\": [1,\n2"), Catch::StartsWith("spec: not valid JSON at line 2, column 2"));
  // Columns count characters, not bytes: "é" is two bytes, one column.
  CHECK_THAT(error_of("{\"\xc3\xa9\": x}"),
             Catch::StartsWith("spec: not valid JSON at line 1, column 7: syntax error"));
  // What the parser last read is left out of the message: it would echo control characters.
  CHECK_THAT(error_of("{\"a\": \"\x1b[2J\x01\"}"),
             Catch::StartsWith("spec: not valid JSON at line 1, column 8: syntax error"));
  CHECK(error_of("{\"a\": \"\x1b[2J\x01\"}").find('\x1b') == std::string::npos);
  CHECK_THAT(error_of("[1e400]"), Catch::StartsWith("spec: not valid JSON at line 1, column "));
}

TEST_CASE("a key repeated in one object is refused, naming the key and where it repeats",
          "[json_fields]") {
  StatusOr<json> twice = ParseJson("{\"a\": 1,\n  \"b\": {\"a\": 2, \"c\": 3},\n  \"a\": 4}", "spec");
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.status().code() == StatusCode::kInvalidArgument);
  CHECK(twice.status().message() ==
        "spec: duplicate key \"a\" at line 3, column 3 (keys must be unique within an object)");
  // The same key in different objects (nested, or array elements) is fine.
  CHECK(ParseJson(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}], "c": {"a": {"a": 3}}})", "spec")
            .ok());
  // In a nested object, after an escaped quote; the position is the key's opening quote.
  CHECK(ParseJson(R"({"o": {"x\"y": 1, "x\"y": 2}})", "spec").status().message() ==
        "spec: duplicate key \"x\\\"y\" at line 1, column 19 (keys must be unique within an object)");
  // A key that would paint the terminal is written escaped.
  CHECK(ParseJson(R"({"\u202e\u001b": 1, "\u202e\u001b": 2})", "spec").status().message() ==
        R"(spec: duplicate key "\u202e\u001b" at line 1, column 21 (keys must be unique within an object))");
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
