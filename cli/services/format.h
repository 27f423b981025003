// Text formatting for the deepool command's human output: aligned tables, progress bars,
// durations and rates. Pure functions, no I/O; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepool::cli {

// A table with a header row; columns are padded to their widest cell. Cells are UTF-8; width
// counts code points, so the progress bar's block characters align.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> cells);
  // Right-align this column (numbers).
  void AlignRight(size_t column);
  size_t rows() const { return rows_.size(); }
  // Lines joined with '\n', trailing newline included; two spaces between columns; trailing
  // spaces trimmed.
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> right_;
};

// "[#######.............]  35%" with `width` cells between the brackets. fraction is clamped
// to [0, 1].
std::string ProgressBar(double fraction, int width = 20);
// "850ms", "12.3s", "4m05s", "2h03m".
std::string FormatDuration(double ms);
// "1.23k", "45.6", "0.5": a compact rate without unit.
std::string FormatRate(double per_second);
// "3s ago", "5m ago" between two wall-clock times in ms; "-" when `then_ms` is 0.
std::string FormatAgo(int64_t then_ms, int64_t now_ms);
// "2026-11-22 03:25:07" UTC.
std::string FormatWallTime(int64_t ms_since_epoch);
// Number of code points in a UTF-8 string (display width for our tables).
size_t DisplayWidth(const std::string& text);
// Cuts `text` to at most `width` code points, ending in "…" when it was cut.
std::string Truncate(const std::string& text, size_t width);
// Text from the coordinator made safe for a terminal: control characters (C0, DEL, and C1 such
// as U+009B, a one-character escape sequence) are written as \xNN, and the bidirectional
// overrides and isolates (U+202A..U+202E, U+2066..U+2069) as \uNNNN, so a job name, reason or
// log line cannot move the cursor, recolour, reorder or rewrite what others see. Table cells get
// this automatically.
std::string Printable(const std::string& text);

}  // namespace deepool::cli
