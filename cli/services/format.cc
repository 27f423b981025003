#include "cli/services/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace deepool::cli {

size_t DisplayWidth(const std::string& text) {
  size_t width = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) != 0x80) ++width;  // count lead bytes only
  }
  return width;
}

namespace {

// U+202A..U+202E (embeddings and overrides) and U+2066..U+2069 (isolates): they reorder the text
// after them, so a job name could make a line read differently from what it is ("Trojan Source").
// Returns the code point when the UTF-8 sequence at text[i] is one of them, else 0.
char32_t BidiControlAt(const std::string& text, size_t i) {
  if (i + 2 >= text.size() || static_cast<unsigned char>(text[i]) != 0xe2) return 0;
  const auto second = static_cast<unsigned char>(text[i + 1]);
  const auto third = static_cast<unsigned char>(text[i + 2]);
  if ((second == 0x80 && third >= 0xaa && third <= 0xae) ||
      (second == 0x81 && third >= 0xa6 && third <= 0xa9)) {
    return 0x2000 + ((second & 0x3f) << 6) + (third & 0x3f);
  }
  return 0;
}

}  // namespace

std::string Printable(const std::string& text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape = [&out](unsigned char byte) {
    out += "\\x";
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 || byte == 0x7f) {
      escape(byte);
    } else if (byte == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      escape(static_cast<unsigned char>(text[++i]));  // U+0080..U+009F, the C1 controls
    } else if (const char32_t bidi = BidiControlAt(text, i)) {
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(bidi >> shift) & 15];
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string Truncate(const std::string& text, size_t width) {
  if (DisplayWidth(text) <= width) return text;
  if (width == 0) return "";
  std::string out;
  size_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) {
      if (seen == width - 1) break;
      ++seen;
    }
    out.push_back(text[i]);
  }
  return out + "\xE2\x80\xA6";  // …
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(header_.size());
  for (std::string& cell : cells) cell = Printable(cell);
  rows_.push_back(std::move(cells));
}

void Table::AlignRight(size_t column) {
  if (right_.size() <= column) right_.resize(column + 1, false);
  right_[column] = true;
}

std::string Table::Render() const {
  std::vector<size_t> widths(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  auto render_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      std::string pad(widths[i] - DisplayWidth(row[i]), ' ');
      bool right = i < right_.size() && right_[i];
      line += right ? pad + row[i] : row[i] + pad;
      if (i + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + "\n";
  };
  std::string out = render_row(header_);
  for (const auto& row : rows_) out += render_row(row);
  return out;
}

std::string ProgressBar(double fraction, int width) {
  if (!(fraction >= 0)) fraction = 0;  // also NaN
  fraction = std::min(1.0, fraction);
  width = std::max(1, width);
  int filled = static_cast<int>(std::floor(fraction * width + 1e-9));
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  char percent[8];
  std::snprintf(percent, sizeof(percent), "%3d%%", static_cast<int>(std::floor(fraction * 100)));
  return bar + " " + percent;
}

std::string FormatDuration(double ms) {
  char buf[32];
  if (!(ms >= 0)) ms = 0;
  if (ms < 1000) {
    std::snprintf(buf, sizeof(buf), "%.0fms", ms);
  } else if (ms < 60'000) {
    std::snprintf(buf, sizeof(buf), "%.1fs", ms / 1000);
  } else if (ms < 3'600'000) {
    int64_t s = static_cast<int64_t>(ms / 1000);
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    int64_t m = static_cast<int64_t>(ms / 60'000);
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(m / 60),
                  static_cast<long long>(m % 60));
  }
  return buf;
}

std::string FormatRate(double per_second) {
  char buf[32];
  if (!(per_second >= 0)) per_second = 0;
  if (per_second >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.2fM", per_second / 1e6);
  } else if (per_second >= 1e3) {
    std::snprintf(buf, sizeof(buf), "%.2fk", per_second / 1e3);
  } else if (per_second >= 10) {
    std::snprintf(buf, sizeof(buf), "%.1f", per_second);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f", per_second);
  }
  return buf;
}

std::string FormatAgo(int64_t then_ms, int64_t now_ms) {
  if (then_ms <= 0) return "-";
  double ms = static_cast<double>(std::max<int64_t>(0, now_ms - then_ms));
  if (ms < 1000) return "now";
  if (ms < 60'000) return std::to_string(static_cast<int64_t>(ms / 1000)) + "s ago";
  if (ms < 3'600'000) return std::to_string(static_cast<int64_t>(ms / 60'000)) + "m ago";
  return std::to_string(static_cast<int64_t>(ms / 3'600'000)) + "h ago";
}

std::string FormatWallTime(int64_t ms_since_epoch) {
  if (ms_since_epoch <= 0) return "-";
  std::time_t seconds = static_cast<std::time_t>(ms_since_epoch / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &utc);
  return buf;
}

}  // namespace deepool::cli
