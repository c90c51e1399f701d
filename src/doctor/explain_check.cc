#include "doctor/explain_check.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace gpulet::doctor {
namespace {

bool Flags(const CheckResult* r) {
  return r != nullptr && (r->verdict == Verdict::kFail || r->verdict == Verdict::kWarn);
}

std::string Said(const CheckResult& r) {
  // A check that did not run says so in its summary already ("not checked: ...").
  return absl::StrCat(r.id, " ", VerdictName(r.verdict), ": ",
                      absl::StripPrefix(r.summary, "not checked: "));
}

}  // namespace

NodeAnswer AnswerOnNode(const Explanation& e, const Report& report) {
  NodeAnswer a;
  if (!e.check.empty()) a.check = report.Find(e.check);
  if (e.candidates.empty()) {
    if (a.check == nullptr) {
      a.summary = e.check.empty() ? "no gpulet doctor check tests this cause"
                                  : absl::StrCat("the ", e.check, " check did not run");
    } else if (a.check->verdict == Verdict::kNotChecked) {
      a.summary = absl::StrCat("cannot tell here: ", Said(*a.check));
    } else {
      a.summary =
          absl::StrCat(Flags(a.check) ? "likely here: " : "not found here: ", Said(*a.check));
    }
    return a;
  }
  std::vector<size_t> unchecked;
  for (size_t i = 0; i < e.candidates.size(); ++i) {
    const std::string& id = e.candidates[i].check;
    const CheckResult* r = id.empty() ? nullptr : report.Find(id);
    a.candidate_checks.push_back(r);
    if (Flags(r)) {
      if (!a.likely) a.likely = i;
    } else if (r != nullptr && r->verdict == Verdict::kPass) {
      a.ruled_out.push_back(i);
    } else {
      unchecked.push_back(i);
    }
  }
  auto numbers = [](const std::vector<size_t>& v) {
    return absl::StrJoin(v, ", ", [](std::string* out, size_t i) { absl::StrAppend(out, i + 1); });
  };
  if (a.likely) {
    a.summary = absl::StrCat("cause ", *a.likely + 1,
                             " is likely here: ", Said(*a.candidate_checks[*a.likely]));
  } else if (!a.ruled_out.empty()) {
    a.summary = absl::StrCat("the checks rule out cause", a.ruled_out.size() > 1 ? "s " : " ",
                             numbers(a.ruled_out),
                             unchecked.empty() ? "; none of the listed causes is found here"
                                               : absl::StrCat("; left: ", numbers(unchecked)));
  } else {
    a.summary = "no gpulet doctor check could tell the causes apart here";
  }
  return a;
}

}  // namespace gpulet::doctor
