// Reading fields of JSON documents (specs, profiles, clusters, plans, events) with errors that
// name the field: the one set of readers every deepool document parser uses.
//
// `path` is what comes before the field's name in messages ("" at the top level, "layers[3]."
// or "optimizer." further down). Messages read "missing field layers[3].name", "field lr must
// be a number", "unknown field bandwith_gbps"; all errors are INVALID_ARGUMENT.
// Integer fields accept JSON integers and integral floats (8.0, as some writers print them) and
// refuse values outside the target type's range.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/status.h"

namespace deepool {

// No deepool document nests deeper than about 10 levels. Outside input nested deeper than this is
// refused before it is parsed: printing or walking it would recurse that deep and overflow the
// stack.
inline constexpr int kMaxJsonDepth = 100;

// Parses a document that came from outside. Errors (INVALID_ARGUMENT) read "<what>: not valid
// JSON at line 3, column 7: syntax error ...", "<what>: duplicate key "gpus" at line 9, column 3
// (...)" or "<what>: nested deeper than 100 levels". A key repeated in one object is refused
// rather than settled silently (nlohmann keeps the last). Columns count UTF-8 code points.
StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view what);

// Refuses fields a reader would silently ignore (a typo such as "bandwith_gbps").
Status CheckKnownFields(const nlohmann::json& object, std::initializer_list<const char*> known,
                        const std::string& path);

// Checks a document's "format" (must equal format_name) and integer "version" (must equal
// version): the first thing every versioned deepool document carries.
Status CheckFormatAndVersion(const nlohmann::json& doc, std::string_view format_name, int version);
// The same for a reader of several versions: the version must be in [oldest, newest]. Returns
// the document's version.
StatusOr<int> CheckFormatAndVersionRange(const nlohmann::json& doc, std::string_view format_name,
                                         int oldest, int newest);

namespace json_fields_internal {

Status WrongType(std::string_view name, const std::string& path, const char* kind);
Status OutOfRange(std::string_view name, const std::string& path);
// Any JSON number with an integral value that fits in int64 (8 and 8.0; not 8.5 or 1e300).
bool AsInt64(const nlohmann::json& value, int64_t* out);

// Converts one present, non-null value to T, naming the field on a type mismatch.
template <typename T>
Status Convert(const nlohmann::json& value, std::string_view name, const std::string& path,
               T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) return WrongType(name, path, "true or false");
    *out = value.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    int64_t v = 0;
    if (!AsInt64(value, &v)) return WrongType(name, path, "an integer");
    bool fits;
    if constexpr (std::is_unsigned_v<T>) {
      fits = v >= 0 && static_cast<uint64_t>(v) <= std::numeric_limits<T>::max();
    } else {
      fits = v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max();
    }
    if (!fits) return OutOfRange(name, path);
    *out = static_cast<T>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!value.is_number()) return WrongType(name, path, "a number");
    *out = value.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) return WrongType(name, path, "a string");
    *out = value.get<std::string>();
  } else {
    static_assert(!sizeof(T), "ReadOptionalField: unsupported field type");
  }
  return Status::Ok();
}

}  // namespace json_fields_internal

// An optional field: absent or null leaves `*out` as it is (so it keeps its default).
// T is bool, an integer type, a floating-point type or std::string.
template <typename T>
Status ReadOptionalField(const nlohmann::json& object, std::string_view name,
                         const std::string& path, T* out) {
  auto found = object.find(name);
  if (found == object.end() || found->is_null()) return Status::Ok();
  return json_fields_internal::Convert(*found, name, path, out);
}

// A required field: absent or null is "missing field <path><name>".
template <typename T>
StatusOr<T> ReadRequiredField(const nlohmann::json& object, std::string_view name,
                              const std::string& path) {
  auto found = object.find(name);
  if (found == object.end() || found->is_null()) {
    return InvalidArgumentError("missing field " + path + std::string(name));
  }
  T value{};
  RETURN_IF_ERROR(json_fields_internal::Convert(*found, name, path, &value));
  return value;
}

// A required object or array field, returned in place. "missing field ..." when absent,
// "field ... must be an object/an array" for another type.
StatusOr<const nlohmann::json*> ReadRequiredObject(const nlohmann::json& object,
                                                   std::string_view name, const std::string& path);
StatusOr<const nlohmann::json*> ReadRequiredArray(const nlohmann::json& object,
                                                  std::string_view name, const std::string& path);

// A required array whose elements are all T (as ReadOptionalField's types): "missing field ...",
// "field <path><name> must be an array", "field <path><name>[i] must be an integer".
template <typename T>
StatusOr<std::vector<T>> ReadRequiredList(const nlohmann::json& object, std::string_view name,
                                          const std::string& path) {
  ASSIGN_OR_RETURN(const nlohmann::json* array, ReadRequiredArray(object, name, path));
  std::vector<T> values(array->size());
  for (size_t i = 0; i < array->size(); ++i) {
    const std::string element = std::string(name) + "[" + std::to_string(i) + "]";
    RETURN_IF_ERROR(json_fields_internal::Convert((*array)[i], element, path, &values[i]));
  }
  return values;
}

}  // namespace deepool
