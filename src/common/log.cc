#include "common/log.h"

#include <cstdio>
#include <memory>

#include "absl/strings/ascii.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace gpulet {
namespace {

spdlog::level::level_enum SpdlogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::err;
}

}  // namespace

bool InitLogging(const std::string& level) {
  LogLevel threshold;
  if (level == "debug") {
    threshold = LogLevel::kDebug;
  } else if (level == "info") {
    threshold = LogLevel::kInfo;
  } else if (level == "warn") {
    threshold = LogLevel::kWarn;
  } else if (level == "error") {
    threshold = LogLevel::kError;
  } else {
    return false;
  }
  std::shared_ptr<spdlog::logger> logger = spdlog::get("gpulet");
  if (!logger) logger = spdlog::stderr_logger_mt("gpulet");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(SpdlogLevel(threshold));
  return true;
}

void LogLibraryMessage(void* cls, const char* fmt, va_list ap) {
  char buf[512];
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  absl::string_view msg = absl::StripTrailingAsciiWhitespace(buf);
  GPULET_LOG_DEBUG("{}: {}", static_cast<const char*>(cls), msg);
}

namespace log_internal {

bool Enabled(LogLevel level) {
  return spdlog::default_logger_raw()->should_log(SpdlogLevel(level));
}

void Write(LogLevel level, fmt::string_view format, fmt::format_args args) {
  // The message is formatted here, once, and handed to the sink as text (not as a format).
  std::string message = fmt::vformat(format, args);
  spdlog::default_logger_raw()->log(SpdlogLevel(level),
                                    spdlog::string_view_t(message.data(), message.size()));
}

}  // namespace log_internal
}  // namespace gpulet
