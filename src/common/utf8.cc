#include "common/utf8.h"

#include "absl/strings/str_cat.h"

namespace gpulet {

std::string CutUtf8(std::string text, size_t limit, absl::string_view marker) {
  if (text.size() <= limit) return text;
  size_t end = limit > marker.size() ? limit - marker.size() : 0;
  // A byte 10xxxxxx continues a character: back up to the byte that starts it.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  if (marker.size() <= limit) absl::StrAppend(&text, marker);
  return text;
}

}  // namespace gpulet
