// Logging: the one header the rest of gpulet names. Messages go to stderr (the container
// log) with a timestamp and level; `--log-level` sets the threshold. Formats are fmt's
// ("{}"), checked at compile time.
//
// Only fmt's small core header is included here: the sink (spdlog, header-only in the
// static build) and fmt's formatting code are compiled once, in log.cc and in
// cmake/fmt_impl.cc, instead of in every file that logs (they cost about ten seconds of
// compiler time per such file).
//
// Thread-safety: every function may be called from any thread (spdlog's default logger is
// thread-safe; the level is an atomic).
#ifndef GPULET_COMMON_LOG_H_
#define GPULET_COMMON_LOG_H_

#include <fmt/core.h>

#include <cstdarg>
#include <string>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace gpulet {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// Sets up the default logger on stderr; `level` is one of debug, info, warn, error.
// Returns false for an unknown level.
bool InitLogging(const std::string& level);

// A C library's printf-style message (libmicrohttpd's external logger), at debug level,
// prefixed with `cls` (a NUL-terminated name the caller registered with the callback): what
// a server library says about one bad client is no news for the operator.
void LogLibraryMessage(void* cls, const char* fmt, va_list ap);

namespace log_internal {

bool Enabled(LogLevel level);
void Write(LogLevel level, fmt::string_view format, fmt::format_args args);

// Debian's Abseil has its own string_view type (not std::string_view), which fmt does not
// know: it is handed to fmt as fmt's own view, so that Status::message() logs directly.
template <typename T>
using FmtArg = std::conditional_t<std::is_same_v<std::remove_cvref_t<T>, absl::string_view>,
                                  fmt::string_view, std::remove_cvref_t<T>>;
template <typename T>
decltype(auto) ToFmtArg(const T& value) {
  if constexpr (std::is_same_v<T, absl::string_view>) {
    return fmt::string_view(value.data(), value.size());
  } else {
    return (value);
  }
}

// Not inlined: a log statement is one call at its site (the arguments are packed in here,
// once per argument list), which keeps the binary as small as spdlog's own calls did.
template <typename... Args>
[[gnu::noinline]] void Log(LogLevel level, fmt::format_string<FmtArg<Args>...> format,
                           const Args&... args) {
  if (!Enabled(level)) return;
  Write(level, format, fmt::make_format_args(ToFmtArg(args)...));
}

}  // namespace log_internal
}  // namespace gpulet

#define GPULET_LOG_DEBUG(...) ::gpulet::log_internal::Log(::gpulet::LogLevel::kDebug, __VA_ARGS__)
#define GPULET_LOG_INFO(...) ::gpulet::log_internal::Log(::gpulet::LogLevel::kInfo, __VA_ARGS__)
#define GPULET_LOG_WARN(...) ::gpulet::log_internal::Log(::gpulet::LogLevel::kWarn, __VA_ARGS__)
#define GPULET_LOG_ERROR(...) ::gpulet::log_internal::Log(::gpulet::LogLevel::kError, __VA_ARGS__)

#endif  // GPULET_COMMON_LOG_H_
