#include "planner/json_fields.h"

namespace deepool::planner {

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

}  // namespace deepool::planner
