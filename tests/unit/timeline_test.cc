// Timelines: span kind names, the Chrome trace writer and reader (round trip, documented fields,
// tolerated and refused input) and the SVG writer (well-formed, one rectangle per span, escaping,
// the cap on spans).
#include "common/timeline.h"

#include <catch2/catch.hpp>
#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace deepool {
namespace {

using nlohmann::json;

constexpr SpanKind kKinds[] = {SpanKind::kForward,   SpanKind::kBackward,  SpanKind::kTransfer,
                               SpanKind::kAllReduce, SpanKind::kWait,      SpanKind::kOptimizer,
                               SpanKind::kData,      SpanKind::kBackground};

Timeline Sample() {
  Timeline timeline;
  timeline.title = "job \"j-1\" <iterations 3-4> & more";
  timeline.tracks = {"rank 0 (node-a cuda:0)", "rank 1 \xc3\xa9t\xc3\xa9", "idle rank"};
  auto span = [&timeline](int track, SpanKind kind, std::string name, int64_t iteration,
                          double start_us, double duration_us) {
    timeline.spans.push_back({track, kind, std::move(name), iteration, start_us, duration_us});
  };
  span(0, SpanKind::kForward, "conv1", 3, 0, 1250.5);
  span(1, SpanKind::kForward, "conv1", 3, 0, 1250.5);
  span(0, SpanKind::kTransfer, "a<b&c \"quoted\"", 3, 1250.5, 0.1);
  span(0, SpanKind::kAllReduce, "bucket 0 (4.0 MiB)", 3, 1250.6, 333.333333333);
  span(1, SpanKind::kWait, "", -1, 1250.6, 0);
  span(0, SpanKind::kBackground, "bg job j-2", -1, 1583.933333333, 17.25);
  span(1, SpanKind::kOptimizer, "sgd", 4, 2000, 1e-3);
  span(0, SpanKind::kData, "batch", 4, 1e7, 12345.678901234);
  span(1, SpanKind::kBackward, "layer3.0.conv2 + 2 more", 4, 1e7 + 1, 99);
  return timeline;
}

void CheckSameTimeline(const Timeline& a, const Timeline& b) {
  CHECK(a.title == b.title);
  CHECK(a.tracks == b.tracks);
  REQUIRE(a.spans.size() == b.spans.size());
  for (size_t i = 0; i < a.spans.size(); ++i) {
    INFO("span " << i);
    CHECK(a.spans[i].track == b.spans[i].track);
    CHECK(a.spans[i].kind == b.spans[i].kind);
    CHECK(a.spans[i].name == b.spans[i].name);
    CHECK(a.spans[i].iteration == b.spans[i].iteration);
    CHECK(a.spans[i].start_us == b.spans[i].start_us);
    CHECK(a.spans[i].duration_us == b.spans[i].duration_us);
  }
}

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++count;
  }
  return count;
}

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' ||
         c == '.';
}

// Character data and attribute values: no '<', and every '&' starts a predefined entity.
std::string CheckText(const std::string& text) {
  if (text.find('<') != std::string::npos) return "raw '<' in \"" + text + "\"";
  for (size_t at = text.find('&'); at != std::string::npos; at = text.find('&', at + 1)) {
    bool known = false;
    for (const char* entity : {"&lt;", "&gt;", "&amp;", "&quot;", "&apos;"}) {
      known = known || text.compare(at, std::string(entity).size(), entity) == 0;
    }
    if (!known) return "bare '&' in \"" + text + "\"";
  }
  return "";
}

// A small well-formedness check for the XML this writer produces: an optional declaration, then
// one root element; tags nest and match; attributes are name="value"; text and values are
// escaped. Returns "" when well-formed, else what is wrong.
std::string XmlProblem(const std::string& xml) {
  size_t at = 0;
  if (xml.compare(0, 5, "<?xml") == 0) {
    at = xml.find("?>");
    if (at == std::string::npos) return "unterminated declaration";
    at += 2;
  }
  std::vector<std::string> open;
  int roots = 0;
  while (at < xml.size()) {
    const size_t lt = xml.find('<', at);
    const std::string text = xml.substr(at, lt == std::string::npos ? std::string::npos : lt - at);
    if (open.empty() && text.find_first_not_of(" \n\r\t") != std::string::npos) {
      return "text outside the root element";
    }
    if (std::string problem = CheckText(text); !problem.empty()) return problem;
    if (lt == std::string::npos) break;
    const size_t gt = xml.find('>', lt);
    if (gt == std::string::npos) return "unterminated tag";
    std::string tag = xml.substr(lt + 1, gt - lt - 1);
    at = gt + 1;
    if (tag.compare(0, 3, "!--") == 0) continue;  // (comments hold no '>' here)
    if (!tag.empty() && tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "unmatched </" + name + ">";
      open.pop_back();
      continue;
    }
    const bool self_closing = !tag.empty() && tag.back() == '/';
    if (self_closing) tag.pop_back();
    size_t i = 0;
    while (i < tag.size() && IsNameChar(tag[i])) ++i;
    const std::string name = tag.substr(0, i);
    if (name.empty()) return "tag without a name: <" + tag + ">";
    // Attributes: whitespace, name, '=', a quoted value.
    while (i < tag.size()) {
      if (tag[i] == ' ' || tag[i] == '\n') {
        ++i;
        continue;
      }
      const size_t name_start = i;
      while (i < tag.size() && IsNameChar(tag[i])) ++i;
      if (i == name_start || i + 1 >= tag.size() || tag[i] != '=' || tag[i + 1] != '"') {
        return "bad attribute in <" + tag + ">";
      }
      const size_t close = tag.find('"', i + 2);
      if (close == std::string::npos) return "unterminated attribute in <" + tag + ">";
      if (std::string problem = CheckText(tag.substr(i + 2, close - i - 2)); !problem.empty()) {
        return problem;
      }
      i = close + 1;
    }
    if (open.empty() && ++roots > 1) return "more than one root element";
    if (!self_closing) open.push_back(name);
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (roots != 1) return "no root element";
  return "";
}

TEST_CASE("span kinds have names that parse back", "[timeline]") {
  for (SpanKind kind : kKinds) {
    INFO(SpanKindName(kind));
    auto parsed = ParseSpanKind(SpanKindName(kind));
    REQUIRE(parsed.ok());
    CHECK(*parsed == kind);
  }
  CHECK(std::string(SpanKindName(SpanKind::kAllReduce)) == "all-reduce");
}

TEST_CASE("unknown span kind names are refused", "[timeline]") {
  for (const char* name : {"", "Forward", "forwards", "allreduce", "idle"}) {
    INFO(name);
    auto parsed = ParseSpanKind(name);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(parsed.status().message(), Catch::Contains("'" + std::string(name) + "'"));
  }
}

TEST_CASE("a Chrome trace reads back as the same timeline", "[timeline]") {
  const Timeline timeline = Sample();
  auto read = TimelineFromChromeTrace(TimelineToChromeTrace(timeline));
  REQUIRE(read.ok());
  CheckSameTimeline(timeline, *read);

  Timeline empty;
  auto read_empty = TimelineFromChromeTrace(TimelineToChromeTrace(empty));
  REQUIRE(read_empty.ok());
  CheckSameTimeline(empty, *read_empty);
}

TEST_CASE("a Chrome trace is JSON with the documented fields", "[timeline]") {
  const Timeline timeline = Sample();
  const json doc = json::parse(TimelineToChromeTrace(timeline));
  CHECK(doc.at("displayTimeUnit") == "ms");
  CHECK(doc.at("otherData").at("title") == timeline.title);
  std::vector<std::string> thread_names(timeline.tracks.size());
  std::vector<int> sort_indices(timeline.tracks.size(), -1);
  size_t complete = 0;
  for (const json& event : doc.at("traceEvents")) {
    CHECK(event.at("pid") == 0);
    const size_t tid = event.at("tid").get<size_t>();
    if (event.at("ph") == "M") {
      REQUIRE(tid < timeline.tracks.size());
      if (event.at("name") == "thread_name") {
        thread_names[tid] = event.at("args").at("name").get<std::string>();
      } else if (event.at("name") == "thread_sort_index") {
        sort_indices[tid] = event.at("args").at("sort_index").get<int>();
      }
      continue;
    }
    REQUIRE(event.at("ph") == "X");
    REQUIRE(complete < timeline.spans.size());
    const TimelineSpan& span = timeline.spans[complete++];
    CHECK(event.at("name") == span.name);
    CHECK(event.at("cat") == SpanKindName(span.kind));
    CHECK(tid == static_cast<size_t>(span.track));
    CHECK(event.at("ts").get<double>() == span.start_us);
    CHECK(event.at("dur").get<double>() == span.duration_us);
    CHECK(event.at("args").at("iteration") == span.iteration);
  }
  CHECK(complete == timeline.spans.size());
  CHECK(thread_names == timeline.tracks);
  CHECK(sort_indices == std::vector<int>{0, 1, 2});
}

TEST_CASE("the trace reader skips events and fields it does not know", "[timeline]") {
  const json doc = {
      {"traceEvents",
       {{{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 1}, {"args", {{"name", "b"}}}},
        {{"name", "counter"}, {"ph", "C"}, {"pid", 0}, {"tid", 0}, {"ts", 5}},
        {{"name", "mark"}, {"ph", "i"}, {"pid", 0}, {"tid", 0}, {"ts", 5}},
        {{"name", "other process"},
         {"cat", "gpu"},
         {"ph", "X"},
         {"pid", 7},
         {"tid", 9},
         {"ts", 1},
         {"dur", 2}},
        {{"name", "fc"},
         {"cat", "backward"},
         {"ph", "X"},
         {"pid", 0},
         {"tid", 2},
         {"ts", 10},
         {"dur", 4},
         {"id", "x"},
         {"args", {{"flops", 3}}}}}},
      {"metadata", {{"anything", true}}}};
  auto read = TimelineFromChromeTrace(doc.dump());
  REQUIRE(read.ok());
  CHECK(read->tracks == std::vector<std::string>{"track 0", "b", "track 2"});
  REQUIRE(read->spans.size() == 1);
  CHECK(read->spans[0].name == "fc");
  CHECK(read->spans[0].kind == SpanKind::kBackward);
  CHECK(read->spans[0].track == 2);
  CHECK(read->spans[0].iteration == -1);
  CHECK(read->spans[0].start_us == 10);
  CHECK(read->spans[0].duration_us == 4);

  // The bare-array form of the format.
  auto bare = TimelineFromChromeTrace(doc.at("traceEvents").dump());
  REQUIRE(bare.ok());
  CHECK(bare->spans.size() == 1);
}

TEST_CASE("the trace reader refuses broken traces with a reason", "[timeline]") {
  auto error_of = [](const std::string& text) {
    auto read = TimelineFromChromeTrace(text);
    REQUIRE_FALSE(read.ok());
    CHECK(read.status().code() == StatusCode::kInvalidArgument);
    return read.status().message();
  };
  auto event = [](const json& fields) {
    json base = {{"name", "a"}, {"cat", "forward"}, {"ph", "X"}, {"pid", 0},
                 {"tid", 0},    {"ts", 1},          {"dur", 2}};
    base.update(fields);
    return json{{"traceEvents", {base}}}.dump();
  };
  CHECK_THAT(error_of("{"), Catch::Contains("not valid JSON"));
  CHECK_THAT(error_of("{\"events\": []}"), Catch::Contains("traceEvents"));
  CHECK_THAT(error_of(event({{"cat", "forwards"}})), Catch::Contains("'forwards'"));
  CHECK_THAT(error_of(event({{"dur", -1}})), Catch::Contains("traceEvents[0]"));
  CHECK_THAT(error_of(event({{"tid", 1 << 20}})), Catch::Contains("tid"));
  CHECK_THAT(error_of(event({{"tid", -1}})), Catch::Contains("tid"));
  CHECK_THAT(error_of(event({{"ts", "soon"}})), Catch::Contains("ts and dur"));
  CHECK_THAT(error_of(event({{"args", {{"iteration", "3"}}}})), Catch::Contains("iteration"));
}

TEST_CASE("the SVG is well-formed with one rectangle and one tooltip per span", "[timeline]") {
  const Timeline timeline = Sample();
  const std::string svg = TimelineToSvg(timeline);
  CHECK(XmlProblem(svg).empty());
  INFO(XmlProblem(svg));
  CHECK(Count(svg, "<rect class=\"span\"") == timeline.spans.size());
  CHECK(Count(svg, "<title>") == timeline.spans.size());
  // Names and the title are escaped, never raw.
  CHECK(svg.find("a<b") == std::string::npos);
  CHECK(svg.find("a&lt;b&amp;c &quot;quoted&quot;") != std::string::npos);
  CHECK(svg.find("&lt;iterations 3-4&gt; &amp; more") != std::string::npos);
  // Track names label the rows; every kind that occurs is in the legend.
  for (const std::string& track :
       {std::string("rank 0 (node-a cuda:0)"), std::string("idle rank")}) {
    CHECK(svg.find(">" + track + "</text>") != std::string::npos);
  }
  for (SpanKind kind : kKinds) {
    CHECK(svg.find(">" + std::string(SpanKindName(kind)) + "</text>") != std::string::npos);
  }
  CHECK(svg.find("time (ms)") != std::string::npos);
}

TEST_CASE("the SVG writes names inside spans only where they fit", "[timeline]") {
  Timeline timeline;
  timeline.tracks = {"rank 0"};
  timeline.spans = {{0, SpanKind::kForward, "wide_layer_name", 0, 0, 50000},
                    {0, SpanKind::kBackward, "narrow_layer_name", 0, 50000, 10}};
  const std::string svg = TimelineToSvg(timeline);
  CHECK(XmlProblem(svg).empty());
  CHECK(svg.find(">wide_layer_name</text>") != std::string::npos);
  CHECK(svg.find(">narrow_layer_name</text>") == std::string::npos);
  CHECK(svg.find("narrow_layer_name (backward)") != std::string::npos);
  // Axis ticks are round milliseconds: 0 to 50 ms in steps of 5 or 10.
  CHECK(svg.find(">0</text>") != std::string::npos);
  CHECK(svg.find(">50</text>") != std::string::npos);
}

TEST_CASE("the SVG of an empty timeline is well-formed", "[timeline]") {
  CHECK(XmlProblem(TimelineToSvg(Timeline{})).empty());
  Timeline tracks_only;
  tracks_only.tracks = {"rank 0", "rank 1"};
  CHECK(XmlProblem(TimelineToSvg(tracks_only)).empty());
}

TEST_CASE("the SVG draws the longest spans of a huge timeline and says so", "[timeline]") {
  Timeline timeline;
  timeline.tracks = {"rank 0", "rank 1"};
  const int spans = 30000;
  for (int i = 0; i < spans; ++i) {
    // Every third span is long; the cap keeps all of those.
    timeline.spans.push_back({i % 2, SpanKind::kForward, i % 3 == 0 ? "long" : "short", 0, i * 10.0,
                              i % 3 == 0 ? 9.0 : 1.0});
  }
  const std::string svg = TimelineToSvg(timeline);
  CHECK(XmlProblem(svg).empty());
  CHECK(Count(svg, "<rect class=\"span\"") == 20000);
  CHECK(Count(svg, "<title>long (forward)") == 10000);
  CHECK(svg.find("the 10000 shortest spans") != std::string::npos);
}

TEST_CASE("the XML check used here catches broken XML", "[timeline]") {
  CHECK(XmlProblem("<svg><g></svg>") != "");
  CHECK(XmlProblem("<svg><text>a<b</text></svg>") != "");
  CHECK(XmlProblem("<svg><text>a & b</text></svg>") != "");
  CHECK(XmlProblem("<svg><rect x=\"1\"/></svg><svg/>") != "");
  CHECK(XmlProblem("<svg><rect x=\"a<b\"/></svg>") != "");
  CHECK(XmlProblem("<?xml version=\"1.0\"?>\n<svg><text>a &amp; b</text></svg>\n").empty());
}

}  // namespace
}  // namespace deepool
