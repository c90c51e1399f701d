#include "daemon/lifecycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpulet::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A component that logs each call ("a start", "b prepare", "b commit", "b rollback") and
// fails where told.
class FakeComponent : public Component {
 public:
  FakeComponent(std::string name, std::vector<std::string>* log) : name_(name), log_(log) {}
  absl::Status Start(const config::Config& config) override {
    log_->push_back(name_ + " start " + config.kubelet_dir);
    return fail_start ? absl::UnavailableError(name_ + " cannot start") : absl::OkStatus();
  }
  absl::StatusOr<Change> Prepare(const ReloadPlan& plan) override {
    log_->push_back(name_ + " prepare " + plan.next.kubelet_dir);
    if (fail_prepare) return absl::InvalidArgumentError(name_ + ": bad value");
    if (nothing_to_do) return Change();
    // What a real change holds: something built beside the running one, freed unless it
    // is committed.
    auto built = std::make_unique<Built>(name_, log_);
    return Change([this, built = std::move(built)](std::vector<std::string>* actions) mutable {
      built->committed = true;
      log_->push_back(name_ + " commit");
      actions->push_back(name_ + " rebuilt");
    });
  }
  void Stop() override { log_->push_back(name_ + " stop"); }

  bool fail_start = false;
  bool fail_prepare = false;
  bool nothing_to_do = false;

 private:
  struct Built {
    Built(std::string name, std::vector<std::string>* log) : name(std::move(name)), log(log) {}
    ~Built() {
      if (!committed) log->push_back(name + " rollback");
    }
    std::string name;
    std::vector<std::string>* log;
    bool committed = false;
  };
  std::string name_;
  std::vector<std::string>* log_;
};

class LifecycleTest : public ::testing::Test {
 protected:
  FakeComponent* Add(const std::string& name) {
    auto c = std::make_unique<FakeComponent>(name, &log_);
    FakeComponent* raw = c.get();
    lifecycle_.Add(std::move(c));
    return raw;
  }
  ReloadPlan Plan() { return ReloadPlan{running_, next_}; }

  std::vector<std::string> log_;
  config::Config running_, next_;
  Lifecycle lifecycle_;
};

TEST_F(LifecycleTest, StartsInOrderAndStopsInReverseOnce) {
  running_.kubelet_dir = "/k";
  Add("a");
  Add("b");
  ASSERT_TRUE(lifecycle_.Start(running_).ok());
  lifecycle_.Stop();
  lifecycle_.Stop();
  EXPECT_THAT(log_, ElementsAre("a start /k", "b start /k", "b stop", "a stop"));
}

TEST_F(LifecycleTest, AStartThatFailsStopsItAndWhatStartedBeforeItOnly) {
  running_.kubelet_dir = "/k";
  Add("a");
  Add("b")->fail_start = true;
  Add("c");
  absl::Status s = lifecycle_.Start(running_);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(s.message(), "b cannot start");
  EXPECT_THAT(log_, ElementsAre("a start /k", "b start /k", "b stop", "a stop"));
  EXPECT_EQ(lifecycle_.started(), 0u);
}

TEST_F(LifecycleTest, AReloadPreparesEveryComponentBeforeItCommitsAny) {
  next_.kubelet_dir = "/new";
  Add("a");
  Add("b")->nothing_to_do = true;
  Add("c");
  ASSERT_TRUE(lifecycle_.Start(running_).ok());
  log_.clear();
  absl::StatusOr<std::vector<std::string>> actions = lifecycle_.Reload(Plan());
  ASSERT_TRUE(actions.ok()) << actions.status();
  EXPECT_THAT(*actions, ElementsAre("a rebuilt", "c rebuilt"));
  EXPECT_THAT(log_, ElementsAre("a prepare /new", "b prepare /new", "c prepare /new", "a commit",
                                "c commit"));
}

TEST_F(LifecycleTest, AFailedPrepareRollsBackWhatWasPreparedLastFirstAndCommitsNothing) {
  next_.kubelet_dir = "/new";
  Add("a");
  Add("b");
  FakeComponent* c = Add("c");
  c->fail_prepare = true;
  Add("d");
  ASSERT_TRUE(lifecycle_.Start(running_).ok());
  log_.clear();
  absl::StatusOr<std::vector<std::string>> actions = lifecycle_.Reload(Plan());
  EXPECT_TRUE(absl::IsInvalidArgument(actions.status())) << actions.status();
  EXPECT_EQ(actions.status().message(), "c: bad value");
  // d is never asked: the reload is refused at c.
  EXPECT_THAT(log_, ElementsAre("a prepare /new", "b prepare /new", "c prepare /new", "b rollback",
                                "a rollback"));
  // Still running: the next reload commits, and Stop stops all four.
  c->fail_prepare = false;
  actions = lifecycle_.Reload(Plan());
  ASSERT_TRUE(actions.ok()) << actions.status();
  EXPECT_THAT(*actions, ElementsAre("a rebuilt", "b rebuilt", "c rebuilt", "d rebuilt"));
  log_.clear();
  lifecycle_.Stop();
  EXPECT_THAT(log_, ElementsAre("d stop", "c stop", "b stop", "a stop"));
}

TEST_F(LifecycleTest, AReloadWithNothingToDoDoesNothing) {
  Add("a")->nothing_to_do = true;
  ASSERT_TRUE(lifecycle_.Start(running_).ok());
  absl::StatusOr<std::vector<std::string>> actions = lifecycle_.Reload(Plan());
  ASSERT_TRUE(actions.ok());
  EXPECT_THAT(*actions, IsEmpty());
}

}  // namespace
}  // namespace gpulet::daemon
