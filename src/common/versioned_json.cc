#include "common/versioned_json.h"

#include "absl/strings/str_cat.h"

namespace gpulet {

absl::StatusOr<nlohmann::json> ParseVersionedJson(absl::string_view text, int version,
                                                  absl::string_view what) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("not ", what, ": ", why));
  };
  nlohmann::json doc = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                             /*allow_exceptions=*/false);
  if (doc.is_discarded()) return bad("the file is not valid JSON");
  if (!doc.is_object()) return bad("the top level is not a JSON object");
  auto v = doc.find("version");
  if (v == doc.end() || !v->is_number_integer())
    return bad("\"version\" is missing or not an integer");
  if (v->get<int64_t>() != version) {
    return bad(absl::StrCat("version ", v->get<int64_t>(), " is not ", version,
                            " (written by another gpulet version)"));
  }
  return doc;
}

}  // namespace gpulet
