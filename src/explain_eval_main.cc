// gpulet-explain-eval: scores `gpulet explain` against the evaluation set of real messages
// (doctor/explain_eval.h), by area, and lists every miss; or explains one text with a
// catalogue read from files, to try an entry without rebuilding gpulet.
//
//   gpulet-explain-eval [--catalog DIR] [--min-recognised PCT] [--min-right PCT] FILE...
//   gpulet-explain-eval [--catalog DIR] --explain FILE|-
//
// --catalog DIR reads src/doctor/explain/*.yaml (or any folder of catalogue files) instead of
// the catalogue compiled in. Exit: 0 the scores meet the minimums (per area and overall),
// 1 they do not, 2 bad arguments or data (the message says which file and entry).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/read_file.h"
#include "doctor/explain.h"
#include "doctor/explain_eval.h"

namespace gpulet {
namespace {

constexpr size_t kMaxInputBytes = size_t{64} << 20;

int Usage(const char* why) {
  std::fprintf(stderr,
               "gpulet-explain-eval: %s\n"
               "usage: gpulet-explain-eval [--catalog DIR] [--min-recognised PCT] "
               "[--min-right PCT] FILE...\n"
               "       gpulet-explain-eval [--catalog DIR] --explain FILE|-\n",
               why);
  return 2;
}

double Percent(size_t part, size_t whole) { return whole == 0 ? 100.0 : 100.0 * part / whole; }

int Run(int argc, char** argv) {
  std::string catalog_dir, explain;
  double min_recognised = 0, min_right = 0;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "--catalog") {
      if (!value(&catalog_dir)) return Usage("--catalog needs a directory");
    } else if (arg == "--explain") {
      if (!value(&explain)) return Usage("--explain needs a file or -");
    } else if (arg == "--min-recognised" || arg == "--min-right") {
      double pct = 0;
      if (!value(&v) || !absl::SimpleAtod(v, &pct) || !(pct >= 0 && pct <= 100)) {
        return Usage(absl::StrCat(arg, " needs a percentage from 0 to 100").c_str());
      }
      (arg == "--min-right" ? min_right : min_recognised) = pct;
    } else if (!arg.empty() && arg[0] == '-' && arg != "-") {
      return Usage(absl::StrCat("unknown option ", arg).c_str());
    } else {
      files.push_back(arg);
    }
  }
  if (explain.empty() == files.empty()) {
    return Usage("give evaluation files, or --explain with one text");
  }

  absl::StatusOr<doctor::ExplainCatalog> loaded =
      catalog_dir.empty() ? absl::StatusOr<doctor::ExplainCatalog>(absl::UnknownError("unused"))
                          : doctor::LoadExplainCatalogDir(catalog_dir);
  const absl::StatusOr<doctor::ExplainCatalog>& catalog =
      catalog_dir.empty() ? doctor::BuiltinExplainCatalog() : loaded;
  if (!catalog.ok()) {
    std::fprintf(stderr, "gpulet-explain-eval: %s\n",
                 std::string(catalog.status().message()).c_str());
    return 2;
  }

  if (!explain.empty()) {
    std::string text;
    if (explain == "-") {
      char buf[1 << 16];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) text.append(buf, n);
    } else {
      absl::StatusOr<std::string> t = ReadRegularFile(explain, kMaxInputBytes, "input");
      if (!t.ok()) {
        std::fprintf(stderr, "gpulet-explain-eval: %s\n",
                     std::string(t.status().message()).c_str());
        return 2;
      }
      text = *std::move(t);
    }
    doctor::ExplainResult r = doctor::ExplainText(text, doctor::CompileExplainCatalog(catalog));
    for (const doctor::Explanation& e : r.found) {
      std::printf("%s\t%s\tline %zu: %s\n", e.id.c_str(), e.severity.c_str(), e.line,
                  e.matched.c_str());
    }
    if (r.found.empty()) std::printf("(nothing recognised)\n");
    return r.found.empty() ? 1 : 0;
  }

  std::vector<doctor::EvalMessage> messages;
  for (const std::string& f : files) {
    absl::StatusOr<std::string> text = ReadRegularFile(f, kMaxInputBytes, "evaluation file");
    absl::StatusOr<std::vector<doctor::EvalMessage>> set =
        text.ok() ? doctor::ParseEvalSet(f, *text) : text.status();
    if (!set.ok()) {
      std::fprintf(stderr, "gpulet-explain-eval: %s\n",
                   std::string(set.status().message()).c_str());
      return 2;
    }
    messages.insert(messages.end(), set->begin(), set->end());
  }
  absl::StatusOr<doctor::EvalReport> report = doctor::Evaluate(catalog, messages);
  if (!report.ok()) {
    std::fprintf(stderr, "gpulet-explain-eval: %s\n",
                 std::string(report.status().message()).c_str());
    return 2;
  }
  for (const doctor::EvalMiss& miss : report->misses) {
    std::printf("miss  %s [%s] expected %s, got %s\n      %s\n", miss.message->where.c_str(),
                miss.message->area.c_str(), miss.message->expect.c_str(),
                miss.found.empty() ? "nothing" : absl::StrJoin(miss.found, ", ").c_str(),
                miss.message->source.c_str());
  }
  std::printf("%-16s %8s %18s %18s\n", "area", "messages", "recognised", "right cause");
  bool ok = true;
  std::vector<doctor::AreaScore> rows = report->areas;
  rows.push_back(report->all);
  for (const doctor::AreaScore& s : rows) {
    double rec = Percent(s.recognised, s.messages), right = Percent(s.right, s.messages);
    bool below = rec < min_recognised || right < min_right;
    ok = ok && !below;
    std::printf("%-16s %8zu %8zu (%5.1f%%) %8zu (%5.1f%%)%s\n", s.area.c_str(), s.messages,
                s.recognised, rec, s.right, right, below ? "  below the minimum" : "");
  }
  if (!ok) {
    std::printf("below the minimum: recognised %.1f%%, right cause %.1f%% in every area\n",
                min_recognised, min_right);
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace gpulet

int main(int argc, char** argv) { return gpulet::Run(argc, argv); }
