#include "common/versioned_json.h"

#include "absl/strings/str_cat.h"
#include "common/json_reader.h"

namespace gpulet {

absl::StatusOr<nlohmann::json> ParseVersionedJson(absl::string_view text, int version,
                                                  absl::string_view what) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("not ", what, ": ", why));
  };
  absl::StatusOr<nlohmann::json> parsed = ParseStrictJson(text, what);
  if (!parsed.ok()) return parsed.status();
  nlohmann::json& doc = *parsed;
  if (!doc.is_object()) return bad("the top level is not a JSON object");
  auto v = doc.find("version");
  if (v == doc.end() || !v->is_number_integer())
    return bad("\"version\" is missing or not an integer");
  if (v->get<int64_t>() != version) {
    return bad(absl::StrCat("version ", v->get<int64_t>(), " is not ", version,
                            " (written by another gpulet version)"));
  }
  return parsed;
}

}  // namespace gpulet
