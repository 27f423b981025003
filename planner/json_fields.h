// Checks shared by the planner's JSON readers (cluster and profile documents).
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace deepool::planner {

// Refuses fields a reader would silently ignore (a typo such as "bandwith_gbps"). `path` is
// prefixed to the field's name in the error ("layers[3].").
Status CheckKnownFields(const nlohmann::json& object, std::initializer_list<const char*> known,
                        const std::string& path);

// Checks a document's "format" (must equal format_name) and integer "version" (must equal
// version): the first thing every versioned deepool document carries.
Status CheckFormatAndVersion(const nlohmann::json& doc, std::string_view format_name, int version);

}  // namespace deepool::planner
