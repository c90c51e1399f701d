// libFuzzer target for `gpulet explain` (doctor/explain.h): people paste arbitrary logs into
// it, so any text must give a (possibly empty) list of explanations without crashing or
// taking time that grows faster than the text. Every explanation must carry an id, a title,
// a cause and a fix. The first byte also picks a pattern from the input for WildcardSearch,
// which otherwise only ever sees the table's fixed patterns.
//
// Built and run by scripts/fuzz.sh (the _fuzz.cc suffix keeps it out of the normal build);
// seeds are the lines in tests/fixtures/kmsg and the explain catalogue's examples. Feeding
// the input to a LogExplainer in two chunks (split where the second byte says) must give the
// same explanations as the whole: lines may arrive in any split.
//
// Thread-safety: libFuzzer calls LLVMFuzzerTestOneInput from one thread.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "doctor/explain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);

  std::vector<gpulet::doctor::Explanation> whole = gpulet::doctor::Explain(input);
  for (const gpulet::doctor::Explanation& e : whole) {
    if (e.id.empty() || e.title.empty() || e.cause.empty() || e.fix.empty()) std::abort();
    if (e.severity.empty()) std::abort();
  }
  if (size > 1) {
    size_t cut = data[1] % size;
    gpulet::doctor::LogExplainer chunked;
    chunked.Feed(input.substr(0, cut));
    chunked.Feed(input.substr(cut));
    std::vector<gpulet::doctor::Explanation> parts = chunked.Finish().found;
    if (parts.size() != whole.size()) std::abort();
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].id != whole[i].id || parts[i].line != whole[i].line) std::abort();
    }
  }

  if (size > 1) {
    // Short patterns keep the quadratic worst case of wildcard search small.
    size_t split = 1 + data[0] % std::min<size_t>(size - 1, 16);
    absl::string_view pattern = input.substr(1, split);
    absl::string_view text = input.substr(1 + split);
    bool found = gpulet::doctor::WildcardSearch(pattern, text);
    // A pattern without wildcards or placeholders ("<n>", "<x>", "<w>") is found exactly
    // when it is a case-insensitive substring; an empty pattern or a lone '*' matches
    // everything.
    if (pattern == "*" && !found) std::abort();
    if (pattern.find_first_of("*?<") == absl::string_view::npos) {
      std::string p = absl::AsciiStrToLower(pattern);
      std::string t = absl::AsciiStrToLower(text);
      if (found != (t.find(p) != std::string::npos)) std::abort();
    }
  }
  if (!gpulet::doctor::WildcardSearch("", input)) std::abort();
  return 0;
}
