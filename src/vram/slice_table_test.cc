// The slice file's accounting in one process: grants and refusals at the quota, settling a
// grant the driver changed, the header checks that make a library fail closed, and the
// daemon's reading of what the library wrote. Liveness across processes (a dead process's
// memory given back) needs real processes: VramLibTest covers it.
#include "vram/slice_table.h"

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "vram/slice_file.h"
#include "vram/slice_format.h"

namespace gpulet::vram {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;

class SliceTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteSliceFile(dir_.path(), "GPU-a--mem0", 8 * kGiB, "GPU-a", "pod/ctr").ok());
    path_ = dir_.path() + "/GPU-a--mem0/slice";
    char msg[512];
    ASSERT_EQ(OpenSlice(path_.c_str(), true, &map_, msg, sizeof(msg)), SliceError::kOk) << msg;
    ASSERT_EQ(ClaimSlot(&map_, 42, &slot_), SliceError::kOk);
  }
  void TearDown() override { CloseSlice(&map_); }

  testing::ScratchDir dir_;
  std::string path_;
  SliceMap map_;
  uint32_t slot_ = kNoSlot;
};

TEST_F(SliceTableTest, GrantsUpToTheQuotaAndRefusesPastIt) {
  Grant g = Reserve(&map_, slot_, 6 * kGiB);
  ASSERT_TRUE(g.granted);
  EXPECT_EQ(g.in_use, 0u);
  EXPECT_EQ(InUse(map_), 6 * kGiB);  // a grant in flight counts
  Settle(&map_, slot_, 6 * kGiB, 6 * kGiB);
  EXPECT_EQ(InUse(map_), 6 * kGiB);
  g = Reserve(&map_, slot_, 3 * kGiB);
  EXPECT_FALSE(g.granted);
  EXPECT_EQ(g.in_use, 6 * kGiB);
  EXPECT_EQ(g.quota, 8 * kGiB);
  g = Reserve(&map_, slot_, 2 * kGiB);  // exactly to the quota
  ASSERT_TRUE(g.granted);
  Settle(&map_, slot_, 2 * kGiB, 0);  // the driver refused: nothing held
  EXPECT_EQ(InUse(map_), 6 * kGiB);
  Release(&map_, slot_, 6 * kGiB);
  EXPECT_EQ(InUse(map_), 0u);
  EXPECT_EQ(map_.header->peak_bytes, 8 * kGiB);
  EXPECT_EQ(map_.header->refused_total, 1u);
  EXPECT_EQ(map_.header->refused_bytes, 3 * kGiB);
}

TEST_F(SliceTableTest, SizesNearTheLimitsOfTheCounterAreRefusedNotWrapped) {
  EXPECT_FALSE(Reserve(&map_, slot_, UINT64_MAX).granted);
  ASSERT_TRUE(Reserve(&map_, slot_, 1).granted);
  EXPECT_FALSE(Reserve(&map_, slot_, UINT64_MAX - 1).granted);
  Release(&map_, slot_, 5);  // more than held: the counter stops at zero
  EXPECT_EQ(map_.slots[slot_].used_bytes, 0u);
}

TEST_F(SliceTableTest, ALargerSizeThanGrantedIsCounted) {
  ASSERT_TRUE(Reserve(&map_, slot_, kGiB).granted);
  Settle(&map_, slot_, kGiB, kGiB + 4096);  // a pitch the driver rounded up
  EXPECT_EQ(InUse(map_), kGiB + 4096);
  EXPECT_EQ(map_.slots[slot_].allocations, 1u);
}

TEST_F(SliceTableTest, TheDaemonReadsWhatTheLibraryWrote) {
  ASSERT_TRUE(Reserve(&map_, slot_, 3 * kGiB).granted);
  Settle(&map_, slot_, 3 * kGiB, 3 * kGiB);
  EXPECT_FALSE(Reserve(&map_, slot_, 6 * kGiB).granted);
  absl::StatusOr<SliceUsage> u = ReadSliceUsage(path_);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->quota_bytes, 8 * kGiB);
  EXPECT_EQ(u->in_use_bytes, 3 * kGiB);
  EXPECT_EQ(u->refused, 1u);
  EXPECT_EQ(u->gpu_uuid, "GPU-a");
  EXPECT_EQ(u->owner, "pod/ctr");
  // This process's own lock is invisible to itself (POSIX), so the slot reads as a dead
  // process's: a daemon in another process sees it held (VramLibTest).
  EXPECT_TRUE(u->processes.empty());
}

TEST_F(SliceTableTest, ALockLeftByADeadProcessOrCorruptIsTakenOver) {
  // Found by slice_file_fuzz: a lock word no holder could have written made every allocation
  // wait forever.
  map_.header->lock = 0xffffff77u;
  EXPECT_TRUE(Reserve(&map_, slot_, kGiB).granted);
  EXPECT_EQ(map_.header->lock, 0u);
  map_.header->lock = 3;  // slot 2, which no live process holds
  EXPECT_TRUE(Reserve(&map_, slot_, kGiB).granted);
  map_.header->slots_in_use = 0xffffffffu;  // clamped to the slots there are
  EXPECT_EQ(InUse(map_), 2 * kGiB);
}

TEST(SliceHeaderTest, EveryDefectIsNamedWithTheFileAndWhatToDo) {
  SliceHeader good;
  FormatSliceHeader(&good, kGiB, "GPU-a", "pod/ctr");
  char msg[512];
  EXPECT_EQ(CheckSliceHeader(good, kSliceFileSize, "/s", msg, sizeof(msg)), SliceError::kOk);

  EXPECT_EQ(CheckSliceHeader(good, 100, "/s", msg, sizeof(msg)), SliceError::kTooSmall);
  EXPECT_THAT(msg, HasSubstr("slice file /s is 100 bytes"));
  EXPECT_EQ(CheckSliceHeader(good, kSliceHeaderSize + 10, "/s", msg, sizeof(msg)),
            SliceError::kBadLayout);
  EXPECT_THAT(msg, HasSubstr("is corrupt"));

  SliceHeader h = good;
  h.magic[0] = 'X';
  EXPECT_EQ(CheckSliceHeader(h, kSliceFileSize, "/s", msg, sizeof(msg)), SliceError::kBadMagic);
  EXPECT_THAT(msg, HasSubstr("/s is not a gpulet slice file"));

  h = good;
  h.major = kSliceFormatMajor + 1;
  EXPECT_EQ(CheckSliceHeader(h, kSliceFileSize, "/s", msg, sizeof(msg)), SliceError::kNewerFormat);
  EXPECT_THAT(msg, HasSubstr("restart the pod"));

  h = good;
  h.minor = 99;  // appended fields: still read
  EXPECT_EQ(CheckSliceHeader(h, kSliceFileSize, "/s", msg, sizeof(msg)), SliceError::kOk);

  for (auto corrupt :
       {+[](SliceHeader* x) { x->slot_size = 32; },
        +[](SliceHeader* x) { x->slot_count = kSliceSlotCount + 1; },
        +[](SliceHeader* x) { x->header_size = 0; }, +[](SliceHeader* x) { x->major = 0; }}) {
    h = good;
    corrupt(&h);
    EXPECT_EQ(CheckSliceHeader(h, kSliceFileSize, "/s", msg, sizeof(msg)), SliceError::kBadLayout);
  }
  h = good;
  h.quota_bytes = 0;
  EXPECT_EQ(CheckSliceHeader(h, kSliceFileSize, "/s", msg, sizeof(msg)), SliceError::kBadLayout);
  EXPECT_THAT(msg, HasSubstr("holds no quota"));
}

TEST(SliceFileTest, ReadingABadFileSaysWhatIsWrongWithACode) {
  testing::ScratchDir dir;
  EXPECT_EQ(ReadSliceUsage(dir.path() + "/none").status().code(), absl::StatusCode::kNotFound);
  std::string junk = dir.Write("junk", std::string(kSliceFileSize, 'j'));
  absl::StatusOr<SliceUsage> u = ReadSliceUsage(junk);
  EXPECT_EQ(u.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(u.status().message(), HasSubstr(junk));
}

TEST(SliceFileTest, AllocationDirectoriesAreNamedByTheLowestIdAsOnePathComponent) {
  EXPECT_EQ(AllocationDirName({"GPU-b::mem3", "GPU-b::mem1", "GPU-b::mem2"}), "GPU-b--mem1");
  EXPECT_EQ(AllocationDirName({"../../etc"}), "..-..-etc");
  EXPECT_EQ(AllocationDirName({".."}), "a..");
  EXPECT_EQ(AllocationDirName({"a/b c"}), "a-b-c");
}

TEST(SliceFileTest, TheLibraryIsFoundBesideGpuletOrInItsLibDirectory) {
  testing::ScratchDir dir;
  dir.Write("bin/gpulet", "");
  absl::StatusOr<std::string> p = FindLibraryBeside(dir.path() + "/bin/gpulet");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr("lib/gpulet/libgpulet-vram.so"));
  dir.Write("lib/gpulet/libgpulet-vram.so", "elf");
  p = FindLibraryBeside(dir.path() + "/bin/gpulet");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(*p, HasSubstr("lib/gpulet/libgpulet-vram.so"));
  dir.Write("bin/libgpulet-vram.so", "elf");
  EXPECT_EQ(*FindLibraryBeside(dir.path() + "/bin/gpulet"), dir.path() + "/bin/libgpulet-vram.so");
}

TEST(SliceFileTest, InstallingTheLibraryReplacesItOnlyWhenItChanged) {
  testing::ScratchDir dir;
  std::string src = dir.Write("src.so", "one");
  ASSERT_TRUE(InstallLibrary(src, dir.path() + "/host").ok());
  std::string target = dir.path() + "/host/lib/libgpulet-vram.so";
  EXPECT_EQ(testing::ReadTextFile(target), "one");
  struct stat before {};
  stat(target.c_str(), &before);
  ASSERT_TRUE(InstallLibrary(src, dir.path() + "/host").ok());
  struct stat same {};
  stat(target.c_str(), &same);
  EXPECT_EQ(before.st_ino, same.st_ino);  // untouched
  dir.Write("src.so", "two");
  ASSERT_TRUE(InstallLibrary(src, dir.path() + "/host").ok());
  EXPECT_EQ(testing::ReadTextFile(target), "two");
  EXPECT_THAT(InstallLibrary(dir.path() + "/none.so", dir.path() + "/host").message(),
              HasSubstr("reading the VRAM enforcement library"));
}

}  // namespace
}  // namespace gpulet::vram
