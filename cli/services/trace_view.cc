#include "cli/services/trace_view.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

namespace deepool::cli {

StatusOr<Timeline> TimelineOfTrace(const v1::TraceJobResponse& trace) {
  Timeline timeline;
  const int64_t last = trace.first_iteration() + trace.iterations() - 1;
  timeline.title = "job " + trace.job_id() + " iterations " +
                   std::to_string(trace.first_iteration()) + "-" + std::to_string(last) +
                   " (measured)";
  double origin = std::numeric_limits<double>::infinity();
  for (const v1::RankTimeline& rank : trace.ranks()) {
    for (const v1::TraceSpan& span : rank.spans()) origin = std::min(origin, span.start_us());
  }
  for (const v1::RankTimeline& rank : trace.ranks()) {
    const int track = static_cast<int>(timeline.tracks.size());
    std::string name = "rank " + std::to_string(rank.rank());
    if (!rank.node_name().empty()) name += " (" + rank.node_name() + " " + rank.device() + ")";
    timeline.tracks.push_back(name);
    for (const v1::TraceSpan& span : rank.spans()) {
      TimelineSpan out;
      out.track = track;
      StatusOr<SpanKind> kind = ParseSpanKind(span.kind());
      if (!kind.ok()) return kind.status().WithContext("rank " + std::to_string(rank.rank()));
      out.kind = *kind;
      out.name = span.name();
      out.iteration = span.iteration();
      out.start_us = span.start_us() - origin;
      out.duration_us = std::max(0.0, span.duration_us());
      timeline.spans.push_back(std::move(out));
    }
  }
  return timeline;
}

namespace {

std::string Percent(double part, double whole) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.0f%%", whole > 0 ? 100 * part / whole : 0.0);
  return buffer;
}

}  // namespace

std::string TraceSummary(const v1::TraceJobResponse& trace, const Timeline& timeline) {
  std::ostringstream out;
  // Nested spans (a batch norm all-reduce inside its layer's forward) would count twice: only
  // top-level spans are summed, taken in start order per track.
  std::vector<std::vector<const TimelineSpan*>> by_track(timeline.tracks.size());
  for (const TimelineSpan& span : timeline.spans) {
    by_track[static_cast<size_t>(span.track)].push_back(&span);
  }
  for (size_t t = 0; t < by_track.size(); ++t) {
    const v1::RankTimeline& rank = trace.ranks(static_cast<int>(t));
    auto& spans = by_track[t];
    std::sort(spans.begin(), spans.end(), [](const TimelineSpan* a, const TimelineSpan* b) {
      return a->start_us < b->start_us;
    });
    std::map<SpanKind, double> time_us;
    double covered_until = -1, first = 0, end = 0;
    for (const TimelineSpan* span : spans) {
      if (span->start_us < covered_until) continue;  // inside the previous span
      time_us[span->kind] += span->duration_us;
      covered_until = span->start_us + span->duration_us;
      if (span == spans.front()) first = span->start_us;
      end = std::max(end, covered_until);
    }
    const double total = end - first;
    out << timeline.tracks[t] << ": iterations " << rank.first_iteration() << "-"
        << rank.first_iteration() + rank.iterations() - 1;
    if (rank.iterations() > 0) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.2f", total / 1000 / rank.iterations());
      out << ", " << ms << " ms each";
    }
    if (!rank.complete()) out << " (incomplete: its last part did not arrive)";
    out << "\n  ";
    bool first_kind = true;
    for (const auto& [kind, us] : time_us) {
      out << (first_kind ? "" : ", ") << SpanKindName(kind) << " " << Percent(us, total);
      first_kind = false;
    }
    double summed = 0;
    for (const auto& entry : time_us) summed += entry.second;
    out << ", other " << Percent(std::max(0.0, total - summed), total) << "\n";
  }
  const int answered = trace.ranks_size();
  if (answered < trace.world_size()) {
    out << "warning: " << trace.world_size() - answered << " of " << trace.world_size()
        << " ranks sent nothing before the timeout\n";
  }
  return out.str();
}

}  // namespace deepool::cli
