// `gpulet explain [--json] TEXT...`: the cause and fix of an error message (doctor/explain.h).
// The arguments are joined with spaces; a single "-" reads the text from standard input, so
// a whole log can be piped in (`kubectl logs ... | gpulet explain -`, `dmesg | gpulet
// explain -`).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "cli/commands.h"
#include "doctor/explain.h"
#include "nlohmann/json.hpp"

namespace gpulet {
namespace {

// Standard input is a log someone piped in; more than this is not a message to explain.
constexpr size_t kMaxInput = 16 << 20;

constexpr size_t kWidth = 100;

// Prints `label` then `text`, wrapped at kWidth with continuation lines indented.
void PrintWrapped(absl::string_view label, absl::string_view text) {
  const std::string indent(label.size(), ' ');
  std::string line(label);
  size_t line_start_len = line.size();
  for (size_t i = 0; i < text.size();) {
    size_t space = text.find(' ', i);
    absl::string_view word =
        text.substr(i, space == absl::string_view::npos ? text.size() - i : space - i);
    i = space == absl::string_view::npos ? text.size() : space + 1;
    if (word.empty()) continue;
    if (line.size() > line_start_len && line.size() + 1 + word.size() > kWidth) {
      std::printf("%s\n", line.c_str());
      line = indent;
      line_start_len = line.size();
    }
    if (line.size() > line_start_len) line += ' ';
    line.append(word.data(), word.size());
  }
  std::printf("%s\n", line.c_str());
}

class ExplainCommand final : public CommandHandler {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_flag("--json", json_, "Print JSON instead of text");
    app.add_option("text", words_,
                   "The error message (quote it); '-' reads it from standard input");
  }

  int Run(CommandContext&) override {
    std::string text;
    if (words_.size() == 1 && words_[0] == "-") {
      if (!ReadStdin(&text)) return kExitUsage;
    } else {
      text = absl::StrJoin(words_, " ");
    }
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
      std::fprintf(stderr,
                   "gpulet explain: give the error message to explain, e.g.\n"
                   "  gpulet explain 'Failed to initialize NVML: Driver/library version "
                   "mismatch'\n  dmesg | gpulet explain -\n");
      return kExitUsage;
    }
    std::vector<Explanation> found = Explain(text);
    if (json_) {
      PrintJson(found);
    } else if (found.empty()) {
      std::printf(
          "gpulet does not recognise this message.\n"
          "Run `gpulet doctor` on the node: it checks the driver, the NVML library, the device "
          "nodes, the container runtime and the kernel log.\n");
    } else {
      PrintHuman(found);
    }
    return found.empty() ? kExitFailure : kExitOk;
  }

 private:
  static bool ReadStdin(std::string* text) {
    char buffer[65536];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), stdin)) > 0) {
      text->append(buffer, n);
      if (text->size() > kMaxInput) {
        std::fprintf(stderr,
                     "gpulet explain: standard input is larger than %zu MiB; pass the relevant "
                     "lines only (for example `dmesg | grep NVRM | gpulet explain -`)\n",
                     kMaxInput >> 20);
        return false;
      }
    }
    if (std::ferror(stdin)) {
      std::fprintf(stderr, "gpulet explain: reading standard input failed\n");
      return false;
    }
    return true;
  }

  static void PrintHuman(const std::vector<Explanation>& found) {
    for (size_t i = 0; i < found.size(); ++i) {
      const Explanation& e = found[i];
      if (i > 0) std::printf("\n");
      PrintWrapped(found.size() > 1 ? std::to_string(i + 1) + ". " : "", e.title);
      PrintWrapped("   Cause:   ", e.cause);
      PrintWrapped("   Fix:     ", e.fix);
      if (!e.matched.empty()) PrintWrapped("   Matched: ", e.matched);
      PrintWrapped("   Source:  ", e.source);
    }
    if (found.size() > 1) {
      std::printf("\n%zu explanations matched; the message may have more than one cause.\n",
                  found.size());
    }
  }

  static void PrintJson(const std::vector<Explanation>& found) {
    nlohmann::ordered_json out;
    out["recognised"] = !found.empty();
    out["explanations"] = nlohmann::ordered_json::array();
    for (const Explanation& e : found) {
      nlohmann::ordered_json j;
      j["id"] = e.id;
      j["title"] = e.title;
      j["cause"] = e.cause;
      j["fix"] = e.fix;
      j["source"] = e.source;
      j["matched"] = e.matched;
      nlohmann::ordered_json details = nlohmann::ordered_json::object();
      for (const auto& [k, v] : e.details) details[k] = v;
      j["details"] = details;
      out["explanations"].push_back(j);
    }
    if (found.empty()) {
      out["hint"] = "gpulet does not recognise this message; run `gpulet doctor` on the node";
    }
    // Input may hold bytes that are not UTF-8 (a raw log); replace them instead of throwing.
    std::printf("%s\n",
                out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  }

  bool json_ = false;
  std::vector<std::string> words_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeExplainCommand() { return std::make_unique<ExplainCommand>(); }

}  // namespace gpulet
