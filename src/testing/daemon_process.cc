#include "testing/daemon_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace gpulet::testing {
namespace {

int CountDirEntries(const std::string& dir) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
  }
  return n;
}

}  // namespace

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) Stop(SIGKILL, absl::Seconds(5));
}

bool DaemonProcess::Start(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          const std::string& log_file) {
  log_file_ = log_file;
  int fd = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 1);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    if (env.count(entry.substr(0, entry.find('='))) == 0) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (block_stop_signals_) {
    // As a supervisor may: the program starts with SIGTERM, SIGINT and SIGHUP blocked, so a
    // signal sent before its main() runs waits for it instead of taking the default action.
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    posix_spawnattr_setsigmask(&attr, &mask);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  }
  int rc = posix_spawn(&pid_, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  close(fd);
  if (rc != 0) pid_ = -1;
  return rc == 0;
}

bool DaemonProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  pid_t w = waitpid(pid_, &status, WNOHANG);
  if (w == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    pid_ = -1;
    return false;
  }
  return true;
}

int DaemonProcess::Stop(int sig, absl::Duration timeout) {
  if (pid_ <= 0) return exit_code_;
  kill(pid_, sig);
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    pid_t w = waitpid(pid_, &status, WNOHANG);
    if (w == pid_) {
      pid_ = -1;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return exit_code_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  exit_code_ = -1;
  return -1;
}

int DaemonProcess::CountFds() const {
  return CountDirEntries("/proc/" + std::to_string(pid_) + "/fd");
}

int DaemonProcess::CountThreads() const {
  return CountDirEntries("/proc/" + std::to_string(pid_) + "/task");
}

std::string DaemonProcess::Log() const {
  std::ifstream in(log_file_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gpulet::testing
