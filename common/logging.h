// Logging goes through spdlog. Components log via the DP_LOG_* macros so the sink and level
// are set once per process by InitLogging.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace deepool {

// Sets the process-wide logger: name is shown on every line (e.g. "coordinator"),
// level is one of trace, debug, info, warn, error, off. Unknown levels fall back to info.
void InitLogging(const std::string& name, const std::string& level = "info");

}  // namespace deepool

#define DP_LOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define DP_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define DP_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define DP_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define DP_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
