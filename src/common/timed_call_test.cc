#include "common/timed_call.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace gpulet {
namespace {

TEST(TimedLaneTest, RunsWorkAndReturnsOk) {
  TimedLane lane("test");
  auto value = std::make_shared<int>(0);
  ASSERT_TRUE(lane.Run([value] { *value = 42; }, absl::Seconds(5), "set").ok());
  EXPECT_EQ(*value, 42);
  EXPECT_FALSE(lane.wedged());
}

TEST(TimedLaneTest, OverrunWedgesFailsFastThenRecovers) {
  TimedLane lane("GPU 1");
  auto release = std::make_shared<std::atomic<bool>>(false);
  absl::Time start = absl::Now();
  absl::Status s = lane.Run(
      [release] {
        while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      absl::Milliseconds(50), "nvmlDeviceGetName");
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_NE(s.message().find("GPU 1"), absl::string_view::npos);
  EXPECT_TRUE(lane.wedged());
  EXPECT_NE(lane.WedgedDescription().find("nvmlDeviceGetName"), std::string::npos);

  // While wedged, calls fail at once without running.
  auto ran = std::make_shared<bool>(false);
  start = absl::Now();
  s = lane.Run([ran] { *ran = true; }, absl::Seconds(5), "second");
  EXPECT_TRUE(absl::IsDeadlineExceeded(s));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_FALSE(*ran);

  // Once the stuck call returns, the lane works again.
  release->store(true);
  for (int i = 0; i < 200 && lane.wedged(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(lane.wedged());
  EXPECT_TRUE(lane.Run([ran] { *ran = true; }, absl::Seconds(5), "third").ok());
  EXPECT_TRUE(*ran);
}

TEST(TimedLaneTest, DestroyingAWedgedLaneDoesNotBlock) {
  auto release = std::make_shared<std::atomic<bool>>(false);
  absl::Time start = absl::Now();
  {
    TimedLane lane("stuck");
    lane.Run(
            [release] {
              while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            },
            absl::Milliseconds(10), "stuck call")
        .IgnoreError();
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  release->store(true);  // let the detached worker finish
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

TEST(TimedLaneTest, ConcurrentCallersAreSerialised) {
  TimedLane lane("shared");
  auto counter = std::make_shared<int>(0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&lane, counter] {
      for (int i = 0; i < 100; ++i) {
        ASSERT_TRUE(lane.Run([counter] { ++*counter; }, absl::Seconds(5), "inc").ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*counter, 400);
}

}  // namespace
}  // namespace gpulet
