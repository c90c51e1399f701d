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
#include "doctor/explain_check.h"
#include "nlohmann/json.hpp"

namespace gpulet::cli {
namespace {

constexpr size_t kWidth = 100;

// How a message gpulet does not know gets known.
constexpr const char* kReportUnknown =
    "To have it explained, report it to gpulet's maintainers with the whole message, the "
    "program that printed it and its version, and where you met it (an issue thread, a log); "
    "or add an entry to src/doctor/explain/ (its README.md gives the format).";

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
    app.add_flag("--check", check_,
                 "Run gpulet doctor's checks on this node (or --host-root) and say, for each "
                 "explanation, whether its cause is found here and which of several causes "
                 "the checks point at");
    app.add_option("--config", doctor_.config_file,
                   "With --check: the daemon's config file (default: $GPULET_CONFIG)")
        ->envname("GPULET_CONFIG");
    app.add_option("text", words_,
                   "The error message (quote it); '-' reads it from standard input");
  }

  int Run(CommandContext& ctx) override {
    doctor::ExplainResult result;
    bool empty = true;
    if (words_.size() == 1 && words_[0] == "-") {
      if (!ReadStdin(&result, &empty)) return kExitUsage;
    } else {
      std::string text = absl::StrJoin(words_, " ");
      empty = text.find_first_not_of(" \t\r\n") == std::string::npos;
      result = doctor::ExplainText(text);
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
    std::optional<doctor::Report> report;
    if (check_ && !result.found.empty()) {
      report = DoctorOnNode(ctx, doctor_, "gpulet explain --check");
      if (!report) return kExitUsage;
      for (const doctor::Explanation& e : result.found)
        answers_.push_back(doctor::AnswerOnNode(e, *report));
    }
    if (json_) {
      PrintJson(result);
    } else if (result.found.empty()) {
      std::printf(
          "gpulet does not recognise this message.\n"
          "Run `gpulet doctor` on the node: it checks the driver, the NVML library, the device "
          "nodes, the container runtime and the kernel log.\n%s\n",
          kReportUnknown);
      PrintTruncation(result);
    } else {
      PrintHuman(result);
    }
    return result.found.empty() ? kExitFailure : kExitOk;
  }

 private:
  // Streams standard input through a LogExplainer. `empty` stays true while only whitespace
  // was read.
  static bool ReadStdin(doctor::ExplainResult* result, bool* empty) {
    doctor::LogExplainer explainer;
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

  static void PrintTruncation(const doctor::ExplainResult& r) {
    if (r.truncated_lines == 0) return;
    std::printf(
        "\nNote: %zu line(s) longer than %zu KiB were matched on their first %zu KiB only.\n",
        r.truncated_lines, doctor::kExplainMaxLine >> 10, doctor::kExplainMaxLine >> 10);
  }

  void PrintHuman(const doctor::ExplainResult& r) const {
    const std::vector<doctor::Explanation>& found = r.found;
    for (size_t i = 0; i < found.size(); ++i) {
      const doctor::Explanation& e = found[i];
      if (i > 0) std::printf("\n");
      std::string label = found.size() > 1 ? std::to_string(i + 1) + ". " : "";
      PrintWrapped(label, absl::StrCat(e.title, " [", e.severity, "]"));
      PrintWrapped("   Cause:   ", e.cause);
      for (size_t c = 0; c < e.candidates.size(); ++c) {
        const doctor::ExplainCandidate& k = e.candidates[c];
        PrintWrapped(absl::StrCat("   ", c + 1, ") "), k.cause);
        PrintWrapped("      Tell: ",
                     k.check.empty() ? k.question
                                     : absl::StrCat(k.question, " (gpulet doctor: ", k.check, ")"));
      }
      PrintWrapped("   Fix:     ", e.fix);
      if (!e.fix_talos.empty()) PrintWrapped("   Talos:   ", e.fix_talos);
      if (!e.check.empty())
        PrintWrapped("   Check:   ", absl::StrCat("gpulet doctor (", e.check, ")"));
      if (!e.matched.empty()) {
        PrintWrapped("   Matched: ",
                     e.line > 0 ? absl::StrCat("line ", e.line, ": ", e.matched) : e.matched);
      }
      PrintWrapped("   Source:  ", e.source);
      if (i < answers_.size()) PrintWrapped("   Here:    ", answers_[i].summary);
    }
    if (found.size() > 1) {
      std::printf("\n%zu kinds of message recognised in %zu line(s), worst first.\n", found.size(),
                  r.lines);
    }
    PrintTruncation(r);
  }

  void PrintJson(const doctor::ExplainResult& r) const {
    nlohmann::ordered_json out;
    out["recognised"] = !r.found.empty();
    out["lines"] = r.lines;
    out["truncated_lines"] = r.truncated_lines;
    out["max_line_bytes"] = doctor::kExplainMaxLine;
    out["explanations"] = nlohmann::ordered_json::array();
    for (const doctor::Explanation& e : r.found) {
      nlohmann::ordered_json j;
      j["id"] = e.id;
      j["title"] = e.title;
      j["severity"] = e.severity;
      j["cause"] = e.cause;
      j["fix"] = e.fix;
      if (!e.fix_talos.empty()) j["fix_talos"] = e.fix_talos;
      if (!e.check.empty()) j["doctor_check"] = e.check;
      if (!e.candidates.empty()) {
        nlohmann::ordered_json candidates = nlohmann::ordered_json::array();
        for (const doctor::ExplainCandidate& k : e.candidates) {
          nlohmann::ordered_json c;
          c["cause"] = k.cause;
          c["question"] = k.question;
          if (!k.check.empty()) c["doctor_check"] = k.check;
          candidates.push_back(c);
        }
        j["candidates"] = candidates;
      }
      j["source"] = e.source;
      if (size_t i = &e - r.found.data(); i < answers_.size()) {
        const doctor::NodeAnswer& a = answers_[i];
        nlohmann::ordered_json here;
        here["summary"] = a.summary;
        if (a.check != nullptr) {
          here["check"] = {{"id", a.check->id},
                           {"verdict", std::string(doctor::VerdictName(a.check->verdict))},
                           {"summary", a.check->summary}};
        }
        if (a.likely) here["likely_candidate"] = *a.likely + 1;
        j["on_this_node"] = here;
      }
      j["matched"] = e.matched;
      if (e.line > 0) j["line"] = e.line;
      nlohmann::ordered_json details = nlohmann::ordered_json::object();
      for (const auto& [k, v] : e.details) details[k] = v;
      j["details"] = details;
      out["explanations"].push_back(j);
    }
    if (r.found.empty()) {
      out["hint"] = "gpulet does not recognise this message; run `gpulet doctor` on the node";
      out["report"] = kReportUnknown;
    }
    if (!r.catalogue_error.empty()) out["catalogue_error"] = r.catalogue_error;
    // Input may hold bytes that are not UTF-8 (a raw log); replace them instead of throwing.
    std::printf("%s\n",
                out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  }

  bool json_ = false;
  bool check_ = false;
  DoctorOptions doctor_;
  std::vector<doctor::NodeAnswer> answers_;  // with --check: one per explanation
  std::vector<std::string> words_;
};

}  // namespace

std::unique_ptr<CommandHandler> MakeExplainCommand() { return std::make_unique<ExplainCommand>(); }

}  // namespace gpulet::cli
