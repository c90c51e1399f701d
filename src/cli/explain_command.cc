// `gpulet explain [--json] TEXT...`: the cause and fix of an error message (doctor/explain.h).
// The arguments are joined with spaces; a single "-" reads the text from standard input, so
// a whole log can be piped in (`kubectl logs ... | gpulet explain -`, `dmesg | gpulet
// explain -`, `kubectl describe pod ... | gpulet explain -`). Standard input is streamed
// through a LogExplainer: any size is read in time linear in its length and bounded memory;
// each recognised kind of message is reported once, with its line number, worst first. Exit
// status: 0 when something was recognised, 1 when nothing was, 2 on usage errors.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "cli/commands.h"
#include "doctor/explain.h"
#include "nlohmann/json.hpp"

namespace gpulet {
namespace {

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
    ExplainResult result;
    bool empty = true;
    if (words_.size() == 1 && words_[0] == "-") {
      if (!ReadStdin(&result, &empty)) return kExitUsage;
    } else {
      std::string text = absl::StrJoin(words_, " ");
      empty = text.find_first_not_of(" \t\r\n") == std::string::npos;
      result = ExplainText(text);
    }
    if (empty) {
      std::fprintf(stderr,
                   "gpulet explain: give the error message to explain, e.g.\n"
                   "  gpulet explain 'Failed to initialize NVML: Driver/library version "
                   "mismatch'\n  dmesg | gpulet explain -\n");
      return kExitUsage;
    }
    if (!result.catalogue_error.empty()) {
      std::fprintf(stderr,
                   "gpulet explain: the message catalogue built into gpulet did not load (%s); "
                   "only NVML codes and XIDs are explained\n",
                   result.catalogue_error.c_str());
    }
    if (json_) {
      PrintJson(result);
    } else if (result.found.empty()) {
      std::printf(
          "gpulet does not recognise this message.\n"
          "Run `gpulet doctor` on the node: it checks the driver, the NVML library, the device "
          "nodes, the container runtime and the kernel log.\n");
      PrintTruncation(result);
    } else {
      PrintHuman(result);
    }
    return result.found.empty() ? kExitFailure : kExitOk;
  }

 private:
  // Streams standard input through a LogExplainer. `empty` stays true while only whitespace
  // was read.
  static bool ReadStdin(ExplainResult* result, bool* empty) {
    LogExplainer explainer;
    std::vector<char> buffer(1 << 20);
    size_t n;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), stdin)) > 0) {
      absl::string_view chunk(buffer.data(), n);
      if (*empty && chunk.find_first_not_of(" \t\r\n") != absl::string_view::npos) {
        *empty = false;
      }
      explainer.Feed(chunk);
    }
    if (std::ferror(stdin)) {
      std::fprintf(stderr, "gpulet explain: reading standard input failed\n");
      return false;
    }
    *result = explainer.Finish();
    return true;
  }

  static void PrintTruncation(const ExplainResult& r) {
    if (r.truncated_lines == 0) return;
    std::printf(
        "\nNote: %zu line(s) longer than %zu KiB were matched on their first %zu KiB only.\n",
        r.truncated_lines, kExplainMaxLine >> 10, kExplainMaxLine >> 10);
  }

  static void PrintHuman(const ExplainResult& r) {
    const std::vector<Explanation>& found = r.found;
    for (size_t i = 0; i < found.size(); ++i) {
      const Explanation& e = found[i];
      if (i > 0) std::printf("\n");
      std::string label = found.size() > 1 ? std::to_string(i + 1) + ". " : "";
      PrintWrapped(label, absl::StrCat(e.title, " [", e.severity, "]"));
      PrintWrapped("   Cause:   ", e.cause);
      PrintWrapped("   Fix:     ", e.fix);
      if (!e.fix_talos.empty()) PrintWrapped("   Talos:   ", e.fix_talos);
      if (!e.check.empty())
        PrintWrapped("   Check:   ", absl::StrCat("gpulet doctor (", e.check, ")"));
      if (!e.matched.empty()) {
        PrintWrapped("   Matched: ",
                     e.line > 0 ? absl::StrCat("line ", e.line, ": ", e.matched) : e.matched);
      }
      PrintWrapped("   Source:  ", e.source);
    }
    if (found.size() > 1) {
      std::printf("\n%zu kinds of message recognised in %zu line(s), worst first.\n", found.size(),
                  r.lines);
    }
    PrintTruncation(r);
  }

  static void PrintJson(const ExplainResult& r) {
    nlohmann::ordered_json out;
    out["recognised"] = !r.found.empty();
    out["lines"] = r.lines;
    out["truncated_lines"] = r.truncated_lines;
    out["max_line_bytes"] = kExplainMaxLine;
    out["explanations"] = nlohmann::ordered_json::array();
    for (const Explanation& e : r.found) {
      nlohmann::ordered_json j;
      j["id"] = e.id;
      j["title"] = e.title;
      j["severity"] = e.severity;
      j["cause"] = e.cause;
      j["fix"] = e.fix;
      if (!e.fix_talos.empty()) j["fix_talos"] = e.fix_talos;
      if (!e.check.empty()) j["doctor_check"] = e.check;
      j["source"] = e.source;
      j["matched"] = e.matched;
      if (e.line > 0) j["line"] = e.line;
      nlohmann::ordered_json details = nlohmann::ordered_json::object();
      for (const auto& [k, v] : e.details) details[k] = v;
      j["details"] = details;
      out["explanations"].push_back(j);
    }
    if (r.found.empty()) {
      out["hint"] = "gpulet does not recognise this message; run `gpulet doctor` on the node";
    }
    if (!r.catalogue_error.empty()) out["catalogue_error"] = r.catalogue_error;
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
