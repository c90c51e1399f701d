// The doctor's kernel log check: XIDs and driver messages since boot (checks.h).
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cdi/generator.h"
#include "cdi/spec_dirs.h"
#include "deploy/talos_migration.h"
#include "doctor/check_list.h"
#include "doctor/checks.h"
#include "doctor/explain.h"
#include "doctor/stack_checks.h"
#include "gpu/nvml_api.h"
#include "health/kmsg_source.h"
#include "health/xid.h"
#include "health/xid_catalog.h"
#include "nlohmann/json.hpp"
#include "nvml/nvml_loader.h"

namespace gpulet::doctor {

// --- the kernel log ---------------------------------------------------------------------------

namespace {

// /dev/kmsg hands out the kernel's ring buffer from its oldest record, so one pass over it is
// the log since boot (or since the oldest record not yet overwritten). Enough for a full
// 16 MiB buffer; a node logging faster than the doctor reads stops here.
constexpr size_t kMaxKernelRecords = 250000;

constexpr char kTalosKmsgHint[] =
    "On Talos, where a pod usually cannot read the host's kernel log, run `talosctl -n <node> "
    "dmesg | gpulet explain -` instead.";

std::string SecondsAfterBoot(uint64_t us) {
  return absl::StrCat(us / 1000000, ".", (us / 100000) % 10, " s after boot");
}

std::string BucketLabel(health::XidBucket bucket) {
  return bucket == health::XidBucket::kNotPublished ? "(none published)"
                                                    : std::string(health::XidBucketName(bucket));
}

// One XID code on one GPU, with how often it came.
struct KernelXid {
  health::XidEvent last;
  int count = 0;
  uint64_t last_us = 0;
};

// One explained NVRM message, with how often it came.
struct KernelNvrm {
  Explanation explanation;
  std::string line;
  int count = 0;
};

// An NVRM line the XID scanner already covers (XID, UUID mapping, fallen off the bus).
bool CoveredByXidScanner(absl::string_view line) {
  return health::ParseXidLine(line) || health::ParseGpuUuidLine(line) ||
         health::ParseFallenOffBusLine(line) || absl::StrContains(line, "The NVIDIA GPU ") ||
         absl::StrContains(line, "(PCI ID:") || absl::StrContains(line, "fallen off the bus");
}

}  // namespace

CheckResult CheckKernelLog(const Context& c) {
  const char* kId = "kernel.log";
  health::DevKmsgOptions options;
  options.host_root = c.host.root();
  options.path = "/dev/kmsg";
  health::DevKmsgSource source(options);
  absl::Status open = source.Open();
  if (!open.ok()) {
    std::string why(open.message());
    if (!absl::EndsWith(why, ".")) why += ".";
    return NotCheckedResult(kId, absl::StrCat(why, " ", kTalosKmsgHint));
  }
  CheckResult r = CheckResultFor(kId);
  r.verdict = Verdict::kPass;
  health::KernelLogScanner scanner;
  std::vector<std::pair<std::string, int>> xid_order;  // (bus id, XID) in first-seen order
  std::map<std::pair<std::string, int>, KernelXid> xids;
  std::map<std::string, std::string> uuid_by_bus;
  std::vector<std::string> nvrm_order;  // explanation ids in first-seen order
  std::map<std::string, KernelNvrm> nvrm;
  std::vector<std::string> unexplained;  // NVRM lines at error level that nothing explains
  size_t records = 0;
  std::optional<health::KmsgRecord> first;
  while (records < kMaxKernelRecords) {
    absl::StatusOr<std::optional<health::KmsgRecord>> next = source.ReadNext();
    if (!next.ok()) {
      Worsen(&r, Verdict::kWarn);
      r.evidence.push_back(
          absl::StrCat("reading stopped after ", records, " records: ", next.status().message()));
      break;
    }
    if (!next->has_value()) break;
    const health::KmsgRecord& rec = **next;
    ++records;
    if (!first) first = rec;
    if (!rec.from_kernel()) continue;
    std::vector<health::KernelLogFinding> found = scanner.Scan(rec.text);
    for (const health::KernelLogFinding& f : found) {
      if (const auto* m = std::get_if<health::GpuUuidMapping>(&f)) {
        uuid_by_bus[m->bus_id] = m->uuid;
        continue;
      }
      const health::XidEvent& e = std::get<health::XidEvent>(f);
      std::pair<std::string, int> key{e.bus_id, e.xid};
      KernelXid& k = xids[key];
      if (k.count == 0) xid_order.push_back(key);
      ++k.count;
      k.last = e;
      k.last_us = rec.timestamp_us;
    }
    for (absl::string_view line : absl::StrSplit(rec.text, '\n')) {
      size_t at = line.find("NVRM:");
      if (at == absl::string_view::npos || CoveredByXidScanner(line)) continue;
      bool explained = false;
      for (Explanation& x : Explain(line)) {
        if (absl::StartsWith(x.id, "xid")) continue;
        explained = true;
        // An informational line (the module's load banner) is known, and no error.
        if (x.severity == ExplainSeverityName(ExplainSeverity::kInfo)) continue;
        KernelNvrm& n = nvrm[x.id];
        if (n.count == 0) {
          nvrm_order.push_back(x.id);
          n.explanation = std::move(x);
          n.line = std::string(line.substr(at));
        }
        ++n.count;
      }
      if (!explained && rec.level <= 3) unexplained.push_back(std::string(line.substr(at)));
    }
  }
  r.evidence.push_back(absl::StrCat(source.Describe(), ": ", records, " records read"));
  if (first && first->seq > 0) {
    r.evidence.push_back(
        absl::StrCat("the kernel's buffer starts at record ", first->seq, " (",
                     SecondsAfterBoot(first->timestamp_us),
                     "): older records were overwritten, so earlier XIDs may be missing"));
  }
  std::vector<std::string> fixes;
  std::string worst;  // the summary's headline
  Verdict worst_verdict = Verdict::kPass;
  for (const auto& key : xid_order) {
    const KernelXid& k = xids[key];
    health::XidAssessment a = health::AssessXid(k.last);
    std::string gpu = key.first;
    auto uuid = uuid_by_bus.find(key.first);
    if (uuid != uuid_by_bus.end()) absl::StrAppend(&gpu, " (", uuid->second, ")");
    std::string what = absl::StrCat("XID ", key.second, " (", a.info.mnemonic, ") on ", gpu);
    std::string evidence = absl::StrCat(
        what, ", ", k.count, k.count == 1 ? " time" : " times", ", last at ",
        SecondsAfterBoot(k.last_us), ": ", a.info.meaning, "; NVIDIA: immediate ",
        BucketLabel(a.info.immediate), ", investigatory ", BucketLabel(a.info.investigatory));
    if (!a.adjustment.empty()) absl::StrAppend(&evidence, "; ", a.adjustment);
    if (k.last.nvlink && k.last.nvlink->intrinfo) {
      if (std::optional<health::Nvlink5Decode> d =
              health::DecodeNvlink5(key.second, *k.last.nvlink->intrinfo)) {
        absl::StrAppend(&evidence, "; NVLink5 unit ", d->unit, " (", d->format, ")");
        if (d->reason) absl::StrAppend(&evidence, ", link-down reason ", *d->reason);
        absl::StrAppend(&evidence, ": immediate ", health::XidBucketName(d->immediate),
                        ", investigatory ", health::XidBucketName(d->investigatory));
      }
    }
    r.evidence.push_back(std::move(evidence));
    Verdict v = Verdict::kPass;
    if (a.severity == health::XidSeverity::kFatal) {
      v = Verdict::kFail;
    } else if (a.severity == health::XidSeverity::kWarning) {
      v = Verdict::kWarn;
    }
    if (v == Verdict::kPass) continue;  // the application's fault: listed, nothing to fix
    fixes.push_back(absl::StrCat(
        what, ": ", health::GpuActionDescription(a.action), " (", health::GpuActionName(a.action),
        "; if it comes back after that: ", health::GpuActionName(a.if_repeated), ")"));
    if (worst.empty() || (v == Verdict::kFail && worst_verdict != Verdict::kFail)) {
      worst = absl::StrCat(what, " asks to ", health::GpuActionName(a.action));
      worst_verdict = v;
    }
    Worsen(&r, v);
  }
  for (const std::string& id : nvrm_order) {
    const KernelNvrm& n = nvrm[id];
    Worsen(&r, Verdict::kWarn);
    r.evidence.push_back(absl::StrCat(n.line, " (", n.count, n.count == 1 ? " time" : " times",
                                      "; explain: ", id, "): ", n.explanation.cause));
    fixes.push_back(absl::StrCat(n.explanation.title, ": ", n.explanation.fix));
    if (worst.empty()) worst = n.explanation.title;
  }
  if (!unexplained.empty()) {
    Worsen(&r, Verdict::kWarn);
    std::vector<std::string> lines;
    for (const std::string& l : unexplained) {
      lines.push_back(absl::StrCat("NVRM error gpulet has no explanation for: ", l));
    }
    AddLimited(&r.evidence, lines);
    fixes.push_back(
        "For the NVRM errors without an explanation: collect `nvidia-bug-report.sh` output and "
        "the kernel log, and report them to NVIDIA or the hardware vendor.");
    if (worst.empty()) worst = "NVRM errors gpulet has no explanation for";
  }
  if (r.verdict == Verdict::kPass) {
    r.summary = xid_order.empty()
                    ? absl::StrCat("no XID, NVRM error or GPU fallen off the bus in the ", records,
                                   " records since boot")
                    : "only XIDs that are the application's fault since boot";
    return r;
  }
  r.summary = absl::StrCat(xid_order.size(), " kind(s) of XID and ", nvrm_order.size(),
                           " known NVRM error(s) since boot; the worst: ", worst);
  r.fix = absl::StrJoin(fixes, "\n");
  return r;
}

}  // namespace gpulet::doctor
