#include "common/json_fields.h"

#include <cmath>

namespace deepool {
namespace {

bool NestedDeeperThan(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view what) {
  if (NestedDeeperThan(text, kMaxJsonDepth)) {
    return InvalidArgumentError(std::string(what) + ": nested deeper than " +
                                std::to_string(kMaxJsonDepth) + " levels");
  }
  nlohmann::json doc =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgumentError(std::string(what) + ": not valid JSON");
  return doc;
}

Status CheckKnownFields(const nlohmann::json& object, std::initializer_list<const char*> known,
                        const std::string& path) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool found = false;
    for (const char* name : known) found = found || it.key() == name;
    if (!found) return InvalidArgumentError("unknown field " + path + it.key());
  }
  return Status::Ok();
}

Status CheckFormatAndVersion(const nlohmann::json& doc, std::string_view format_name, int version) {
  auto format = doc.find("format");
  if (format == doc.end() || !format->is_string() || *format != format_name) {
    return InvalidArgumentError("field format must be \"" + std::string(format_name) + "\"");
  }
  auto found_version = doc.find("version");
  if (found_version == doc.end() || !found_version->is_number_integer()) {
    return InvalidArgumentError("missing integer field version");
  }
  if (found_version->get<int64_t>() != version) {
    return InvalidArgumentError("unsupported version " + found_version->dump() +
                                " (this build reads version " + std::to_string(version) + ")");
  }
  return Status::Ok();
}

namespace json_fields_internal {

Status WrongType(std::string_view name, const std::string& path, const char* kind) {
  return InvalidArgumentError("field " + path + std::string(name) + " must be " + kind);
}

Status OutOfRange(std::string_view name, const std::string& path) {
  return InvalidArgumentError("field " + path + std::string(name) + " is out of range");
}

bool AsInt64(const nlohmann::json& value, int64_t* out) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (value.is_number_integer()) {
    *out = value.get<int64_t>();
    return true;
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // 2^63 is the first double past int64's range; integral doubles below it convert exactly.
    if (std::isfinite(d) && std::floor(d) == d && std::abs(d) < 9.2e18) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}

}  // namespace json_fields_internal

namespace {

StatusOr<const nlohmann::json*> ReadRequiredOf(const nlohmann::json& object, std::string_view name,
                                               const std::string& path, bool array) {
  auto found = object.find(name);
  if (found == object.end() || found->is_null()) {
    return InvalidArgumentError("missing field " + path + std::string(name));
  }
  if (array ? !found->is_array() : !found->is_object()) {
    return json_fields_internal::WrongType(name, path, array ? "an array" : "an object");
  }
  return &*found;
}

}  // namespace

StatusOr<const nlohmann::json*> ReadRequiredObject(const nlohmann::json& object,
                                                   std::string_view name, const std::string& path) {
  return ReadRequiredOf(object, name, path, /*array=*/false);
}

StatusOr<const nlohmann::json*> ReadRequiredArray(const nlohmann::json& object,
                                                  std::string_view name, const std::string& path) {
  return ReadRequiredOf(object, name, path, /*array=*/true);
}

}  // namespace deepool
