// The run spec: everything one executor rank needs to train (docs/formats.md, "Run specs").
//   {"format":"deepool.run","version":1,"job_id":"...","graph":{graph doc},"plan":{plan doc},
//    "iterations":K,"seed":S,"optimizer":{...},"data":{...},"checkpoint":{"path":"FILE"}}
// Parsing validates the whole spec (the plan against the graph included) and names the field
// that is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "planner/graph.h"
#include "planner/plan.h"
#include "worker/runtime/background_spec.h"
#include "worker/runtime/data.h"
#include "worker/runtime/optimizer.h"

namespace deepool::worker {

inline constexpr int kRunSpecFormatVersion = 1;

struct RunSpec {
  std::string job_id;
  std::shared_ptr<const planner::Graph> graph;
  planner::Plan plan;
  int64_t iterations = 1;
  uint64_t seed = 0;  // weight initialisation
  OptimizerSpec optimizer;
  DataSpec data;
  std::optional<std::string> checkpoint_path;
  // A BG job sharing this rank's device (docs/multiplexing.md); the same for every rank that
  // gets one.
  std::optional<BackgroundSpec> background;
};

// Checks the spec's own fields and that the plan places exactly the graph's layers.
Status ValidateRunSpec(const RunSpec& spec);

StatusOr<RunSpec> ParseRunSpecJson(std::string_view text);
std::string RunSpecToJson(const RunSpec& spec, int indent = 2);

// Reads and parses a run spec file.
StatusOr<RunSpec> ReadRunSpecFile(const std::string& path);
Status WriteRunSpecFile(const RunSpec& spec, const std::string& path);

}  // namespace deepool::worker
