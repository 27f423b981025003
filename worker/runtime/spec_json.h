// JSON reading shared by the run spec and its background field: optional fields that name
// themselves when their type is wrong, and the optimizer object both carry.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "worker/runtime/optimizer.h"

namespace deepool::worker {

// Reads an optional field of `object` into `out`; `where` prefixes the field's name in errors
// (e.g. "optimizer."). Absent or null leaves `out` as it is.
template <typename T>
Status ReadSpecField(const nlohmann::json& object, const char* name, const std::string& where,
                     T& out) {
  auto found = object.find(name);
  if (found == object.end() || found->is_null()) return Status::Ok();
  try {
    out = found->get<T>();
  } catch (const nlohmann::json::exception&) {
    return InvalidArgumentError(where + name + " has the wrong type");
  }
  return Status::Ok();
}

// An optimizer object (name, lr, momentum, weight_decay, eps, betas); `where` ends in a dot,
// e.g. "background.optimizer.". Values are not validated here (ValidateOptimizer does that).
inline StatusOr<OptimizerSpec> ParseOptimizerJson(const nlohmann::json& doc,
                                                  const std::string& where) {
  if (!doc.is_object()) {
    return InvalidArgumentError(where.substr(0, where.size() - 1) + " must be an object");
  }
  OptimizerSpec spec;
  RETURN_IF_ERROR(ReadSpecField(doc, "name", where, spec.name));
  RETURN_IF_ERROR(ReadSpecField(doc, "lr", where, spec.lr));
  RETURN_IF_ERROR(ReadSpecField(doc, "momentum", where, spec.momentum));
  RETURN_IF_ERROR(ReadSpecField(doc, "weight_decay", where, spec.weight_decay));
  RETURN_IF_ERROR(ReadSpecField(doc, "eps", where, spec.eps));
  if (doc.contains("betas")) {
    const nlohmann::json& betas = doc["betas"];
    if (!betas.is_array() || betas.size() != 2 || !betas[0].is_number() || !betas[1].is_number()) {
      return InvalidArgumentError(where + "betas must be two numbers");
    }
    spec.betas = {betas[0].get<double>(), betas[1].get<double>()};
  }
  return spec;
}

}  // namespace deepool::worker
