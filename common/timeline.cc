// Chrome trace JSON and SVG writers for timelines, and the trace reader (see timeline.h).
#include "common/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/json_fields.h"
#include "common/xml_text.h"

namespace deepool {
namespace {

using nlohmann::json;

constexpr SpanKind kAllKinds[] = {SpanKind::kForward,   SpanKind::kBackward,  SpanKind::kTransfer,
                                  SpanKind::kAllReduce, SpanKind::kWait,      SpanKind::kOptimizer,
                                  SpanKind::kData,      SpanKind::kBackground};

// A trace names its tracks by thread id; an id this large is a broken or hostile file, and
// honouring it would allocate that many track names.
constexpr int64_t kMaxTracks = 1 << 16;

// Names and titles may carry invalid UTF-8 (layer names come from user files): replace rather
// than throw, as protocol/ does.
std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// ---- SVG ----

// Layout in pixels. Text width is estimated at kCharWidth per character (11px sans-serif):
// good enough to decide whether a name fits in its rectangle.
constexpr double kWidth = 1200;
constexpr double kRowHeight = 20;
constexpr double kRowGap = 4;
constexpr double kTop = 64;
constexpr double kRight = 24;
constexpr double kCharWidth = 6.5;
// Beyond these the picture becomes unreadable and slow to open; the longest spans and the first
// tracks are drawn and a note says what was left out.
constexpr size_t kMaxSvgSpans = 20000;
constexpr size_t kMaxSvgTracks = 256;

const char* KindColour(SpanKind kind) {
  switch (kind) {
    case SpanKind::kForward:
      return "#4e79a7";
    case SpanKind::kBackward:
      return "#f28e2b";
    case SpanKind::kTransfer:
      return "#59a14f";
    case SpanKind::kAllReduce:
      return "#e15759";
    case SpanKind::kWait:
      return "#bab0ac";
    case SpanKind::kOptimizer:
      return "#b07aa1";
    case SpanKind::kData:
      return "#edc948";
    case SpanKind::kBackground:
      return "#9c755f";
  }
  return "#000000";
}

// Names drawn on a span: white on the dark colours, dark on the light ones.
const char* TextColour(SpanKind kind) {
  return kind == SpanKind::kWait || kind == SpanKind::kData ? "#222222" : "#ffffff";
}

// At most `chars` bytes of `text`, ending in ".." when cut; never cuts a UTF-8 sequence apart.
std::string Truncate(const std::string& text, size_t chars) {
  if (text.size() <= chars) return text;
  if (chars <= 2) return "";
  size_t end = chars - 2;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "..";
}

std::string Number(double value, int decimals = 2) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

// A round tick step (1, 2 or 5 x 10^k) giving about `ticks` ticks over `range`.
double TickStep(double range, int ticks) {
  const double raw = range / ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0}) {
    if (factor * magnitude >= raw) return factor * magnitude;
  }
  return 10 * magnitude;
}

// Decimals that show a tick step exactly enough: 0 for 5 ms, 1 for 0.5 ms, 2 for 0.02 ms.
int StepDecimals(double step) {
  return std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 6);
}

}  // namespace

const char* SpanKindName(SpanKind kind) {
  switch (kind) {
    case SpanKind::kForward:
      return "forward";
    case SpanKind::kBackward:
      return "backward";
    case SpanKind::kTransfer:
      return "transfer";
    case SpanKind::kAllReduce:
      return "all-reduce";
    case SpanKind::kWait:
      return "wait";
    case SpanKind::kOptimizer:
      return "optimizer";
    case SpanKind::kData:
      return "data";
    case SpanKind::kBackground:
      return "background";
  }
  return "unknown";
}

StatusOr<SpanKind> ParseSpanKind(std::string_view name) {
  for (SpanKind kind : kAllKinds) {
    if (name == SpanKindName(kind)) return kind;
  }
  std::string known;
  for (SpanKind kind : kAllKinds)
    known += std::string(known.empty() ? "" : ", ") + SpanKindName(kind);
  return InvalidArgumentError("unknown span kind '" + std::string(name) + "' (known: " + known +
                              ")");
}

std::string TimelineToChromeTrace(const Timeline& timeline) {
  // One event per line: a trace of thousands of spans stays readable and diffable.
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  auto add = [&out, &first](const json& event) {
    if (!first) out += ",\n";
    first = false;
    out += Dump(event);
  };
  if (!timeline.title.empty()) {
    add({{"name", "process_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", 0},
         {"args", {{"name", timeline.title}}}});
  }
  for (size_t track = 0; track < timeline.tracks.size(); ++track) {
    add({{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", track},
         {"args", {{"name", timeline.tracks[track]}}}});
    // Perfetto otherwise orders threads by id as it likes; the index keeps rank order.
    add({{"name", "thread_sort_index"},
         {"ph", "M"},
         {"pid", 0},
         {"tid", track},
         {"args", {{"sort_index", track}}}});
  }
  for (const TimelineSpan& span : timeline.spans) {
    add({{"name", span.name},
         {"cat", SpanKindName(span.kind)},
         {"ph", "X"},
         {"pid", 0},
         {"tid", span.track},
         {"ts", span.start_us},
         {"dur", span.duration_us},
         {"args", {{"iteration", span.iteration}}}});
  }
  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
  out += Dump(json{{"title", timeline.title}});
  out += "}\n";
  return out;
}

StatusOr<Timeline> TimelineFromChromeTrace(std::string_view text) {
  ASSIGN_OR_RETURN(const json doc, ParseJson(text, "trace"));
  // The format also allows a bare array of events.
  const json* events = &doc;
  Timeline timeline;
  if (doc.is_object()) {
    auto found = doc.find("traceEvents");
    if (found == doc.end() || !found->is_array()) {
      return InvalidArgumentError("trace: missing array field traceEvents");
    }
    events = &*found;
    auto other = doc.find("otherData");
    if (other != doc.end() && other->is_object()) {
      auto title = other->find("title");
      if (title != other->end() && title->is_string()) timeline.title = title->get<std::string>();
    }
  } else if (!doc.is_array()) {
    return InvalidArgumentError("trace: expected an object with traceEvents or an array of events");
  }

  std::map<int64_t, std::string> track_names;
  int64_t num_tracks = 0;
  for (size_t i = 0; i < events->size(); ++i) {
    const json& event = (*events)[i];
    const std::string where = "trace: traceEvents[" + std::to_string(i) + "]";
    if (!event.is_object()) return InvalidArgumentError(where + ": not an object");
    // Only process 0's events are deepool's tracks; other processes' events are skipped.
    auto pid = event.find("pid");
    if (pid != event.end() && !(pid->is_number_integer() && pid->get<int64_t>() == 0)) continue;
    auto ph = event.find("ph");
    if (ph == event.end() || !ph->is_string()) continue;
    const std::string phase = ph->get<std::string>();
    auto name = event.find("name");
    const bool is_thread_name = phase == "M" && name != event.end() && *name == "thread_name";
    if (phase != "X" && !is_thread_name) continue;

    auto tid = event.find("tid");
    if (tid == event.end() || !tid->is_number_integer() || tid->get<int64_t>() < 0 ||
        tid->get<int64_t>() >= kMaxTracks) {
      return InvalidArgumentError(where + ": tid must be an integer in [0, " +
                                  std::to_string(kMaxTracks) + ")");
    }
    const int64_t track = tid->get<int64_t>();
    num_tracks = std::max(num_tracks, track + 1);
    if (is_thread_name) {
      auto args = event.find("args");
      if (args != event.end() && args->is_object()) {
        auto track_name = args->find("name");
        if (track_name != args->end() && track_name->is_string()) {
          track_names[track] = track_name->get<std::string>();
        }
      }
      continue;
    }

    TimelineSpan span;
    span.track = static_cast<int>(track);
    if (name != event.end()) {
      if (!name->is_string()) return InvalidArgumentError(where + ": name must be a string");
      span.name = name->get<std::string>();
    }
    auto cat = event.find("cat");
    if (cat == event.end() || !cat->is_string()) {
      return InvalidArgumentError(where + ": missing string field cat");
    }
    StatusOr<SpanKind> kind = ParseSpanKind(cat->get<std::string>());
    if (!kind.ok()) return kind.status().WithContext(where);
    span.kind = *kind;
    auto ts = event.find("ts");
    auto dur = event.find("dur");
    if (ts == event.end() || !ts->is_number() || dur == event.end() || !dur->is_number()) {
      return InvalidArgumentError(where + ": a complete event needs numbers ts and dur");
    }
    span.start_us = ts->get<double>();
    span.duration_us = dur->get<double>();
    if (!std::isfinite(span.start_us) || !std::isfinite(span.duration_us) || span.start_us < 0 ||
        span.duration_us < 0) {
      return InvalidArgumentError(where + ": ts and dur must be finite and >= 0");
    }
    auto args = event.find("args");
    if (args != event.end() && args->is_object()) {
      auto iteration = args->find("iteration");
      if (iteration != args->end()) {
        if (!iteration->is_number_integer()) {
          return InvalidArgumentError(where + ": args.iteration must be an integer");
        }
        span.iteration = iteration->get<int64_t>();
      }
    }
    timeline.spans.push_back(std::move(span));
  }

  timeline.tracks.resize(static_cast<size_t>(num_tracks));
  for (int64_t track = 0; track < num_tracks; ++track) {
    auto found = track_names.find(track);
    timeline.tracks[static_cast<size_t>(track)] =
        found != track_names.end() ? found->second : "track " + std::to_string(track);
  }
  return timeline;
}

std::string TimelineToSvg(const Timeline& timeline) {
  const size_t num_tracks = std::min(timeline.tracks.size(), kMaxSvgTracks);
  // The spans to draw: on a drawn track, the longest kMaxSvgSpans of them.
  std::vector<const TimelineSpan*> spans;
  size_t off_tracks = 0;
  for (const TimelineSpan& span : timeline.spans) {
    if (span.track >= 0 && static_cast<size_t>(span.track) < num_tracks) {
      spans.push_back(&span);
    } else {
      ++off_tracks;
    }
  }
  size_t too_short = 0;
  if (spans.size() > kMaxSvgSpans) {
    std::stable_sort(spans.begin(), spans.end(), [](const TimelineSpan* a, const TimelineSpan* b) {
      return a->duration_us > b->duration_us;
    });
    too_short = spans.size() - kMaxSvgSpans;
    spans.resize(kMaxSvgSpans);
  }

  double begin_us = 0;
  double end_us = 0;
  for (const TimelineSpan* span : spans) {
    begin_us = std::min(begin_us, span->start_us);
    end_us = std::max(end_us, span->start_us + span->duration_us);
  }
  if (end_us <= begin_us) end_us = begin_us + 1000;  // an empty timeline still gets an axis
  const double range_ms = (end_us - begin_us) / 1000.0;

  size_t longest_track = 0;
  for (size_t t = 0; t < num_tracks; ++t) {
    longest_track = std::max(longest_track, timeline.tracks[t].size());
  }
  const size_t track_chars = std::min<size_t>(longest_track, 36);
  const double left = std::max(60.0, static_cast<double>(track_chars) * kCharWidth + 16);
  const double plot_width = kWidth - left - kRight;
  const double rows_bottom = kTop + static_cast<double>(num_tracks) * (kRowHeight + kRowGap);
  const double axis_y = rows_bottom + 4;
  const bool has_note = off_tracks > 0 || too_short > 0;
  const double height = axis_y + 40 + (has_note ? 18 : 0);
  auto x_of = [&](double us) { return left + (us - begin_us) / (end_us - begin_us) * plot_width; };

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" << Number(kWidth, 0)
      << "\" height=\"" << Number(height, 0) << "\" viewBox=\"0 0 " << Number(kWidth, 0) << ' '
      << Number(height, 0) << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect x=\"0\" y=\"0\" width=\"" << Number(kWidth, 0) << "\" height=\""
      << Number(height, 0) << "\" fill=\"#ffffff\"/>\n";
  svg << "<text x=\"" << Number(left, 1) << "\" y=\"20\" font-size=\"14\">"
      << XmlEscape(timeline.title.empty() ? "timeline" : timeline.title) << "</text>\n";

  // Legend: the kinds that occur (all of them for an empty timeline), in enum order.
  bool present[std::size(kAllKinds)] = {};
  for (const TimelineSpan* span : spans) present[static_cast<size_t>(span->kind)] = true;
  const bool any = std::any_of(std::begin(present), std::end(present), [](bool p) { return p; });
  double legend_x = left;
  svg << "<g class=\"legend\">\n";
  for (SpanKind kind : kAllKinds) {
    if (any && !present[static_cast<size_t>(kind)]) continue;
    const std::string label = SpanKindName(kind);
    svg << "<rect x=\"" << Number(legend_x, 1) << "\" y=\"32\" width=\"10\" height=\"10\" fill=\""
        << KindColour(kind) << "\"/><text x=\"" << Number(legend_x + 14, 1) << "\" y=\"41\">"
        << label << "</text>\n";
    legend_x += 14 + static_cast<double>(label.size()) * kCharWidth + 16;
  }
  svg << "</g>\n";

  // Time axis with round ticks and grid lines through the rows.
  const double step_ms = TickStep(range_ms, 8);
  const int decimals = StepDecimals(step_ms);
  svg << "<g class=\"axis\" stroke=\"#888888\" stroke-width=\"0.5\">\n"
      << "<line x1=\"" << Number(left, 1) << "\" y1=\"" << Number(axis_y, 1) << "\" x2=\""
      << Number(left + plot_width, 1) << "\" y2=\"" << Number(axis_y, 1) << "\"/>\n";
  const double first_tick = std::ceil(begin_us / 1000.0 / step_ms) * step_ms;
  std::ostringstream labels;
  for (int i = 0;; ++i) {
    const double tick_ms = first_tick + i * step_ms;
    if (tick_ms * 1000.0 > end_us + 1e-9 * (end_us - begin_us)) break;
    const double x = x_of(tick_ms * 1000.0);
    svg << "<line x1=\"" << Number(x, 1) << "\" y1=\"" << Number(kTop - 2, 1) << "\" x2=\""
        << Number(x, 1) << "\" y2=\"" << Number(axis_y + 4, 1) << "\" stroke-opacity=\""
        << (i == 0 && tick_ms == 0 ? "1" : "0.3") << "\"/>\n";
    labels << "<text x=\"" << Number(x, 1) << "\" y=\"" << Number(axis_y + 16, 1)
           << "\" text-anchor=\"middle\">" << Number(tick_ms, decimals) << "</text>\n";
  }
  svg << "</g>\n<g class=\"axis-labels\" fill=\"#333333\">\n"
      << labels.str() << "<text x=\"" << Number(left + plot_width, 1) << "\" y=\""
      << Number(axis_y + 32, 1) << "\" text-anchor=\"end\">time (ms)</text>\n</g>\n";

  // Track names and row backgrounds.
  svg << "<g class=\"tracks\">\n";
  for (size_t t = 0; t < num_tracks; ++t) {
    const double y = kTop + static_cast<double>(t) * (kRowHeight + kRowGap);
    svg << "<rect x=\"" << Number(left, 1) << "\" y=\"" << Number(y, 1) << "\" width=\""
        << Number(plot_width, 1) << "\" height=\"" << Number(kRowHeight, 0) << "\" fill=\""
        << (t % 2 == 0 ? "#f4f4f4" : "#fafafa") << "\"/><text x=\"" << Number(left - 8, 1)
        << "\" y=\"" << Number(y + 14, 1) << "\" text-anchor=\"end\">"
        << XmlEscape(Truncate(timeline.tracks[t], track_chars)) << "</text>\n";
  }
  svg << "</g>\n";

  // Spans: a rectangle each (at least half a pixel wide, so short ones still show; a thin white
  // outline separates neighbours of one kind), a tooltip, and the name inside when it fits, or
  // enough of it to recognise.
  svg << "<g class=\"spans\" stroke=\"#ffffff\" stroke-width=\"0.5\">\n";
  for (const TimelineSpan* span : spans) {
    const double x = x_of(span->start_us);
    const double width = std::max(0.5, x_of(span->start_us + span->duration_us) - x);
    const double y = kTop + span->track * (kRowHeight + kRowGap);
    svg << "<g><rect class=\"span\" x=\"" << Number(x, 2) << "\" y=\"" << Number(y, 1)
        << "\" width=\"" << Number(width, 2) << "\" height=\"" << Number(kRowHeight, 0)
        << "\" fill=\"" << KindColour(span->kind) << "\"/><title>"
        << XmlEscape(span->name.empty() ? "(unnamed)" : span->name) << " ("
        << SpanKindName(span->kind) << "): " << Number(span->duration_us / 1000.0, 3) << " ms at "
        << Number(span->start_us / 1000.0, 3) << " ms";
    if (span->iteration >= 0) svg << ", iteration " << span->iteration;
    svg << "</title>";
    const double fits = std::floor((width - 6) / kCharWidth);
    if (!span->name.empty() && (fits >= static_cast<double>(span->name.size()) || fits >= 8)) {
      svg << "<text x=\"" << Number(x + 3, 2) << "\" y=\"" << Number(y + 14, 1)
          << "\" stroke=\"none\" fill=\"" << TextColour(span->kind) << "\">"
          << XmlEscape(Truncate(span->name, static_cast<size_t>(fits))) << "</text>";
    }
    svg << "</g>\n";
  }
  svg << "</g>\n";

  if (has_note) {
    std::string note = "not drawn:";
    if (too_short > 0) note += " the " + std::to_string(too_short) + " shortest spans";
    if (too_short > 0 && off_tracks > 0) note += " and";
    if (off_tracks > 0) {
      note += " " + std::to_string(off_tracks) + " spans on tracks beyond the first " +
              std::to_string(num_tracks);
    }
    svg << "<text x=\"" << Number(left, 1) << "\" y=\"" << Number(height - 8, 1)
        << "\" fill=\"#aa0000\">" << XmlEscape(note) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace deepool
