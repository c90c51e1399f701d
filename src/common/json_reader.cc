#include "common/json_reader.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpulet {
namespace {

using nlohmann::json;

absl::Status NotA(absl::string_view what, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("not ", what, ": ", why));
}

// How a value reads in an error: its kind, and the value itself when short.
std::string Describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return v.get<bool>() ? "true" : "false";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return v.dump();
    case json::value_t::string: {
      std::string s = v.get<std::string>();
      if (s.size() > 40) return "a long string";
      return absl::StrCat("the string ", json(s).dump());
    }
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "a list";
    default:
      return "an unreadable value";
  }
}

}  // namespace

absl::StatusOr<json> ParseStrictJson(absl::string_view text, absl::string_view what,
                                     JsonLimits limits) {
  if (text.size() > limits.max_bytes) {
    return NotA(what, absl::StrCat("it is ", text.size(), " bytes, more than the ",
                                   limits.max_bytes, " read"));
  }
  // The parser tells each object's keys as it reads them; one set per open object.
  std::vector<std::set<std::string>> open;
  std::string problem;
  json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (!problem.empty()) return true;
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= limits.max_depth) {
          problem = absl::StrCat("it nests more than ", limits.max_depth, " levels deep");
        }
        if (event == json::parse_event_t::object_start) open.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open.empty() && parsed.is_string() &&
            !open.back().insert(parsed.get<std::string>()).second) {
          problem = absl::StrCat("the key ", parsed.dump(),
                                 " appears twice in one object (which one counts is unclear)");
        }
        break;
      default:
        break;
    }
    return true;
  };
  json doc = json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return NotA(what, "the text is not valid JSON");
  if (!problem.empty()) return NotA(what, problem);
  return doc;
}

JsonFields::JsonFields(const json& object, absl::string_view what, std::string path)
    : object_(object), what_(what), path_(std::move(path)) {}

bool JsonFields::Has(absl::string_view key) const {
  return object_.is_object() && object_.contains(std::string(key));
}

std::string JsonFields::PathOf(absl::string_view key) const {
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
}

absl::Status JsonFields::Bad(absl::string_view key, absl::string_view why) const {
  return NotA(what_, absl::StrCat(PathOf(key), " ", why));
}

absl::Status JsonFields::BadHere(absl::string_view why) const {
  return NotA(what_, absl::StrCat(path_.empty() ? "the top level" : path_, " ", why));
}

const json* JsonFields::Find(absl::string_view key) {
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(std::string(key));
  if (it == object_.end()) return nullptr;
  read_.emplace(key);
  return &*it;
}

absl::Status JsonFields::Absent(absl::string_view key, Presence presence,
                                absl::string_view expected) const {
  if (presence == Presence::kOptional && object_.is_object()) return absl::OkStatus();
  if (!object_.is_object()) {
    return BadHere(absl::StrCat("must be an object, not ", Describe(object_)));
  }
  return Bad(key, absl::StrCat("is missing (", expected, ")"));
}

absl::Status JsonFields::String(absl::string_view key, std::string* out, Presence presence) {
  const json* v = Find(key);
  if (v == nullptr) return Absent(key, presence, "a string");
  if (!v->is_string()) return Bad(key, absl::StrCat("must be a string, not ", Describe(*v)));
  *out = v->get<std::string>();
  return absl::OkStatus();
}

absl::Status JsonFields::NonEmptyString(absl::string_view key, std::string* out,
                                        Presence presence) {
  std::string v;
  if (absl::Status s = String(key, &v, presence); !s.ok() || !Has(key)) return s;
  if (v.empty()) return Bad(key, "is empty");
  *out = std::move(v);
  return absl::OkStatus();
}

absl::Status JsonFields::Bool(absl::string_view key, bool* out, Presence presence) {
  const json* v = Find(key);
  if (v == nullptr) return Absent(key, presence, "true or false");
  if (!v->is_boolean()) return Bad(key, absl::StrCat("must be true or false, not ", Describe(*v)));
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status JsonFields::Double(absl::string_view key, double* out, Presence presence) {
  const json* v = Find(key);
  if (v == nullptr) return Absent(key, presence, "a number");
  // (A document built in memory may hold an infinity, which JSON cannot write back.)
  if (!v->is_number() || !std::isfinite(v->get<double>())) {
    return Bad(key, absl::StrCat("must be a finite number, not ", Describe(*v)));
  }
  *out = v->get<double>();
  return absl::OkStatus();
}

absl::Status JsonFields::Unexpected(absl::string_view key, absl::string_view expected) const {
  auto it = object_.is_object() ? object_.find(std::string(key)) : object_.end();
  if (!object_.is_object() || it == object_.end()) {
    return Absent(key, Presence::kRequired, expected);
  }
  return Bad(key, absl::StrCat("must be ", expected, ", not ", Describe(*it)));
}

absl::Status JsonFields::Int64(absl::string_view key, int64_t min, int64_t max, int64_t* out,
                               Presence presence, absl::string_view range) {
  const std::string expected =
      range.empty() ? absl::StrCat("an integer from ", min, " to ", max) : std::string(range);
  const json* v = Find(key);
  if (v == nullptr) return Absent(key, presence, expected);
  // An unsigned value above int64's range is out of every range this reads.
  const bool integer = v->is_number_integer();
  const bool fits =
      integer && (!v->is_number_unsigned() ||
                  v->get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()});
  if (!fits || v->get<int64_t>() < min || v->get<int64_t>() > max) {
    return Bad(key, absl::StrCat("must be ", expected, ", not ", Describe(*v)));
  }
  *out = v->get<int64_t>();
  return absl::OkStatus();
}

absl::Status JsonFields::StringList(absl::string_view key, std::vector<std::string>* out,
                                    Presence presence) {
  absl::StatusOr<const json*> list = Array(key, presence);
  if (!list.ok() || *list == nullptr) return list.status();
  std::vector<std::string> strings;
  for (size_t i = 0; i < (*list)->size(); ++i) {
    const json& v = (**list)[i];
    if (!v.is_string()) {
      return NotA(what_,
                  absl::StrCat(PathOf(key), "[", i, "] must be a string, not ", Describe(v)));
    }
    strings.push_back(v.get<std::string>());
  }
  *out = std::move(strings);
  return absl::OkStatus();
}

absl::StatusOr<const json*> JsonFields::Container(absl::string_view key, Presence presence,
                                                  json::value_t type, absl::string_view kind) {
  const json* v = Find(key);
  if (v == nullptr) {
    absl::Status s = Absent(key, presence, kind);
    if (s.ok()) return nullptr;
    return s;
  }
  if (v->type() != type) return Bad(key, absl::StrCat("must be ", kind, ", not ", Describe(*v)));
  return v;
}

absl::StatusOr<const json*> JsonFields::Object(absl::string_view key, Presence presence) {
  return Container(key, presence, json::value_t::object, "an object");
}

absl::StatusOr<const json*> JsonFields::Array(absl::string_view key, Presence presence) {
  return Container(key, presence, json::value_t::array, "a list");
}

absl::Status JsonFields::NoOtherKeys() const {
  if (!object_.is_object()) {
    return BadHere(absl::StrCat("must be an object, not ", Describe(object_)));
  }
  for (const auto& [key, value] : object_.items()) {
    if (read_.find(key) == read_.end()) {
      return Bad(key, "is not a field gpulet knows here (a typo, or written by a newer gpulet)");
    }
  }
  return absl::OkStatus();
}

}  // namespace gpulet
