#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpulet {
namespace {

using ::testing::HasSubstr;

TEST(SubprocessTest, ExitStatusTable) {
  struct Case {
    std::vector<std::string> argv;
    int exit_code;
  };
  const Case kCases[] = {
      {{"/bin/true"}, 0},
      {{"/bin/false"}, 1},
      {{"/bin/sh", "-c", "exit 3"}, 3},
      {{"/bin/sh", "-c", "exit 255"}, 255},
      {{"true"}, 0},  // found in $PATH
  };
  for (const Case& c : kCases) {
    absl::StatusOr<SubprocessResult> r = RunSubprocess(c.argv);
    ASSERT_TRUE(r.ok()) << c.argv[0] << ": " << r.status();
    EXPECT_TRUE(r->exited) << c.argv.back();
    EXPECT_EQ(r->exit_code, c.exit_code) << c.argv.back();
    EXPECT_EQ(r->ok(), c.exit_code == 0) << c.argv.back();
    EXPECT_FALSE(r->timed_out);
    EXPECT_EQ(r->Describe(), absl::StrCat("exit status ", c.exit_code));
  }
}

TEST(SubprocessTest, CapturesStdoutAndStderrSeparately) {
  absl::StatusOr<SubprocessResult> r =
      RunSubprocess({"/bin/sh", "-c", "printf 'out\\n'; printf 'err' >&2; printf 'more'"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "out\nmore");
  EXPECT_EQ(r->err, "err");
  EXPECT_FALSE(r->truncated);
}

TEST(SubprocessTest, ArgumentsAreNeverInterpretedByAShell) {
  absl::StatusOr<SubprocessResult> r =
      RunSubprocess({"/bin/echo", "$HOME", "a b", "*", "; rm -rf /", "`id`"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "$HOME a b * ; rm -rf / `id`\n");
}

TEST(SubprocessTest, EnvironmentIsInheritedWithOverrides) {
  setenv("GPULET_SUBPROCESS_TEST_KEEP", "kept", 1);
  setenv("GPULET_SUBPROCESS_TEST_SET", "old", 1);
  SubprocessOptions options;
  options.env = {{"GPULET_SUBPROCESS_TEST_SET", "new"}, {"GPULET_SUBPROCESS_TEST_ADD", "added"}};
  absl::StatusOr<SubprocessResult> r =
      RunSubprocess({"/bin/sh", "-c",
                     "echo $GPULET_SUBPROCESS_TEST_KEEP $GPULET_SUBPROCESS_TEST_SET "
                     "$GPULET_SUBPROCESS_TEST_ADD"},
                    options);
  unsetenv("GPULET_SUBPROCESS_TEST_KEEP");
  unsetenv("GPULET_SUBPROCESS_TEST_SET");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "kept new added\n");
}

TEST(SubprocessTest, DeadlineKillsTheChild) {
  SubprocessOptions options;
  // Long enough for the shell to start and print under a loaded sanitizer run (50 ms was
  // not: make test once saw the child killed before its echo), far below the sleep.
  options.deadline = absl::Seconds(2);
  absl::StatusOr<SubprocessResult> r =
      RunSubprocess({"/bin/sh", "-c", "echo started; exec sleep 30"}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->exited);
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_EQ(r->out, "started\n") << "output before the deadline is kept";
  EXPECT_LT(r->elapsed, absl::Seconds(5));
  EXPECT_THAT(r->Describe(), HasSubstr("deadline"));
}

// A child that closes its output and keeps running is still held to the deadline.
TEST(SubprocessTest, DeadlineHoldsAfterTheChildClosesItsOutput) {
  SubprocessOptions options;
  options.deadline = absl::Milliseconds(50);
  absl::StatusOr<SubprocessResult> r =
      RunSubprocess({"/bin/sh", "-c", "exec >&- 2>&-; exec sleep 30"}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->timed_out);
  EXPECT_LT(r->elapsed, absl::Seconds(5));
}

TEST(SubprocessTest, AChildKilledByASignalSaysWhich) {
  absl::StatusOr<SubprocessResult> r = RunSubprocess({"/bin/sh", "-c", "kill -USR1 $$"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->exited);
  EXPECT_EQ(r->exit_code, -1);
  EXPECT_EQ(r->signal, SIGUSR1);  // a signal that leaves no core file behind
  EXPECT_EQ(r->Describe(), "killed by SIGUSR1");
}

TEST(SubprocessTest, AProgramThatCannotRunIsAnErrorNamingIt) {
  // A file without execute permission, and an executable that is no program.
  const std::string dir = ::testing::TempDir();
  const std::string not_executable = dir + "/gpulet-subprocess-not-executable";
  const std::string not_a_program = dir + "/gpulet-subprocess-not-a-program";
  for (const auto& [path, mode] : {std::pair{not_executable, 0644}, {not_a_program, 0755}}) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(write(fd, "\x01\x02garbage", 9), 9);
    fchmod(fd, static_cast<mode_t>(mode));
    close(fd);
  }
  struct Case {
    std::vector<std::string> argv;
    absl::StatusCode code;
    std::string names;
  };
  const Case kCases[] = {
      {{"/nonexistent/gpulet-no-such-program"},
       absl::StatusCode::kNotFound,
       "/nonexistent/gpulet-no-such-program"},
      {{"gpulet-no-such-program-in-path"},
       absl::StatusCode::kNotFound,
       "gpulet-no-such-program-in-path"},
      {{not_executable}, absl::StatusCode::kPermissionDenied, not_executable},
      {{not_a_program}, absl::StatusCode::kFailedPrecondition, "Exec format error"},
      {{}, absl::StatusCode::kInvalidArgument, "no program"},
  };
  for (const Case& c : kCases) {
    absl::StatusOr<SubprocessResult> r = RunSubprocess(c.argv);
    ASSERT_FALSE(r.ok()) << (c.argv.empty() ? "(empty)" : c.argv[0]);
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.names));
  }
  unlink(not_executable.c_str());
  unlink(not_a_program.c_str());
}

TEST(SubprocessTest, OutputIsCapped) {
  SubprocessOptions options;
  options.max_output_bytes = 1000;
  absl::StatusOr<SubprocessResult> r =
      RunSubprocess({"/usr/bin/head", "-c", "200000", "/dev/zero"}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << "the child was never blocked on a full pipe";
  EXPECT_EQ(r->out.size(), 1000u);
  EXPECT_TRUE(r->truncated);
}

// The child inherits exactly stdin (/dev/null), stdout and stderr: not gpulet's other
// descriptors, even those opened without O_CLOEXEC.
TEST(SubprocessTest, TheChildInheritsOnlyTheStandardDescriptors) {
  // Deliberately without O_CLOEXEC, and above 3 (where the child parks its own pipe).
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(devnull, 0);
  int leaked = fcntl(devnull, F_DUPFD, 5);
  close(devnull);
  ASSERT_GE(leaked, 5);
  absl::StatusOr<SubprocessResult> r =
      RunSubprocess({"/bin/sh", "-c", "ls /proc/$$/fd; readlink /proc/$$/fd/0"});
  close(leaked);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> lines = absl::StrSplit(r->out, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "/dev/null");
  lines.pop_back();
  for (const std::string& fd : lines) {
    // The shell may hold one descriptor of its own (10 or above, for its script).
    int n = std::stoi(fd);
    EXPECT_TRUE(n <= 2 || n >= 10) << "inherited fd " << fd << " in:\n" << r->out;
  }
}

// gpulet serve blocks its signals for sigtimedwait; a child must not inherit that mask.
TEST(SubprocessTest, TheChildStartsWithNoSignalsBlocked) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  absl::StatusOr<SubprocessResult> r = RunSubprocess({"/bin/sh", "-c", "kill -TERM $$; exit 0"});
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->signal, SIGTERM) << r->Describe();
}

TEST(RunInChildTest, CollectsWhatTheChildWrites) {
  absl::StatusOr<SubprocessResult> r = RunInChild([](int fd) {
    const char text[] = "hello from the child";
    (void)!write(fd, text, sizeof(text) - 1);
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "hello from the child");
  EXPECT_TRUE(r->ok());
}

TEST(RunInChildTest, ExitCrashAndDeadline) {
  absl::StatusOr<SubprocessResult> exited = RunInChild([](int) { _exit(7); });
  ASSERT_TRUE(exited.ok());
  EXPECT_EQ(exited->exit_code, 7);

  absl::StatusOr<SubprocessResult> crashed = RunInChild([](int) {
    signal(SIGUSR1, SIG_DFL);
    raise(SIGUSR1);
  });
  ASSERT_TRUE(crashed.ok());
  EXPECT_FALSE(crashed->exited);
  EXPECT_EQ(crashed->signal, SIGUSR1);

  SubprocessOptions options;
  options.deadline = absl::Milliseconds(30);
  absl::StatusOr<SubprocessResult> hung = RunInChild(
      [](int fd) {
        (void)!write(fd, "x", 1);
        while (true) pause();
      },
      options);
  ASSERT_TRUE(hung.ok());
  EXPECT_TRUE(hung->timed_out);
  EXPECT_EQ(hung->out, "x");
}

// Every child dies with gpulet: the parent-death signal is set before the child's code runs.
TEST(RunInChildTest, TheChildDiesWithItsParent) {
  absl::StatusOr<SubprocessResult> r = RunInChild([](int fd) {
    int sig = 0;
    prctl(PR_GET_PDEATHSIG, &sig);
    char c = static_cast<char>('0' + (sig == SIGKILL));
    (void)!write(fd, &c, 1);
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "1");
}

TEST(SubprocessTest, SignalNames) {
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
}

}  // namespace
}  // namespace gpulet
