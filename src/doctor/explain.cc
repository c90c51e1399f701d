#include "doctor/explain.h"

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "doctor/explain_catalog.h"
#include "gpu/nvml_errors.h"
#include "health/kmsg.h"
#include "health/xid.h"
#include "health/xid_catalog.h"

namespace gpulet::doctor {
namespace {

// nvmlErrorString() phrases people see ("Failed to initialize NVML: Driver Not Loaded"),
// mapped to NVML return-code names.
struct NvmlPhrase {
  absl::string_view phrase;
  absl::string_view name;
};
constexpr NvmlPhrase kNvmlPhrases[] = {
    {"Driver Not Loaded", "DRIVER_NOT_LOADED"},
    {"Insufficient Permissions", "NO_PERMISSION"},
    {"GPU is lost", "GPU_IS_LOST"},
    {"GPU requires reset", "RESET_REQUIRED"},
    {"NVML Shared Library Not Found", "LIBRARY_NOT_FOUND"},
};

bool IsIdentifierChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// The catalogue's phrases as a sentence: capitalised when the first word is a plain
// lower-case word (not "libnvidia-ml.so.1" or a command), with a full stop.
std::string Sentence(absl::string_view phrase) {
  std::string out(phrase);
  size_t word_end = std::min(out.find(' '), out.size());
  bool plain = word_end > 0;
  for (size_t i = 0; i < word_end; ++i) {
    if (!absl::ascii_islower(static_cast<unsigned char>(out[i]))) plain = false;
  }
  if (plain) out[0] = absl::ascii_toupper(static_cast<unsigned char>(out[0]));
  if (!out.empty() && out.back() != '.') out += '.';
  return out;
}

Explanation FromNvml(const gpu::NvmlReturnInfo& info, absl::string_view matched) {
  Explanation e;
  absl::string_view short_name = info.name;
  absl::ConsumePrefix(&short_name, "NVML_ERROR_");
  e.id = absl::StrCat("nvml-", absl::AsciiStrToLower(short_name));
  std::replace(e.id.begin(), e.id.end(), '_', '-');
  e.title = absl::StrCat(info.name, " (NVML return code ", info.code, ")");
  e.cause = Sentence(info.cause);
  e.fix = Sentence(info.fix);
  e.source = "NVML return codes (nvml.h), gpulet's NVML error catalogue";
  e.matched = std::string(matched);
  e.details = {{"nvml_return", std::string(info.name)}, {"code", absl::StrCat(info.code)}};
  return e;
}

// NVML return codes named in the text, as full names, Go-style ERROR_ names, or a bare name
// that is the whole text; plus nvmlErrorString phrases.

// How much of a line an explanation quotes.
constexpr size_t kTrimmedLine = 240;

std::string TrimLine(absl::string_view line) {
  constexpr size_t kMax = kTrimmedLine;
  line = absl::StripAsciiWhitespace(line);
  if (line.size() <= kMax) return std::string(line);
  return absl::StrCat(line.substr(0, kMax), "...");
}

// The explanation of one XID (or fallen-off-the-bus message) for GPU `gpu` ("" when the text
// names no GPU).
Explanation FromXid(const health::XidEvent& x, absl::string_view uuid) {
  health::XidAssessment a = health::AssessXid(x);
  Explanation e;
  e.id = absl::StrCat("xid-", x.xid);
  std::string gpu = x.bus_id;
  if (!uuid.empty()) absl::StrAppend(&gpu, " (", uuid, ")");
  if (x.source == health::XidSource::kFallenOffBusMessage) {
    e.title = absl::StrCat("GPU ", gpu, " has fallen off the bus (treated as XID 79)");
  } else if (gpu.empty()) {
    e.title = absl::StrCat("XID ", x.xid, " (", a.info.mnemonic, ")");
  } else {
    e.title = absl::StrCat("XID ", x.xid, " (", a.info.mnemonic, ") on GPU ", gpu);
  }
  if (x.gpu_instance) absl::StrAppend(&e.title, ", MIG GPU instance ", *x.gpu_instance);
  if (x.compute_instance) absl::StrAppend(&e.title, " compute instance ", *x.compute_instance);
  if (!x.process_name.empty() || x.pid) {
    absl::StrAppend(&e.title, ", process ", x.process_name.empty() ? "?" : x.process_name,
                    x.pid ? absl::StrCat(" (pid ", *x.pid, ")") : "");
  }
  std::string meaning(a.info.meaning);
  if (!meaning.empty()) meaning[0] = absl::ascii_toupper(static_cast<unsigned char>(meaning[0]));
  absl::string_view consequence = a.severity == health::XidSeverity::kApplication
                                      ? " (the application's fault; the GPU stays in "
                                        "service)"
                                  : a.severity == health::XidSeverity::kFatal
                                      ? " (the GPU is unusable until the action is taken)"
                                      : " (the GPU stays in service; watch for repeats)";
  e.cause = absl::StrCat(meaning, ". Severity: ", health::XidSeverityName(a.severity), consequence,
                         a.adjustment.empty() ? "" : absl::StrCat("; ", a.adjustment), ".");
  e.fix = std::string(health::GpuActionDescription(a.action));
  if (a.if_repeated != a.action && a.if_repeated != health::GpuAction::kNone) {
    std::string then(health::GpuActionDescription(a.if_repeated));
    then[0] = absl::ascii_tolower(static_cast<unsigned char>(then[0]));
    absl::StrAppend(&e.fix, " If it keeps happening: ", then);
  }
  e.source = a.info.documented
                 ? "NVIDIA Xid catalogue resolution buckets; gpud and device-plugin practice"
                 : "NVIDIA documents no meaning for this XID on current GPUs; gpud treats it as "
                   "fatal";
  e.details = {{"xid", absl::StrCat(x.xid)}, {"mnemonic", std::string(a.info.mnemonic)}};
  if (!x.bus_id.empty()) e.details.push_back({"bus_id", x.bus_id});
  if (!uuid.empty()) e.details.push_back({"uuid", std::string(uuid)});
  if (x.gpu_instance) e.details.push_back({"gpu_instance", absl::StrCat(*x.gpu_instance)});
  if (x.compute_instance) {
    e.details.push_back({"compute_instance", absl::StrCat(*x.compute_instance)});
  }
  if (x.pid) e.details.push_back({"pid", absl::StrCat(*x.pid)});
  if (!x.process_name.empty()) e.details.push_back({"process", x.process_name});
  e.details.push_back({"severity", std::string(health::XidSeverityName(a.severity))});
  e.details.push_back({"action", std::string(health::GpuActionName(a.action))});
  e.details.push_back({"if_repeated", std::string(health::GpuActionName(a.if_repeated))});
  if (!x.message.empty()) e.details.push_back({"message", x.message});
  return e;
}

// Kernel log XID and fallen-off-the-bus lines; or, when the whole text is "xid N", that code.

ExplainSeverity XidRank(health::XidSeverity s) {
  switch (s) {
    case health::XidSeverity::kFatal:
      return ExplainSeverity::kCritical;
    case health::XidSeverity::kWarning:
      return ExplainSeverity::kError;
    case health::XidSeverity::kApplication:
      return ExplainSeverity::kWarning;
  }
  return ExplainSeverity::kError;
}

// Aho-Corasick over lower-case keywords: one pass over a line finds every keyword in it.
class KeywordScanner {
 public:
  KeywordScanner() { states_.emplace_back(); }

  void Add(absl::string_view word, int id) {
    int s = 0;
    for (char c : word) {
      unsigned char u = static_cast<unsigned char>(c);
      if (states_[s].next[u] == 0) {
        states_[s].next[u] = static_cast<int32_t>(states_.size());
        states_.emplace_back();
      }
      s = states_[s].next[u];
    }
    states_[s].out.push_back(id);
  }

  // Turns the trie into a complete automaton (missing edges follow failure links).
  void Build() {
    std::vector<int32_t> fail(states_.size(), 0);
    std::vector<int32_t> queue;
    for (int c = 0; c < 256; ++c) {
      if (int32_t n = states_[0].next[c]; n != 0) queue.push_back(n);
    }
    for (size_t head = 0; head < queue.size(); ++head) {
      int32_t s = queue[head];
      const std::vector<int>& inherited = states_[fail[s]].out;
      states_[s].out.insert(states_[s].out.end(), inherited.begin(), inherited.end());
      for (int c = 0; c < 256; ++c) {
        int32_t n = states_[s].next[c];
        if (n == 0) {
          states_[s].next[c] = states_[fail[s]].next[c];
        } else {
          fail[n] = states_[fail[s]].next[c];
          queue.push_back(n);
        }
      }
    }
  }

  template <typename F>
  void Scan(absl::string_view text, F&& on_hit) const {
    int32_t s = 0;
    for (char c : text) {
      s = states_[s].next[static_cast<unsigned char>(c)];
      for (int id : states_[s].out) on_hit(id);
    }
  }

 private:
  struct State {
    std::array<int32_t, 256> next{};
    std::vector<int> out;
  };
  std::vector<State> states_;
};

}  // namespace

// The catalogue's patterns and the NVML keywords in one scanner, built once per catalogue.
struct ExplainMatcher {
  struct PatternRef {
    size_t entry;
    size_t pattern;
  };
  const ExplainCatalog* catalog = nullptr;  // null when the catalogue failed to load
  std::string catalogue_error;              // why it failed; "" when it loaded
  std::vector<PatternRef> patterns;         // keyword id -> pattern (ids below size())
  int nvml_keyword = 0;                     // ids from here on: NVML tokens and phrases
  KeywordScanner scanner;

  explicit ExplainMatcher(const absl::StatusOr<ExplainCatalog>& c) {
    if (c.ok()) {
      catalog = &*c;
      for (size_t e = 0; e < catalog->entries().size(); ++e) {
        const ExplainCatalogEntry& entry = catalog->entries()[e];
        for (size_t p = 0; p < entry.compiled.size(); ++p) {
          scanner.Add(entry.compiled[p].anchor(), static_cast<int>(patterns.size()));
          patterns.push_back({e, p});
        }
      }
    } else {
      catalogue_error = std::string(c.status().message());
    }
    nvml_keyword = static_cast<int>(patterns.size());
    scanner.Add("error_", nvml_keyword);
    for (const NvmlPhrase& p : kNvmlPhrases) {
      scanner.Add(absl::AsciiStrToLower(p.phrase), nvml_keyword);
    }
    scanner.Build();
  }
};

std::shared_ptr<const ExplainMatcher> CompileExplainCatalog(
    const absl::StatusOr<ExplainCatalog>& catalog) {
  return std::make_shared<const ExplainMatcher>(catalog);
}

namespace {

const std::shared_ptr<const ExplainMatcher>& BuiltinMatcher() {
  static const auto* const matcher =
      new std::shared_ptr<const ExplainMatcher>(CompileExplainCatalog(BuiltinExplainCatalog()));
  return *matcher;
}

// Lines before the current one that a pattern may span (messages the kernel wraps).
constexpr size_t kWindow = 3;

}  // namespace

class LogExplainer::Impl {
 public:
  explicit Impl(std::shared_ptr<const ExplainMatcher> matcher)
      : matcher_(std::move(matcher)),
        m_(*matcher_),
        last_hit_(m_.patterns.size(), 0),
        is_active_(m_.patterns.size(), false) {
    if (m_.catalog != nullptr) found_entry_.assign(m_.catalog->entries().size(), false);
  }

  void Feed(absl::string_view chunk) {
    while (!chunk.empty()) {
      size_t nl = chunk.find('\n');
      absl::string_view piece = chunk.substr(0, nl);
      size_t room = kExplainMaxLine - partial_.size();
      if (piece.size() > room) {
        partial_truncated_ = true;
        piece = piece.substr(0, room);
      }
      partial_.append(piece.data(), piece.size());
      pending_ = true;
      if (nl == absl::string_view::npos) return;
      EndLine();
      chunk.remove_prefix(nl + 1);
    }
  }

  ExplainResult Finish() {
    if (pending_) EndLine();
    ExplainResult r;
    r.lines = line_no_;
    r.truncated_lines = truncated_lines_;
    r.catalogue_error = m_.catalogue_error;
    FinishAlone();
    for (const Seen& s : xids_) {
      auto u = uuids_.find(s.event.bus_id);
      Explanation e = FromXid(s.event, u == uuids_.end() ? "" : u->second);
      e.matched = s.line_text;
      e.line = s.line;
      e.details.push_back({"occurrences", absl::StrCat(s.count)});
      Add(std::move(e), XidRank(health::AssessXid(s.event).severity));
    }
    // An informational entry says a line is harmless: worth saying when that line is what was
    // asked about, noise beside a real problem elsewhere in the text.
    std::set<size_t> lines_with_problems;
    for (const Ranked& f : found_) {
      if (f.rank > ExplainSeverity::kInfo) lines_with_problems.insert(f.e.line);
    }
    found_.erase(std::remove_if(found_.begin(), found_.end(),
                                [&](const Ranked& f) {
                                  if (f.rank != ExplainSeverity::kInfo) return false;
                                  size_t others = lines_with_problems.size() -
                                                  lines_with_problems.count(f.e.line);
                                  return others > 0;
                                }),
                 found_.end());
    // On one line, an entry whose pattern names the NVML reason ("...NVML: Insufficient
    // Permissions") says more than the return code alone; one that covers the reason with a
    // placeholder ("err: <w>") says less than the code it holds.
    for (Ranked& code : found_) {
      if (code.nvml_reason.empty()) continue;
      for (const Ranked& entry : found_) {
        if (entry.pattern.empty() || entry.e.line != code.e.line || entry.rank != code.rank ||
            absl::StrContains(entry.pattern, code.nvml_reason)) {
          continue;
        }
        code.specificity = std::max(code.specificity, entry.specificity + 1);
      }
    }
    // Worst first; then the first seen; then the most specific (the most literal text
    // matched).
    std::stable_sort(found_.begin(), found_.end(), [](const Ranked& a, const Ranked& b) {
      if (a.rank != b.rank) return a.rank > b.rank;
      if (a.e.line != b.e.line) return a.e.line < b.e.line;
      return a.specificity > b.specificity;
    });
    for (Ranked& f : found_) r.found.push_back(std::move(f.e));
    found_.clear();
    return r;
  }

 private:
  struct Ranked {
    Explanation e;
    ExplainSeverity rank;
    size_t specificity = 0;   // literal characters matched
    std::string pattern;      // a catalogue entry's pattern, normalised
    std::string nvml_reason;  // an NVML return code's name or phrase as matched, lower-case
  };
  struct Seen {  // one XID code and GPU
    health::XidEvent event;
    std::string line_text;
    size_t line = 0;
    int count = 0;
  };
  struct Recent {  // a previous line, for patterns that span lines
    std::string normal;
    std::string trimmed;
  };

  Ranked& Add(Explanation e, ExplainSeverity rank, size_t specificity = 0) {
    e.severity = std::string(ExplainSeverityName(rank));
    found_.push_back(Ranked{std::move(e), rank, specificity, "", ""});
    return found_.back();
  }

  void EndLine() {
    ++line_no_;
    if (partial_truncated_) ++truncated_lines_;
    absl::string_view line = partial_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // Raw /dev/kmsg records (`cat /dev/kmsg | gpulet explain -`) carry escaped text, in which
    // a multi-line message is one line with "\x0a" in it: scan the unescaped text instead.
    std::string unescaped;
    if (!line.empty() && absl::ascii_isdigit(static_cast<unsigned char>(line[0]))) {
      if (absl::StatusOr<health::KmsgRecord> record = health::ParseKmsgRecord(line); record.ok()) {
        unescaped = std::move(record->text);
        line = unescaped;
      }
    }
    // JSON and logfmt logs, and kubectl's quoting of an Event, escape the message's quotes
    // and line breaks: match the text as it was printed.
    std::string plain;
    line = UnescapePaste(line, &plain);
    ScanLine(line);
    partial_.clear();
    partial_truncated_ = false;
    pending_ = false;
  }

  void ScanLine(absl::string_view line) {
    ScanXids(line);
    normal_.clear();
    NormalizeForMatch(line, &normal_);
    if (!normal_.empty() && ++nonempty_lines_ == 1) {
      alone_ = std::string(absl::StripAsciiWhitespace(line).substr(0, 64));
      alone_line_ = line_no_;
    }

    bool nvml = false;
    m_.scanner.Scan(normal_, [&](int id) {
      if (id >= m_.nvml_keyword) {
        nvml = true;
        return;
      }
      if (found_entry_[m_.patterns[id].entry]) return;
      if (!is_active_[id]) active_.push_back(id);
      is_active_[id] = true;
      last_hit_[id] = line_no_;
    });
    if (nvml) ScanNvml(line);

    std::string joined;  // the window, built when a pattern first needs it
    size_t keep = 0;
    for (size_t i = 0; i < active_.size(); ++i) {
      int id = active_[i];
      const ExplainMatcher::PatternRef& ref = m_.patterns[id];
      if (found_entry_[ref.entry] || last_hit_[id] + kWindow < line_no_) {
        is_active_[id] = false;
        continue;
      }
      const MessagePattern& pattern = m_.catalog->entries()[ref.entry].compiled[ref.pattern];
      bool hit = pattern.SearchNormalized(normal_);
      if (!hit && !recent_.empty()) {
        if (joined.empty()) {
          for (const Recent& r : recent_) absl::StrAppend(&joined, r.normal, " ");
          joined += normal_;
        }
        hit = pattern.SearchNormalized(joined);
      }
      if (hit) {
        // Reported on the line where the pattern's keyword was seen.
        size_t at = last_hit_[id];
        absl::string_view where = line;
        if (at < line_no_ && line_no_ - at <= recent_.size()) {
          where = recent_[recent_.size() - (line_no_ - at)].trimmed;
        } else {
          at = line_no_;
        }
        // A kernel XID line is explained by the XID catalogue, with its GPU and action; a
        // catalogue entry for the text after the code would only repeat it.
        if (std::find(xid_lines_.begin(), xid_lines_.end(), at) != xid_lines_.end()) {
          is_active_[id] = false;
          continue;
        }
        Found(ref, where, at);
        is_active_[id] = false;
        continue;
      }
      active_[keep++] = id;
    }
    active_.resize(keep);

    // Keep the last kWindow lines, reusing their buffers (no allocation per line).
    if (recent_.size() < kWindow) {
      recent_.emplace_back();
    } else {
      recent_.push_back(std::move(recent_.front()));
      recent_.pop_front();
    }
    Recent& last = recent_.back();
    last.normal.assign(normal_);
    absl::string_view stripped = absl::StripAsciiWhitespace(line);
    last.trimmed.assign(stripped.data(), std::min<size_t>(stripped.size(), kTrimmedLine));
  }

  void Found(const ExplainMatcher::PatternRef& ref, absl::string_view where, size_t line) {
    found_entry_[ref.entry] = true;
    const ExplainCatalogEntry& entry = m_.catalog->entries()[ref.entry];
    Explanation e;
    e.id = entry.id;
    e.title = entry.title;
    e.cause = entry.cause;
    e.fix = entry.fix;
    e.fix_talos = entry.fix_talos;
    e.check = entry.check;
    e.candidates = entry.candidates;
    e.source = entry.source;
    e.matched = TrimLine(where);
    e.line = line;
    e.details = {{"pattern", entry.patterns[ref.pattern]}};
    std::string pattern;
    NormalizeForMatch(entry.patterns[ref.pattern], &pattern);
    Add(std::move(e), entry.severity, entry.compiled[ref.pattern].literal_size()).pattern =
        std::move(pattern);
  }

  // NVML return codes named in the line, as full names or Go-style ERROR_ names; and
  // nvmlErrorString phrases.
  void ScanNvml(absl::string_view line) {
    for (size_t i = 0; i < line.size();) {
      if (!IsIdentifierChar(line[i])) {
        ++i;
        continue;
      }
      size_t start = i;
      while (i < line.size() && IsIdentifierChar(line[i])) ++i;
      absl::string_view token = line.substr(start, i - start);
      if (token.size() > 64) continue;
      std::string upper = absl::AsciiStrToUpper(token);
      absl::string_view name = upper;
      if (absl::StartsWith(name, "NVML_ERROR_") || absl::ConsumePrefix(&name, "ERROR_")) {
        AddNvml(gpu::FindNvmlReturnByName(name), token, line_no_);
      }
    }
    for (const NvmlPhrase& p : kNvmlPhrases) {
      if (absl::StrContains(normal_, absl::AsciiStrToLower(p.phrase))) {
        AddNvml(gpu::FindNvmlReturnByName(p.name), p.phrase, line_no_);
      }
    }
  }

  // Adds the explanation of an NVML return code first seen on `line`; false when the code is
  // not an error or was already explained.
  bool AddNvml(const gpu::NvmlReturnInfo* info, absl::string_view matched, size_t line) {
    if (info == nullptr || info->code == 0 || !nvml_seen_.insert(info->code).second) {
      return false;
    }
    Explanation e = FromNvml(*info, matched);
    e.line = line;
    Add(std::move(e), ExplainSeverity::kError, matched.size()).nvml_reason =
        absl::AsciiStrToLower(matched);
    return true;
  }

  // Kernel log XID and fallen-off-the-bus lines.
  void ScanXids(absl::string_view line) {
    for (health::KernelLogFinding& f : scanner_.Scan(line)) {
      if (health::GpuUuidMapping* m = std::get_if<health::GpuUuidMapping>(&f)) {
        uuids_[m->bus_id] = m->uuid;
        continue;
      }
      health::XidEvent& x = std::get<health::XidEvent>(f);
      if (x.source == health::XidSource::kXidLine) {
        xid_lines_.push_back(line_no_);
        if (xid_lines_.size() > kWindow + 1) xid_lines_.pop_front();
      }
      // One explanation per XID, GPU and kind of report; repeats only raise the count.
      auto it = std::find_if(xids_.begin(), xids_.end(), [&x](const Seen& s) {
        return s.event.xid == x.xid && s.event.bus_id == x.bus_id && s.event.source == x.source;
      });
      if (it != xids_.end()) {
        ++it->count;
      } else if (xids_.size() < 1000) {
        xids_.push_back(Seen{std::move(x), TrimLine(line), line_no_, 1});
      }
    }
  }

  // Text that is one word: a bare NVML return-code name ("GPU_IS_LOST"), or "xid N".
  void FinishAlone() {
    if (nonempty_lines_ != 1) return;
    absl::string_view ask = alone_;
    if (std::all_of(ask.begin(), ask.end(), IsIdentifierChar)) {
      std::string upper = absl::AsciiStrToUpper(ask);
      AddNvml(gpu::FindNvmlReturnByName(upper), ask, alone_line_);
    }
    if (!xids_.empty() || ask.size() < 3 || !absl::EqualsIgnoreCase(ask.substr(0, 3), "xid")) {
      return;
    }
    absl::string_view code_text = absl::StripLeadingAsciiWhitespace(ask.substr(3));
    int code = 0;
    if (code_text.empty() || code_text.size() > 6 || !absl::SimpleAtoi(code_text, &code) ||
        code < 0) {
      return;
    }
    health::XidEvent x;
    x.xid = code;
    Explanation e = FromXid(x, "");
    e.matched = std::string(ask);
    Add(std::move(e), XidRank(health::AssessXid(x).severity));
  }

  std::shared_ptr<const ExplainMatcher> matcher_;  // keeps m_ alive
  const ExplainMatcher& m_;
  std::string partial_;  // the line being read, at most kExplainMaxLine bytes
  bool partial_truncated_ = false;
  bool pending_ = false;  // bytes of an unfinished line were fed
  size_t line_no_ = 0;
  size_t truncated_lines_ = 0;
  size_t nonempty_lines_ = 0;
  std::string alone_;  // the first non-empty line (its start), for FinishAlone
  size_t alone_line_ = 0;
  std::string normal_;  // the current line, normalised
  std::deque<Recent> recent_;
  std::vector<size_t> last_hit_;  // per pattern: the line its keyword was last seen on
  std::vector<int> active_;       // patterns whose keyword was seen within the window
  std::vector<bool> is_active_;   // per pattern: in active_
  std::vector<bool> found_entry_;
  std::set<int> nvml_seen_;
  health::KernelLogScanner scanner_;
  std::vector<Seen> xids_;
  std::deque<size_t> xid_lines_;              // the last few lines that held an XID
  std::map<std::string, std::string> uuids_;  // bus id -> UUID, from the mapping lines
  std::vector<Ranked> found_;
};

LogExplainer::LogExplainer() : impl_(std::make_unique<Impl>(BuiltinMatcher())) {}
LogExplainer::LogExplainer(std::shared_ptr<const ExplainMatcher> matcher)
    : impl_(std::make_unique<Impl>(std::move(matcher))) {}
LogExplainer::~LogExplainer() = default;
void LogExplainer::Feed(absl::string_view chunk) { impl_->Feed(chunk); }
ExplainResult LogExplainer::Finish() { return impl_->Finish(); }

bool WildcardSearch(absl::string_view pattern, absl::string_view text) {
  return MessagePattern::Compile(pattern).Search(text);
}

ExplainResult ExplainText(absl::string_view text) {
  LogExplainer explainer;
  explainer.Feed(text);
  return explainer.Finish();
}

ExplainResult ExplainText(absl::string_view text, std::shared_ptr<const ExplainMatcher> matcher) {
  LogExplainer explainer(std::move(matcher));
  explainer.Feed(text);
  return explainer.Finish();
}

std::vector<Explanation> Explain(absl::string_view text) { return ExplainText(text).found; }

}  // namespace gpulet::doctor
