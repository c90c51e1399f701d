// fmt's compiled part (its non-template functions, and the instantiations for char that its
// headers declare `extern template`), built once for the static build (cmake/StaticDeps.cmake).
//
// Why: Debian 12 ships fmt (which spdlog formats with) as a shared library only. gpulet is
// linked statically, so fmt was compiled header-only (FMT_HEADER_ONLY), which put the whole
// of fmt's implementation, with spdlog's, into every file that logs: about ten seconds of
// compiler time each. Built here once, every other file includes fmt's core header alone
// (src/common/log.h). The shared build (the sanitizer tests) links Debian's libfmt.so and
// does not compile this file.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

// Shortest round-trip decimal form of floating-point arguments.
template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

// Locale-dependent parts of "{:L}" formats.
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;

// The type-erased formatting loop every fmt::format and fmt::vformat call ends in.
template FMT_API void buffer<char>::append(const char*, const char*);
template FMT_API void vformat_to(buffer<char>&, string_view,
                                 basic_format_args<FMT_BUFFER_CONTEXT(char)>, locale_ref);

}  // namespace detail
FMT_END_NAMESPACE
