#include "common/log.h"

#include <cstdio>

#include "absl/strings/ascii.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace gpulet {

bool InitLogging(const std::string& level) {
  spdlog::level::level_enum lvl;
  if (level == "debug") {
    lvl = spdlog::level::debug;
  } else if (level == "info") {
    lvl = spdlog::level::info;
  } else if (level == "warn") {
    lvl = spdlog::level::warn;
  } else if (level == "error") {
    lvl = spdlog::level::err;
  } else {
    return false;
  }
  std::shared_ptr<spdlog::logger> logger = spdlog::get("gpulet");
  if (!logger) logger = spdlog::stderr_logger_mt("gpulet");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(lvl);
  return true;
}

void LogLibraryMessage(void* cls, const char* fmt, va_list ap) {
  char buf[512];
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  absl::string_view msg = absl::StripTrailingAsciiWhitespace(buf);
  GPULET_LOG_DEBUG("{}: {}", static_cast<const char*>(cls), msg);
}

}  // namespace gpulet
