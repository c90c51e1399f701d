// `gpulet postmortem [--dir DIR] [--gpu GPU] [--all] [--json] [--svg FILE|-] [FILE...]`: reads
// the flight recorder's files (recorder/recorder_files.h) back and says, for each GPU's
// latest fault (or every fault with --all), what happened as a timeline and what caused it
// as a verdict with its evidence (recorder/postmortem.h). --svg writes the timeline as a
// picture. Files come from DIR (health.recorder.dir, default /var/lib/gpulet/recorder)
// under --host-root, or are named on the command line.
//
// A file that cannot be read is reported (which file, what is wrong, what to do) and the
// others are still shown. Exit status: 0 when every file was read (with or without faults),
// 1 when one could not be, 2 on usage errors (an unknown GPU, --svg matching several
// faults).
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "common/atomic_file.h"
#include "common/host_fs.h"
#include "common/read_file.h"
#include "nlohmann/json.hpp"
#include "recorder/postmortem.h"
#include "recorder/recorder_files.h"

namespace gpulet::cli {
namespace {

class PostmortemCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--dir", dir_,
                   "The recorder's directory on the host (health.recorder.dir), under "
                   "--host-root")
        ->capture_default_str();
    app.add_option("--gpu", gpu_, "Only this GPU: its UUID, a prefix of it, or its index");
    app.add_flag("--all", all_, "Every recorded fault, not only each GPU's latest");
    app.add_flag("--json", json_, "Print the verdicts as JSON instead of timelines");
    app.add_option("--svg", svg_,
                   "Write the timeline of the (one) selected fault as an SVG image ('-': to "
                   "standard output, alone)");
    app.add_option("files", files_, "Recorder files to read instead of the directory");
  }

  int Run(CommandContext& ctx) override {
    std::vector<recorder::RecorderFiles::Loaded> loaded;
    std::string where;
    if (!files_.empty()) {
      where = "the files given";
      for (const std::string& path : files_) {
        absl::StatusOr<std::string> text =
            ReadRegularFile(path, recorder::kMaxRecorderFileBytes, "flight recorder file");
        if (!text.ok()) {
          loaded.push_back({path, text.status()});
          continue;
        }
        absl::StatusOr<recorder::RecorderDump> dump = recorder::DumpFromJson(*text);
        if (!dump.ok()) {
          loaded.push_back({path, absl::InvalidArgumentError(
                                      absl::StrCat(path, ": ", dump.status().message()))});
        } else {
          loaded.push_back({path, std::move(*dump)});
        }
      }
    } else {
      HostFs host(ctx.global.host_root);
      absl::StatusOr<std::string> local = host.Resolve(dir_);
      if (!local.ok()) {
        std::fprintf(stderr, "gpulet postmortem: %s\n",
                     std::string(local.status().message()).c_str());
        return kExitFailure;
      }
      where = host.Describe(dir_);
      loaded = recorder::RecorderFiles(*local, dir_).LoadAll();
    }
    int exit = kExitOk;
    std::map<std::string, std::vector<recorder::RecorderDump>> by_gpu;  // oldest fault first
    for (recorder::RecorderFiles::Loaded& l : loaded) {
      if (!l.dump.ok()) {
        std::fprintf(stderr, "gpulet postmortem: %s\n",
                     std::string(l.dump.status().message()).c_str());
        exit = kExitFailure;
        continue;
      }
      by_gpu[l.dump->uuid].push_back(std::move(*l.dump));
    }
    for (auto& [uuid, dumps] : by_gpu) {
      std::sort(dumps.begin(), dumps.end(),
                [](const recorder::RecorderDump& a, const recorder::RecorderDump& b) {
                  return a.fault_ms < b.fault_ms;
                });
    }
    // The faults to show: each selected GPU's latest, or all of them.
    struct Shown {
      const recorder::RecorderDump* dump;
      recorder::Verdict verdict;
    };
    std::vector<Shown> shown;
    bool gpu_known = gpu_.empty();
    for (const auto& [uuid, dumps] : by_gpu) {
      const recorder::RecorderDump& last = dumps.back();
      bool match = gpu_.empty() || absl::StartsWithIgnoreCase(uuid, gpu_) ||
                   (last.index && absl::StrCat(*last.index) == gpu_);
      if (!match) continue;
      gpu_known = true;
      for (size_t i = all_ ? 0 : dumps.size() - 1; i < dumps.size(); ++i) {
        std::span<const recorder::RecorderDump> earlier(dumps.data(), i);
        shown.push_back({&dumps[i], recorder::Assess(dumps[i], earlier)});
      }
    }
    if (!gpu_known) {
      std::fprintf(stderr,
                   "gpulet postmortem: no recorded fault names GPU %s in %s; run without --gpu to "
                   "see them all\n",
                   gpu_.c_str(), where.c_str());
      return kExitUsage;
    }
    if (!svg_.empty()) {
      if (shown.size() != 1) {
        std::fprintf(stderr,
                     "gpulet postmortem: --svg draws one fault and %zu are selected; choose one "
                     "with --gpu (and without --all)\n",
                     shown.size());
        return kExitUsage;
      }
      if (svg_ == "-") {  // to standard output, e.g. out of a pod: `kubectl exec ... > f.svg`
        std::string svg = recorder::TimelineSvg(*shown[0].dump, shown[0].verdict);
        std::fwrite(svg.data(), 1, svg.size(), stdout);
        return exit;
      }
      AtomicWriteOptions options;
      options.mode = 0644;
      if (absl::Status s = WriteFileAtomically(
              svg_, recorder::TimelineSvg(*shown[0].dump, shown[0].verdict), options);
          !s.ok()) {
        std::fprintf(stderr, "gpulet postmortem: writing the SVG: %s\n",
                     std::string(s.message()).c_str());
        return kExitFailure;
      }
    }
    if (json_) {
      nlohmann::json out = nlohmann::json::array();
      for (const Shown& s : shown) {
        nlohmann::json evidence = nlohmann::json::array();
        for (const recorder::Evidence& e : s.verdict.evidence) {
          nlohmann::json j = {{"text", e.text}};
          if (e.at_ms != 0) j["at"] = recorder::FormatMillis(e.at_ms);
          evidence.push_back(std::move(j));
        }
        out.push_back({{"uuid", s.dump->uuid},
                       {"fault_at", recorder::FormatMillis(s.dump->fault_ms)},
                       {"fault", s.dump->fault},
                       {"verdict", recorder::CauseName(s.verdict.cause)},
                       {"headline", s.verdict.headline},
                       {"next", s.verdict.next},
                       {"evidence", std::move(evidence)}});
      }
      std::printf("%s\n",
                  out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      return exit;
    }
    if (shown.empty() && exit == kExitOk) {
      std::printf("No GPU faults recorded in %s.\n", where.c_str());
    }
    for (size_t i = 0; i < shown.size(); ++i) {
      if (i > 0) std::printf("\n");
      std::printf("%s", recorder::TimelineText(*shown[i].dump, shown[i].verdict).c_str());
    }
    return exit;
  }

 private:
  std::string dir_ = "/var/lib/gpulet/recorder";
  std::string gpu_;
  bool all_ = false;
  bool json_ = false;
  std::string svg_;
  std::vector<std::string> files_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakePostmortemCommand() {
  return std::make_unique<PostmortemCommand>();
}

}  // namespace gpulet::cli
