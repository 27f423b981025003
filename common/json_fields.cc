#include "common/json_fields.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>
#include <vector>

namespace deepool {
namespace {

bool NestedDeeperThan(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// A pointer into the text that counts the bytes the parser has taken: nlohmann's parser callback
// is not told where it is, and a duplicate key is only useful to the user with its place.
struct CountingIterator {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  const char* at;
  size_t* consumed;  // null on the end iterator, which is never advanced

  reference operator*() const { return *at; }
  CountingIterator& operator++() {
    ++at;
    ++*consumed;
    return *this;
  }
  bool operator==(const CountingIterator& other) const { return at == other.at; }
  bool operator!=(const CountingIterator& other) const { return at != other.at; }
};

// "line 3, column 7" of the byte at `offset`; columns count characters (UTF-8 code points), so
// an editor's column matches. An offset past the end is the end of the text.
std::string LineColumn(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '\n') {
      ++line;
      column = 1;
    } else if ((byte & 0xC0) != 0x80) {  // continuation bytes belong to the character before
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// nlohmann's what() is "[json.exception.parse_error.101] parse error at line 1, column 6:
// syntax error ... - unexpected '}'; last read: '...'; expected ...". Keeps the description
// ("syntax error ..."), without the position (given in our own terms) and without the text it
// last read, which would echo the user's bytes (control characters too) into the message.
std::string ParseErrorDetail(std::string_view what) {
  const size_t column = what.find("column ");
  if (column == std::string_view::npos) return "";
  const size_t start = what.find(": ", column);
  if (start == std::string_view::npos) return "";
  std::string_view detail = what.substr(start + 2);
  const size_t last_read = detail.find("; last read");
  if (last_read != std::string_view::npos) {
    const size_t expected = detail.find("; expected", last_read);
    return ": " + std::string(detail.substr(0, last_read)) +
           (expected == std::string_view::npos ? "" : std::string(detail.substr(expected)));
  }
  return ": " + std::string(detail);
}

// Refuses a key repeated in one object, which nlohmann (and many parsers) would otherwise settle
// silently by keeping the last value: {"gpus": 8, ..., "gpus": 1} is far more likely an editing
// slip than intent. Remembers the first repeat and where its opening quote is.
class DuplicateKeyFinder {
 public:
  DuplicateKeyFinder(std::string_view text, const size_t* consumed)
      : text_(text), consumed_(consumed) {}

  nlohmann::json::parser_callback_t Callback() {
    return [this](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      using Event = nlohmann::json::parse_event_t;
      if (event == Event::object_start || event == Event::array_start) {
        open_.emplace_back();  // arrays get an empty entry too, so ends pair with starts
      } else if ((event == Event::object_end || event == Event::array_end) && !open_.empty()) {
        open_.pop_back();
      } else if (event == Event::key && !open_.empty() && !found_) {
        if (!open_.back().insert(parsed.get<std::string>()).second) {
          found_ = true;
          key_ = parsed.get<std::string>();
          offset_ = OpeningQuote(*consumed_);
        }
      }
      return true;
    };
  }

  bool found() const { return found_; }
  // The key as JSON with everything outside ASCII escaped, cut to 64 bytes: it goes into a
  // message that terminals show.
  std::string key() const {
    return nlohmann::json(key_.substr(0, 64))
        .dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  }
  size_t offset() const { return offset_; }

 private:
  // When the parser reports a key it has read through the key's closing quote, and no further.
  // Walks back to the opening quote: the first '"' not escaped by an odd run of backslashes.
  size_t OpeningQuote(size_t consumed) const {
    if (consumed < 2 || consumed > text_.size()) return consumed;
    for (size_t i = consumed - 1; i-- > 0;) {
      if (text_[i] != '"') continue;
      size_t backslashes = 0;
      while (backslashes < i && text_[i - 1 - backslashes] == '\\') ++backslashes;
      if (backslashes % 2 == 0) return i;
    }
    return consumed - 1;
  }

  std::string_view text_;
  const size_t* consumed_;
  std::vector<std::set<std::string>> open_;  // keys seen in each open object or array
  bool found_ = false;
  std::string key_;
  size_t offset_ = 0;
};

}  // namespace

StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view what) {
  if (NestedDeeperThan(text, kMaxJsonDepth)) {
    return InvalidArgumentError(std::string(what) + ": nested deeper than " +
                                std::to_string(kMaxJsonDepth) + " levels");
  }
  size_t consumed = 0;
  DuplicateKeyFinder duplicates(text, &consumed);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(CountingIterator{text.data(), &consumed},
                                CountingIterator{text.data() + text.size(), nullptr},
                                duplicates.Callback());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts the characters the parser read, so the offending one is at e.byte - 1.
    return InvalidArgumentError(std::string(what) + ": not valid JSON at " +
                                LineColumn(text, e.byte == 0 ? 0 : e.byte - 1) +
                                ParseErrorDetail(e.what()));
  } catch (const nlohmann::json::exception&) {
    // A number too large for a double ("1e400") is out_of_range, with no position of its own.
    return InvalidArgumentError(std::string(what) + ": not valid JSON at " +
                                LineColumn(text, consumed == 0 ? 0 : consumed - 1));
  }
  if (duplicates.found()) {
    return InvalidArgumentError(std::string(what) + ": duplicate key " + duplicates.key() + " at " +
                                LineColumn(text, duplicates.offset()) +
                                " (keys must be unique within an object)");
  }
  return doc;
}

Status CheckKnownFields(const nlohmann::json& object, std::initializer_list<const char*> known,
                        const std::string& path) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool found = false;
    for (const char* name : known) found = found || it.key() == name;
    if (!found) return InvalidArgumentError("unknown field " + path + it.key());
  }
  return Status::Ok();
}

Status CheckFormatAndVersion(const nlohmann::json& doc, std::string_view format_name, int version) {
  return CheckFormatAndVersionRange(doc, format_name, version, version).status();
}

StatusOr<int> CheckFormatAndVersionRange(const nlohmann::json& doc, std::string_view format_name,
                                         int oldest, int newest) {
  auto format = doc.find("format");
  if (format == doc.end() || !format->is_string() || *format != format_name) {
    return InvalidArgumentError("field format must be \"" + std::string(format_name) + "\"");
  }
  auto found_version = doc.find("version");
  if (found_version == doc.end() || !found_version->is_number_integer()) {
    return InvalidArgumentError("missing integer field version");
  }
  const int64_t version = found_version->get<int64_t>();
  if (version < oldest || version > newest) {
    const std::string reads =
        oldest == newest ? "version " + std::to_string(oldest)
                         : "versions " + std::to_string(oldest) + " to " + std::to_string(newest);
    return InvalidArgumentError("unsupported version " + found_version->dump() +
                                " (this build reads " + reads + ")");
  }
  return static_cast<int>(version);
}

namespace json_fields_internal {

Status WrongType(std::string_view name, const std::string& path, const char* kind) {
  return InvalidArgumentError("field " + path + std::string(name) + " must be " + kind);
}

Status OutOfRange(std::string_view name, const std::string& path) {
  return InvalidArgumentError("field " + path + std::string(name) + " is out of range");
}

bool AsInt64(const nlohmann::json& value, int64_t* out) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (value.is_number_integer()) {
    *out = value.get<int64_t>();
    return true;
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // 2^63 is the first double past int64's range; integral doubles below it convert exactly.
    if (std::isfinite(d) && std::floor(d) == d && std::abs(d) < 9.2e18) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}

}  // namespace json_fields_internal

namespace {

StatusOr<const nlohmann::json*> ReadRequiredOf(const nlohmann::json& object, std::string_view name,
                                               const std::string& path, bool array) {
  auto found = object.find(name);
  if (found == object.end() || found->is_null()) {
    return InvalidArgumentError("missing field " + path + std::string(name));
  }
  if (array ? !found->is_array() : !found->is_object()) {
    return json_fields_internal::WrongType(name, path, array ? "an array" : "an object");
  }
  return &*found;
}

}  // namespace

StatusOr<const nlohmann::json*> ReadRequiredObject(const nlohmann::json& object,
                                                   std::string_view name, const std::string& path) {
  return ReadRequiredOf(object, name, path, /*array=*/false);
}

StatusOr<const nlohmann::json*> ReadRequiredArray(const nlohmann::json& object,
                                                  std::string_view name, const std::string& path) {
  return ReadRequiredOf(object, name, path, /*array=*/true);
}

}  // namespace deepool
