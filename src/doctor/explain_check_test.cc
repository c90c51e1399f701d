#include "doctor/explain_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet::doctor {
namespace {

using ::testing::HasSubstr;

Report ReportOf(std::initializer_list<std::pair<const char*, Verdict>> checks) {
  Report r;
  for (const auto& [id, verdict] : checks) {
    CheckResult c;
    c.id = id;
    c.verdict = verdict;
    c.summary = std::string(id) + " said so";
    r.checks.push_back(c);
  }
  return r;
}

Explanation WithCandidates(std::initializer_list<const char*> checks) {
  Explanation e;
  e.id = "x";
  for (const char* check : checks) e.candidates.push_back({"a cause", "a question", check});
  return e;
}

TEST(ExplainCheckTest, OneCauseIsFoundOrNotByItsCheck) {
  Explanation e;
  e.check = "driver.uvm";
  Report bad = ReportOf({{"driver.uvm", Verdict::kFail}});
  NodeAnswer a = AnswerOnNode(e, bad);
  EXPECT_EQ(a.check, &bad.checks[0]);
  EXPECT_EQ(a.summary, "likely here: driver.uvm fail: driver.uvm said so");
  EXPECT_THAT(AnswerOnNode(e, ReportOf({{"driver.uvm", Verdict::kPass}})).summary,
              HasSubstr("not found here"));
  EXPECT_THAT(AnswerOnNode(e, ReportOf({{"driver.uvm", Verdict::kNotChecked}})).summary,
              HasSubstr("cannot tell here"));
  Report skipped;
  skipped.checks.push_back(NotCheckedResult("driver.uvm", "no module list"));
  EXPECT_EQ(AnswerOnNode(e, skipped).summary,
            "cannot tell here: driver.uvm not checked: no module list");
  EXPECT_THAT(AnswerOnNode(e, ReportOf({})).summary, HasSubstr("did not run"));
  e.check.clear();
  EXPECT_EQ(AnswerOnNode(e, bad).summary, "no gpulet doctor check tests this cause");
}

TEST(ExplainCheckTest, TheFirstCandidateWhoseCheckFlagsIsLikely) {
  Explanation e = WithCandidates({"", "cgroup.devices", "driver.uvm", "driver.userspace"});
  Report r = ReportOf({{"cgroup.devices", Verdict::kPass},
                       {"driver.uvm", Verdict::kWarn},
                       {"driver.userspace", Verdict::kFail}});
  NodeAnswer a = AnswerOnNode(e, r);
  ASSERT_TRUE(a.likely.has_value());
  EXPECT_EQ(*a.likely, 2u);
  EXPECT_EQ(a.ruled_out, std::vector<size_t>{1});
  EXPECT_EQ(a.summary, "cause 3 is likely here: driver.uvm warn: driver.uvm said so");
  ASSERT_EQ(a.candidate_checks.size(), 4u);
  EXPECT_EQ(a.candidate_checks[0], nullptr);
}

TEST(ExplainCheckTest, PassingChecksRuleTheirCausesOut) {
  Explanation e = WithCandidates({"", "cgroup.devices", "driver.uvm"});
  NodeAnswer a = AnswerOnNode(
      e, ReportOf({{"cgroup.devices", Verdict::kPass}, {"driver.uvm", Verdict::kPass}}));
  EXPECT_FALSE(a.likely.has_value());
  EXPECT_EQ(a.summary, "the checks rule out causes 2, 3; left: 1");
  a = AnswerOnNode(WithCandidates({"driver.uvm", "cgroup.devices"}),
                   ReportOf({{"cgroup.devices", Verdict::kPass}, {"driver.uvm", Verdict::kPass}}));
  EXPECT_EQ(a.summary, "the checks rule out causes 1, 2; none of the listed causes is found here");
  a = AnswerOnNode(WithCandidates({"", "driver.uvm"}),
                   ReportOf({{"driver.uvm", Verdict::kNotChecked}}));
  EXPECT_EQ(a.summary, "no gpulet doctor check could tell the causes apart here");
}

}  // namespace
}  // namespace gpulet::doctor
