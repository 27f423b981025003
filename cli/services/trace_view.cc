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
    std::string name = "rank " + std::to_string(rank.rank());
    const int track = static_cast<int>(timeline.tracks.size());
    timeline.tracks.push_back(rank.node_name().empty()
                                  ? name
                                  : name + " (" + rank.node_name() + " " + rank.device() + ")");
    int bg_track = -1;  // BG units run beside the FG rank's work: a track of their own
    for (const v1::TraceSpan& span : rank.spans()) {
      TimelineSpan out;
      StatusOr<SpanKind> kind = ParseSpanKind(span.kind());
      if (!kind.ok()) return kind.status().WithContext(name);
      out.kind = *kind;
      if (out.kind == SpanKind::kBackground && bg_track < 0) {
        bg_track = static_cast<int>(timeline.tracks.size());
        timeline.tracks.push_back(name + " BG");
      }
      out.track = out.kind == SpanKind::kBackground ? bg_track : track;
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

// One rank's line: its time by kind of span. Nested spans (a batch norm all-reduce inside its
// layer's forward) would count twice, so only outermost spans are summed; BG units, which run
// beside the FG work, are summed apart.
void SummarizeRank(const v1::RankTimeline& rank, std::ostream& out) {
  std::vector<const v1::TraceSpan*> spans;
  double bg_us = 0;
  for (const v1::TraceSpan& span : rank.spans()) {
    if (span.kind() == SpanKindName(SpanKind::kBackground)) {
      bg_us += span.duration_us();
    } else {
      spans.push_back(&span);
    }
  }
  std::sort(spans.begin(), spans.end(), [](const v1::TraceSpan* a, const v1::TraceSpan* b) {
    return a->start_us() < b->start_us();
  });
  std::map<std::string, double> time_us;
  double covered_until = -std::numeric_limits<double>::infinity(), summed = 0;
  const double first = spans.empty() ? 0 : spans.front()->start_us();
  double end = first;
  for (const v1::TraceSpan* span : spans) {
    if (span->start_us() < covered_until) continue;  // inside the previous span
    time_us[span->kind()] += span->duration_us();
    summed += span->duration_us();
    covered_until = span->start_us() + span->duration_us();
    end = std::max(end, covered_until);
  }
  const double total = end - first;
  out << "rank " << rank.rank() << ": iterations " << rank.first_iteration() << "-"
      << rank.first_iteration() + rank.iterations() - 1;
  if (rank.iterations() > 0) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.2f", total / 1000 / rank.iterations());
    out << ", " << ms << " ms each";
  }
  if (!rank.complete()) out << " (incomplete: its last part did not arrive)";
  out << "\n  ";
  for (const auto& [kind, us] : time_us) out << kind << " " << Percent(us, total) << ", ";
  out << "other " << Percent(std::max(0.0, total - summed), total);
  if (bg_us > 0) out << "; BG units " << Percent(bg_us, total) << " beside them";
  out << "\n";
}

}  // namespace

std::string TraceSummary(const v1::TraceJobResponse& trace) {
  std::ostringstream out;
  for (const v1::RankTimeline& rank : trace.ranks()) SummarizeRank(rank, out);
  const int answered = trace.ranks_size();
  if (answered < trace.world_size()) {
    out << "warning: " << trace.world_size() - answered << " of " << trace.world_size()
        << " ranks sent nothing before the timeout\n";
  }
  return out.str();
}

}  // namespace deepool::cli
