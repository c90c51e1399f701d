#include "doctor/explain_eval.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/read_file.h"
#include "doctor/explain.h"
#include "gpu/nvml_errors.h"
#include "yaml-cpp/yaml.h"
#include "yaml/reader.h"

namespace gpulet::doctor {
namespace {

// An evaluation file or catalogue file larger than this is a mistake, not data.
constexpr size_t kMaxFileBytes = size_t{8} << 20;

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// True when `id` names an explanation gpulet can give.
bool Explainable(const ExplainCatalog& catalog, absl::string_view id) {
  if (catalog.Find(id) != nullptr) return true;
  int code = 0;
  if (absl::ConsumePrefix(&id, "xid-")) return absl::SimpleAtoi(id, &code) && code >= 0;
  if (absl::ConsumePrefix(&id, "nvml-")) {
    std::string name = absl::AsciiStrToUpper(id);
    std::replace(name.begin(), name.end(), '-', '_');
    const gpu::NvmlReturnInfo* info = gpu::FindNvmlReturnByName(name);
    return info != nullptr && info->code != 0;
  }
  return false;
}

std::string Normal(absl::string_view text) {
  std::string out;
  NormalizeForMatch(text, &out);
  return out;
}

}  // namespace

absl::StatusOr<std::vector<EvalMessage>> ParseEvalSet(absl::string_view file,
                                                      absl::string_view yaml) {
  absl::StatusOr<YAML::Node> root = yaml::Load(yaml, file, {kMaxFileBytes});
  if (!root.ok()) return root.status();
  const yaml::Map top(*root, std::string(file));
  if (absl::Status s = top.Check(); !s.ok()) return s;
  if (absl::Status s = top.OnlyKeys({"area", "messages"}); !s.ok()) return s;
  std::string area;
  if (absl::Status s = top.NonEmptyString("area", &area); !s.ok()) return s;
  const YAML::Node messages = top.Get("messages");
  if (!messages.IsSequence() || messages.size() == 0) {
    return top.ErrorAt(messages, "messages must be a non-empty list of messages");
  }
  std::vector<EvalMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const yaml::Map node(messages[i], std::string(file), absl::StrCat("messages[", i, "]"));
    if (absl::Status s = node.Check(); !s.ok()) return s;
    if (absl::Status s = node.OnlyKeys({"expect", "source", "text"}); !s.ok()) return s;
    EvalMessage m;
    m.area = area;
    m.where = absl::StrCat(file, ": message ", i + 1);
    for (auto [key, field] : {std::pair<const char*, std::string*>{"expect", &m.expect},
                              {"source", &m.source},
                              {"text", &m.text}}) {
      if (absl::Status s = node.NonEmptyString(key, field); !s.ok()) return s;
    }
    if (!absl::StartsWith(m.source, "https://") && !absl::StartsWith(m.source, "http://")) {
      return node.ErrorAtKey("source", absl::StrCat(node.PathOf("source"),
                                                    " must be the URL where the message was seen"));
    }
    out.push_back(std::move(m));
  }
  return out;
}

absl::StatusOr<EvalReport> Evaluate(const absl::StatusOr<ExplainCatalog>& catalog,
                                    const std::vector<EvalMessage>& messages) {
  if (!catalog.ok()) return catalog.status();
  std::shared_ptr<const ExplainMatcher> matcher = CompileExplainCatalog(catalog);
  std::map<std::string, AreaScore> areas;
  EvalReport report;
  report.all.area = "all";
  for (const EvalMessage& m : messages) {
    if (!Explainable(*catalog, m.expect)) {
      return Invalid(m.where, absl::StrCat("`expect` names no explanation: ", m.expect));
    }
    if (const ExplainCatalogEntry* entry = catalog->Find(m.expect); entry != nullptr) {
      std::string text = Normal(m.text);
      for (const std::string& example : entry->examples) {
        if (Normal(example) == text) {
          return Invalid(m.where, absl::StrCat("the text is an example of entry ", m.expect,
                                               "; use another occurrence of the message"));
        }
      }
    }
    ExplainResult r = ExplainText(m.text, matcher);
    AreaScore& score = areas[m.area];
    score.area = m.area;
    bool recognised = !r.found.empty();
    bool right = recognised && r.found.front().id == m.expect;
    for (AreaScore* s : {&score, &report.all}) {
      ++s->messages;
      s->recognised += recognised;
      s->right += right;
    }
    if (!right) {
      EvalMiss miss{&m, {}};
      for (const Explanation& e : r.found) miss.found.push_back(e.id);
      report.misses.push_back(std::move(miss));
    }
  }
  for (auto& [name, score] : areas) report.areas.push_back(score);
  return report;
}

absl::StatusOr<ExplainCatalog> LoadExplainCatalogDir(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> paths;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".yaml") paths.push_back(it->path().string());
  }
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("cannot list the catalogue directory ", dir, ": ", ec.message()));
  }
  if (paths.empty()) return absl::NotFoundError(absl::StrCat("no *.yaml file in ", dir));
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> names, texts;
  for (const std::string& path : paths) {
    absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxFileBytes, "catalogue file");
    if (!text.ok()) return text.status();
    names.push_back(std::filesystem::path(path).filename().string());
    texts.push_back(*std::move(text));
  }
  std::vector<ExplainCatalogFile> files;
  for (size_t i = 0; i < paths.size(); ++i) files.push_back({names[i], texts[i]});
  return ExplainCatalog::ParseFiles(files);
}

}  // namespace gpulet::doctor
