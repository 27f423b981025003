// What the executor's files share: libtorch's exceptions turned into Status values, and
// durations in milliseconds. Threading: pure functions.
#pragma once

#include <chrono>
#include <exception>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace deepool::worker {

inline double Millis(Clock::Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// fn()'s status, or INTERNAL "what: <the exception's first line>" when libtorch throws (the
// executor's callers get Status values).
template <typename Fn>
Status Guarded(const std::string& what, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    std::string message = e.what();
    if (auto newline = message.find('\n'); newline != std::string::npos) message.resize(newline);
    return InternalError(what + ": " + message);
  }
}

}  // namespace deepool::worker
