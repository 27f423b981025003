#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace deepool {

void InitLogging(const std::string& name, const std::string& level) {
  // Logs go to stderr so that stdout stays clean for tables and JSON.
  auto logger = spdlog::get(name);
  if (!logger) logger = spdlog::stderr_color_mt(name);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%n] %v");
  auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") parsed = spdlog::level::info;
  spdlog::set_level(parsed);
}

}  // namespace deepool
