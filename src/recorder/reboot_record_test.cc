#include "recorder/reboot_record.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpulet::recorder {
namespace {

TEST(RebootRecordTest, RoundTripsAndRefusesWhatItDoesNotKnow) {
  std::vector<RebootRequest> r = {{1800000000, "b1", "XID 79", {"GPU-1", "GPU-2"}, "rebooted"},
                                  {1800000600, "b2", "lost", {}, "failed: no sentinel"}};
  absl::StatusOr<std::vector<RebootRequest>> back = RebootRecordFromJson(RebootRecordToJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  for (const char* bad :
       {"{", "[]", "{\"version\": 2, \"reboots\": []}", "{\"version\": 1, \"reboots\": {}}",
        "{\"version\": 1, \"reboots\": [], \"extra\": 1}",
        "{\"version\": 1, \"reboots\": [{\"at_unix\": -1, \"boot_id\": \"\", "
        "\"reason\": \"\", \"gpus\": [], \"outcome\": \"\"}]}",
        "{\"version\": 1, \"reboots\": [{\"at_unix\": 1, \"boot_id\": \"\", "
        "\"reason\": \"\", \"gpus\": [3], \"outcome\": \"\"}]}"}) {
    EXPECT_FALSE(RebootRecordFromJson(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace gpulet::recorder
