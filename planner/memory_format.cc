#include "planner/memory_format.h"

#include <algorithm>
#include <string>

namespace deepool::planner {

const char* MemoryFormatName(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::kAuto:
      return "auto";
    case MemoryFormat::kContiguous:
      return "contiguous";
    case MemoryFormat::kChannelsLast:
      return "channels_last";
  }
  return "auto";
}

StatusOr<MemoryFormat> ParseMemoryFormat(std::string_view name) {
  for (MemoryFormat format :
       {MemoryFormat::kAuto, MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
    if (name == MemoryFormatName(format)) return format;
  }
  return InvalidArgumentError("unknown memory format \"" + std::string(name) +
                              "\" (auto, contiguous or channels_last)");
}

bool HasConvolutions(const Graph& graph) {
  return std::any_of(graph.layers().begin(), graph.layers().end(),
                     [](const Layer& layer) { return layer.op == Op::kConv2d; });
}

MemoryFormat ResolveMemoryFormat(MemoryFormat requested, bool cuda, Precision precision,
                                 const Graph& graph) {
  if (requested != MemoryFormat::kAuto) return requested;
  const bool half = precision == Precision::kBf16 || precision == Precision::kFp16;
  return cuda && half && HasConvolutions(graph) ? MemoryFormat::kChannelsLast
                                                : MemoryFormat::kContiguous;
}

}  // namespace deepool::planner
