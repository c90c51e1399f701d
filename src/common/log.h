// Logging: a thin layer over spdlog so the rest of gpulet names one header. Messages go to
// stderr (the container log) with a timestamp and level; `--log-level` sets the threshold.
//
// Thread-safety: spdlog's default logger is thread-safe.
#ifndef GPULET_COMMON_LOG_H_
#define GPULET_COMMON_LOG_H_

#include <cstdarg>
#include <string>

#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

// Debian's abseil has its own string_view type (not std::string_view); teach fmt to print
// it so Status::message() can be logged directly.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

#define GPULET_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define GPULET_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define GPULET_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
#define GPULET_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)

namespace gpulet {

// Sets up the default logger on stderr; `level` is one of debug, info, warn, error.
// Returns false for an unknown level.
bool InitLogging(const std::string& level);

// A C library's printf-style message (libmicrohttpd's external logger), at debug level,
// prefixed with `cls` (a NUL-terminated name the caller registered with the callback): what
// a server library says about one bad client is no news for the operator.
void LogLibraryMessage(void* cls, const char* fmt, va_list ap);

}  // namespace gpulet

#endif  // GPULET_COMMON_LOG_H_
