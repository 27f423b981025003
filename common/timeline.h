// Timelines of training iterations: spans of work on tracks (one track per rank), measured by the
// executors (`deepool trace`) or predicted by the cost model (`deepool plan --trace`), written in
// the Chrome trace event format that Perfetto and chrome://tracing open, or drawn as SVG.
//
// Both writers take the same Timeline, so a measured and a predicted timeline of one plan open
// side by side with the same tracks, categories and names.
// Threading: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deepool {

// What a span spends its time on. The names are the trace's categories ("cat").
enum class SpanKind {
  kForward,     // a layer's forward computation
  kBackward,    // a segment's (or layer's) backward computation
  kTransfer,    // posting re-split sends and receives of activations or their gradients
  kAllReduce,   // posting (or, predicted, running) a gradient or batch norm all-reduce
  kWait,        // the host waiting for a transfer or reduction: idle while it lasts
  kOptimizer,   // the optimizer step
  kData,        // loading and preparing the batch, the loss, bookkeeping
  kBackground,  // a BG job's unit of work on the rank's device
};
const char* SpanKindName(SpanKind kind);  // "forward", "backward", "transfer", ...
// The inverse of SpanKindName; INVALID_ARGUMENT for an unknown name.
StatusOr<SpanKind> ParseSpanKind(std::string_view name);

struct TimelineSpan {
  int track = 0;  // index into Timeline::tracks
  SpanKind kind = SpanKind::kForward;
  std::string name;        // e.g. "conv1", "layer3.0.conv2 + 2 more", "bucket 0 (4.0 MiB)"
  int64_t iteration = -1;  // the training iteration it belongs to; -1 when none
  double start_us = 0;     // from the timeline's origin (its earliest span starts at >= 0)
  double duration_us = 0;  // >= 0
};

struct Timeline {
  std::string title;                // e.g. "job j-12 iterations 40-44 (measured)"
  std::vector<std::string> tracks;  // track names, e.g. "rank 0 (node-a cuda:0)"
  std::vector<TimelineSpan> spans;  // any order
};

// The Chrome trace event format's JSON object form: {"traceEvents":[...],"displayTimeUnit":"ms",
// "otherData":{"title":...}}: one complete event ("ph":"X") per span with pid 0, tid = track,
// ts/dur in microseconds, cat = SpanKindName, args {"iteration":i}; thread_name metadata events
// name the tracks (every track, spans or not), and sort indices keep them in track order; a
// process_name event carries a non-empty title for the viewer. One event per line.
// docs/formats.md, "Timelines".
std::string TimelineToChromeTrace(const Timeline& timeline);

// Reads what TimelineToChromeTrace writes (and tolerates other events and fields, which it skips),
// so that `deepool trace --svg` can draw a trace file again: TimelineFromChromeTrace of
// TimelineToChromeTrace(t) equals t when t's spans are on its tracks. Also takes the format's bare
// array of events. Skipped: events of processes other than 0, phases other than "X" and thread_name
// metadata, unknown fields. Tracks are 0..max tid; one without a thread_name is "track N".
// INVALID_ARGUMENT naming the event for a span with an unknown cat, a tid outside [0, 65536), a
// missing, negative or non-numeric ts or dur, or a non-integer args.iteration.
StatusOr<Timeline> TimelineFromChromeTrace(std::string_view text);

// A picture of the timeline: one row per track, time along x with a labelled axis in ms, each
// span a rectangle coloured by its kind (a legend names the colours), its name as a tooltip
// (<title>) and, where wide enough, as text. Self-contained SVG 1.1; every span drawn is one
// <rect class="span">. At most 20000 spans (the longest) on the first 256 tracks are drawn; a note
// at the bottom says how many were left out.
std::string TimelineToSvg(const Timeline& timeline);

}  // namespace deepool
