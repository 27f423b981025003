// A background (BG) job attached to a foreground executor rank: the run spec's optional
// "background" field and the attach_background command's object (docs/multiplexing.md).
//   "background": {"job_id":"bg-1","graph":{graph doc},"batch_size":B,"iterations":K,"seed":S,
//                  "optimizer":{...},"data":{...},"ranks":[R,...],
//                  "sharing":{"mode":"idle_only"|"concurrent","priority_streams":true,
//                             "cuda_graphs":true,"idle_thread_priority":true,
//                             "max_fg_wait_ms":2,"unit_bound_fraction":0.25,"split_units":true},
//                  "checkpoint":{"dir":"DIR","every_iterations":N,"every_seconds":T,"keep":K},
//                  "precision":"bf16"}
// iterations 0 (the default) means: train until the FG job finishes. The BG job never outlives
// the FG rank it is attached to; with "checkpoint" it keeps periodic checkpoints in the format
// of a one-rank job's, and resumes from the newest one wherever it is placed next.
// Threading: plain values and pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"
#include "planner/precision.h"
#include "protocol/training_spec.h"

namespace deepool::protocol {

// How an FG rank and a BG job share a device (worker/runtime/background/multiplex_gate.h says what
// each mode does).
enum class SharingMode { kIdleOnly, kConcurrent };

StatusOr<SharingMode> ParseSharingMode(std::string_view text);  // "idle_only", "concurrent"
std::string SharingModeName(SharingMode mode);

// How the BG job shares the device. Each technique can be switched off for comparison.
struct SharingOptions {
  // idle_only on CPU devices; on CUDA the default is concurrent (stream priorities arbitrate).
  std::optional<SharingMode> mode;
  bool priority_streams = true;  // CUDA: FG on a high-priority stream, BG on a low-priority one
  bool cuda_graphs = true;       // CUDA: capture the BG iteration once, then replay it
  // The BG thread runs under the OS's idle scheduling class (Linux SCHED_IDLE): every other
  // thread of the FG rank, the communication library's included, preempts it at once.
  bool idle_thread_priority = true;
  // idle_only: the longest an FG rank whose wait ended waits for the BG unit in progress; past
  // it the FG rank computes beside the unit (which the OS then preempts under SCHED_IDLE).
  double max_fg_wait_ms = 2;
  // idle_only: BG units are kept no longer than this share of the FG rank's typical idle gap
  // (DeviceGate::UnitBoundMs) by splitting the BG batch into micro-batches ...
  double unit_bound_fraction = 0.25;
  // ... when this is true and the model has no batch norm (splitting a batch-norm model would
  // change its statistics, so such a model keeps whole units and relies on max_fg_wait_ms).
  bool split_units = true;
  bool operator==(const SharingOptions& o) const {
    return mode == o.mode && priority_streams == o.priority_streams &&
           cuda_graphs == o.cuda_graphs && idle_thread_priority == o.idle_thread_priority &&
           max_fg_wait_ms == o.max_fg_wait_ms && unit_bound_fraction == o.unit_bound_fraction &&
           split_units == o.split_units;
  }
  // The mode to use on a device: the explicit one, else idle_only on CPU, concurrent on CUDA.
  SharingMode ModeFor(bool cuda) const {
    return mode ? *mode : (cuda ? SharingMode::kConcurrent : SharingMode::kIdleOnly);
  }
};

struct BackgroundSpec {
  std::string job_id;
  std::shared_ptr<const planner::Graph> graph;
  int64_t batch_size = 1;
  int64_t iterations = 0;  // 0: until the FG job ends
  uint64_t seed = 0;       // weight initialisation
  OptimizerSpec optimizer;
  DataSpec data;
  SharingOptions sharing;
  // The FG ranks whose devices run a copy of this BG job; empty: every rank. (All ranks read the
  // same run spec, so a BG job meant for one device names its rank.)
  std::vector<int> ranks;
  std::optional<PeriodicCheckpoints> checkpoints;
  // "precision": what the BG job trains at, its own whatever its host's (planner/precision.h;
  // docs/runtime.md, "Precision"); written only when not fp32, as the run spec's.
  planner::Precision precision = planner::Precision::kFp32;
  bool SharesRank(int rank) const {
    return ranks.empty() || std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
  }
};

// Errors name the field ("background.batch_size must be >= 1").
Status ValidateBackgroundSpec(const BackgroundSpec& spec);

// Parses and validates the "background" object.
StatusOr<BackgroundSpec> ParseBackgroundJson(const nlohmann::json& doc);
nlohmann::json BackgroundToJson(const BackgroundSpec& spec);
// The same writer, embedding the graph document `graph_json` (as a planner wrote it; see
// PlannedDocuments in run_spec.h) in place of spec.graph (not read).
nlohmann::json BackgroundToJson(const BackgroundSpec& spec, std::string_view graph_json);

}  // namespace deepool::protocol
