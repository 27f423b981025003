// Importer for the reference A100 layer profiles published with DeepPool
// (../shared/profiles/deeppool-a100/*.prof; format and quirks in its README.md).
//
// Rows are matched to graph layers by op kind, parameters and input shape, never by name:
// every graph layer whose key equals a row's key takes that row's times (identical keys repeat
// in the files and are averaged). Quirks handled (docs/formats.md, "Profiles"):
//  - The backward time of a conv2d/linear is recorded on the in-place ReLU row right after it.
//    ParseProfRows moves it back: the ReLU keeps 1.5x its own forward time as its backward (an
//    elementwise backward reads two tensors and writes one, against one read and one write
//    forward) and the rest goes to the conv/linear, so the pair's sum is unchanged.
//  - `ResnetBottleneck` rows time a whole torchvision Bottleneck block. The importer finds such
//    blocks in the graph (a residual add, its trailing ReLU and everything back to the block's
//    entry) and splits the row's forward and backward time over the block's layers in proportion
//    to their forward FLOPs.
//  - Layers without a row (batch norm, concat, dropout, ...) are left out of the data and listed
//    in A100Import::unmatched_layers; TableProfile then reports them or uses a fallback.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "planner/graph.h"
#include "planner/profile_table.h"

namespace deepool::planner {

// One timed row of a `.prof` file.
struct ProfRow {
  int line = 0;             // 1-based line number in the file
  std::string kind;         // as written: "conv2d", "ReLU2d", "ResnetBottleneck", ...
  std::string params_json;  // the compact JSON object after the kind
  int64_t batch = 0;
  Shape input_shape;      // without the batch dimension
  double forward_ms = 0;  // after the backward-shift correction
  double backward_ms = 0;
  double raw_forward_ms = 0;  // as written in the file
  double raw_backward_ms = 0;
};

struct ProfFile {
  std::vector<ProfRow> rows;  // in file order
  // The file's whole-model line per batch ("SUM(avg) <ms>" or "sum: <ms>"), as written.
  std::map<int64_t, double> model_sum_ms;
};

// Parses the text; errors name the line. Applies the conv/linear backward-shift correction.
StatusOr<ProfFile> ParseProfFile(std::string_view text);

struct A100Import {
  ProfileData data;                           // matched layers, named by graph layer
  std::vector<std::string> unmatched_layers;  // graph layers no row matched, in graph order
  std::vector<std::string> block_layers;      // layers timed by a share of a block row
  int unused_row_keys = 0;                    // distinct row keys that matched no layer
};

// Matches the file's rows to `graph`. INVALID_ARGUMENT if the text does not parse or no row
// matches any layer (the wrong model); missing layers are not an error here.
StatusOr<A100Import> ImportA100Profile(std::string_view text, const Graph& graph);

}  // namespace deepool::planner
