#include "recorder/postmortem.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gpu/nvml_api.h"
#include "health/xid_catalog.h"

namespace gpulet::recorder {
namespace {

// How far before the fault a thermal or power excursion still counts as its cause.
constexpr int64_t kExcursionMs = 10 * 60 * 1000;
// Correctable AER errors and PCIe replays are normal in small numbers; this many in the
// window is a link in trouble. Non-fatal and fatal AER errors count from the first.
constexpr int64_t kManyCorrectable = 10;

std::string HourMinSec(int64_t ms) {
  return absl::FormatTime("%H:%M:%S", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

// The samples up to the fault (and the round that saw it), oldest first.
std::vector<const RecordedSample*> Before(const RecorderDump& d) {
  std::vector<const RecordedSample*> out;
  const int64_t until = d.fault_ms + 2 * std::max<int64_t>(d.interval_ms, 1000);
  for (const RecordedSample& s : d.samples) {
    if (s.at_ms <= until) out.push_back(&s);
  }
  return out;
}

// The pods (or "pid N" without one) on the GPU at `at_ms`, from the process events.
std::set<std::string> HoldersAt(const RecorderDump& d, int64_t at_ms) {
  std::map<unsigned, std::string> on;
  for (const RecordedEvent& e : d.events) {
    if (e.at_ms > at_ms) break;
    if (e.kind == EventKind::kProcessStart)
      on[e.pid] = e.pod.empty() ? absl::StrCat("pid ", e.pid) : e.pod;
    if (e.kind == EventKind::kProcessStop) on.erase(e.pid);
  }
  std::set<std::string> out;
  for (const auto& [pid, who] : on) out.insert(who);
  return out;
}

bool IsApplicationXid(int code) {
  return health::DescribeXid(code).severity == health::XidSeverity::kApplication ||
         health::IsDefaultApplicationXid(code);
}

bool PointsAtSoftware(int code) {
  const health::XidInfo info = health::DescribeXid(code);
  for (health::XidBucket b : {info.immediate, info.investigatory}) {
    if (b == health::XidBucket::kUpdateSwFw || b == health::XidBucket::kInvestigateSw) return true;
  }
  return false;
}

// The XIDs of the recording up to the fault.
std::vector<const RecordedEvent*> Xids(const RecorderDump& d) {
  std::vector<const RecordedEvent*> out;
  for (const RecordedEvent& e : d.events) {
    if (e.kind == EventKind::kXid &&
        e.at_ms <= d.fault_ms + 2 * std::max<int64_t>(d.interval_ms, 1000)) {
      out.push_back(&e);
    }
  }
  return out;
}

bool OnlyApplicationXids(const RecorderDump& d) {
  std::vector<const RecordedEvent*> xids = Xids(d);
  if (xids.empty() || d.health == "Unhealthy") return false;
  return std::all_of(xids.begin(), xids.end(),
                     [](const RecordedEvent* e) { return IsApplicationXid(e->xid); });
}

// The rise of a counter column over the samples: last - first present value.
std::optional<std::pair<int64_t, int64_t>> Rise(const std::vector<const RecordedSample*>& s,
                                                Column c) {
  std::optional<int64_t> first;
  int64_t last_at = 0;
  std::optional<int64_t> last;
  for (const RecordedSample* x : s) {
    std::optional<int64_t> v = x->Get(c);
    if (!v) continue;
    if (!first) first = v;
    last = v;
    last_at = x->at_ms;
  }
  if (!first || *last <= *first) return std::nullopt;
  return std::pair{*last - *first, last_at};
}

// The hardware's own error counters that rose before the fault: PCIe (AER, replays) and
// memory (ECC), and a PCIe link that narrowed or slowed.
void CounterEvidence(const std::vector<const RecordedSample*>& s, std::vector<Evidence>* out) {
  struct Counter {
    Column column;
    int64_t threshold;
    const char* what;
  };
  static constexpr Counter kCounters[] = {
      {Column::kAerFatal, 1, "fatal PCIe (AER) errors"},
      {Column::kAerNonFatal, 1, "non-fatal PCIe (AER) errors"},
      {Column::kAerCorrectable, kManyCorrectable, "correctable PCIe (AER) errors"},
      {Column::kPcieReplays, kManyCorrectable, "PCIe replays"},
      {Column::kEccDbe, 1, "uncorrectable (double-bit) ECC memory errors"},
      {Column::kEccSbe, kManyCorrectable, "corrected (single-bit) ECC memory errors"},
  };
  for (const Counter& c : kCounters) {
    if (auto rise = Rise(s, c.column); rise && rise->first >= c.threshold) {
      out->push_back({rise->second,
                      absl::StrCat(rise->first, " ", c.what, " in the window before the fault")});
    }
  }
  for (auto [column, unit, what] : {std::tuple{Column::kPcieLinkWidth, "x", "width"},
                                    std::tuple{Column::kPcieLinkMts, "", "speed"}}) {
    int64_t best = 0;
    for (const RecordedSample* x : s) {
      std::optional<int64_t> v = x->Get(column);
      if (!v) continue;
      if (*v < best) {
        out->push_back(
            {x->at_ms, absl::StrCat("the PCIe link ", what, " dropped from ", unit, best,
                                    column == Column::kPcieLinkMts ? " MT/s" : "", " to ", unit, *v,
                                    column == Column::kPcieLinkMts ? " MT/s" : "")});
        break;
      }
      best = std::max(best, *v);
    }
  }
}

void ExcursionEvidence(const RecorderDump& d, const std::vector<const RecordedSample*>& s,
                       std::vector<Evidence>* out) {
  bool hot = false, throttled = false, power = false, brake = false;
  for (const RecordedSample* x : s) {
    if (x->at_ms < d.fault_ms - kExcursionMs) continue;
    std::optional<int64_t> temp = x->Get(Column::kGpuTempC);
    std::optional<int64_t> reasons = x->Get(Column::kThrottleReasons);
    std::optional<int64_t> mw = x->Get(Column::kPowerMw);
    std::optional<int64_t> limit = x->Get(Column::kPowerLimitMw);
    if (!hot && temp && *temp >= kHotC) {
      hot = true;
      out->push_back({x->at_ms, absl::StrCat("thermal excursion: the GPU at ", *temp, " °C")});
    }
    if (!throttled && reasons && (*reasons & (kThrottleHwThermal | kThrottleSwThermal))) {
      throttled = true;
      out->push_back({x->at_ms, "thermal slowdown: the GPU cut its clocks for heat"});
    }
    if (!power && mw && limit && *limit > 0 && *mw * 100 > *limit * 105) {
      power = true;
      out->push_back({x->at_ms, absl::StrFormat("power excursion: %.0f W over its %.0f W limit",
                                                *mw / 1000.0, *limit / 1000.0)});
    }
    if (!brake && reasons && (*reasons & (kThrottleHwPowerBrake | kThrottleHwSlowdown))) {
      brake = true;
      out->push_back({x->at_ms,
                      "hardware slowdown or power brake: the board signalled a power "
                      "or temperature problem"});
    }
  }
}

}  // namespace

const char* CauseName(Cause cause) {
  switch (cause) {
    case Cause::kHardware:
      return "hardware";
    case Cause::kDriver:
      return "driver-or-configuration";
    case Cause::kApplication:
      return "application";
    case Cause::kUndetermined:
      return "undetermined";
  }
  return "?";
}

std::string FormatMillis(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

Verdict Assess(const RecorderDump& f, std::span<const RecorderDump> earlier) {
  const std::vector<const RecordedSample*> samples = Before(f);
  const std::vector<const RecordedEvent*> xids = Xids(f);
  std::vector<Evidence> hardware, driver, application;

  // Fell off the bus: XID 79, or NVML stopped answering.
  std::optional<Evidence> lost;
  for (const RecordedEvent* e : xids) {
    if (e->xid == 79 && !lost)
      lost = Evidence{e->at_ms, absl::StrCat("XID 79: the GPU fell off the bus")};
  }
  for (const RecordedSample* x : samples) {
    if (!lost && x->Get(Column::kAnswering) == 0) {
      lost = Evidence{x->at_ms, "NVML stopped answering for the GPU"};
    }
  }
  std::vector<Evidence> counters;
  CounterEvidence(samples, &counters);
  if (lost && !counters.empty()) hardware.push_back(*lost);
  hardware.insert(hardware.end(), counters.begin(), counters.end());
  ExcursionEvidence(f, samples, &hardware);

  // Repeats across reboots and workloads.
  std::vector<const RecorderDump*> repeats;
  for (const RecorderDump& e : earlier) {
    if (e.fault_ms < f.fault_ms && !OnlyApplicationXids(e)) repeats.push_back(&e);
  }
  std::sort(repeats.begin(), repeats.end(),
            [](const RecorderDump* a, const RecorderDump* b) { return a->fault_ms < b->fault_ms; });
  std::set<std::string> boots;
  for (const RecorderDump* e : repeats) {
    if (!e->boot_id.empty() && !f.boot_id.empty() && e->boot_id != f.boot_id)
      boots.insert(e->boot_id);
  }
  if (!boots.empty() && !OnlyApplicationXids(f)) {
    hardware.push_back(
        {0, absl::StrCat("the GPU faulted before, in ", boots.size(), " earlier boot",
                         boots.size() == 1 ? "" : "s", " of the node: a reboot did not clear it")});
  }
  if (!repeats.empty() && !OnlyApplicationXids(f)) {
    std::set<std::string> workloads;
    bool idle = false;
    for (const RecorderDump* e : repeats) {
      std::set<std::string> who = HoldersAt(*e, e->fault_ms);
      idle = idle || who.empty();
      workloads.insert(who.empty() ? "no process" : absl::StrJoin(who, ", "));
    }
    std::set<std::string> now = HoldersAt(f, f.fault_ms);
    idle = idle || now.empty();
    workloads.insert(now.empty() ? "no process" : absl::StrJoin(now, ", "));
    if (workloads.size() > 1) {
      hardware.push_back({0, absl::StrCat("it faulted under ", workloads.size(),
                                          " different workloads (", absl::StrJoin(workloads, "; "),
                                          ")", idle ? ", once with nothing on it" : "")});
    }
  }

  // Driver and configuration.
  for (const RecordedEvent* e : xids) {
    if (PointsAtSoftware(e->xid)) {
      const health::XidInfo info = health::DescribeXid(e->xid);
      driver.push_back({e->at_ms, absl::StrCat("XID ", e->xid, " (", info.mnemonic,
                                               "): NVIDIA's catalogue sends it to a driver or "
                                               "firmware investigation")});
    }
  }
  for (const RecordedEvent& e : f.events) {
    if (e.kind == EventKind::kNvmlError && e.nvml_code == NVML_ERROR_LIB_RM_VERSION_MISMATCH) {
      driver.push_back({e.at_ms, "NVML's user-space library does not match the kernel module"});
      break;
    }
  }
  if (!repeats.empty() && !repeats.back()->driver_version.empty() && !f.driver_version.empty() &&
      repeats.back()->driver_version != f.driver_version) {
    driver.push_back({0, absl::StrCat("the driver changed from ", repeats.back()->driver_version,
                                      " to ", f.driver_version, " since the previous fault (",
                                      FormatMillis(repeats.back()->fault_ms), ")")});
  }

  // The application's own XIDs, and who held the GPU when they came.
  std::map<int, int> app_counts;
  std::set<std::string> app_holders;
  bool other_xid = false;
  for (const RecordedEvent* e : xids) {
    if (!IsApplicationXid(e->xid)) {
      other_xid = true;
      continue;
    }
    ++app_counts[e->xid];
    std::set<std::string> who = HoldersAt(f, e->at_ms);
    app_holders.insert(who.empty() ? "no process" : absl::StrJoin(who, ", "));
  }
  if (!app_counts.empty() && app_holders.size() == 1 && *app_holders.begin() != "no process") {
    std::vector<std::string> counts;
    for (const auto& [code, n] : app_counts) counts.push_back(absl::StrCat("XID ", code, " ×", n));
    application.push_back({0, absl::StrCat(absl::StrJoin(counts, ", "), ", all while ",
                                           *app_holders.begin(), " held the GPU")});
  }

  Verdict v;
  auto by_time = [](std::vector<Evidence> e) {
    std::stable_sort(e.begin(), e.end(),
                     [](const Evidence& a, const Evidence& b) { return a.at_ms < b.at_ms; });
    return e;
  };
  if (!hardware.empty()) {
    v.cause = Cause::kHardware;
    v.headline = "the card, its slot, riser, power or cooling";
    v.next =
        "reseat the card and check its power cables and airflow; if it faults again, "
        "replace it (the evidence below is what to send with an RMA)";
    v.evidence = by_time(hardware);
  } else if (!driver.empty()) {
    v.cause = Cause::kDriver;
    v.headline = "the driver, its firmware or their configuration";
    v.next =
        "make the user-space libraries match the kernel module (`gpulet doctor`), update "
        "the driver and GPU firmware, and collect nvidia-bug-report.sh if it repeats";
    v.evidence = by_time(driver);
  } else if (!application.empty() && !other_xid) {
    v.cause = Cause::kApplication;
    v.headline = absl::StrCat("the workload ", *app_holders.begin());
    v.next = "fix or restart that workload (`gpulet explain` on its error); the GPU is fine";
    v.evidence = by_time(application);
  } else {
    v.cause = Cause::kUndetermined;
    v.headline = "no recorded cause";
    v.next =
        "nothing before the fault points anywhere (no PCIe errors, no excursion, no "
        "earlier fault): if it comes back after a reboot or under another workload, it "
        "is the card";
    v.evidence = by_time(application);
  }
  return v;
}

std::string TimelineText(const RecorderDump& d, const Verdict& v) {
  std::string out = absl::StrCat(d.uuid, " (", d.name.empty() ? "GPU" : d.name, ", ", d.pci_bus_id,
                                 d.index ? absl::StrCat(", index ", *d.index) : "", ") on ",
                                 d.node.empty() ? "this node" : d.node, "\n");
  absl::StrAppend(&out, "  driver ", d.driver_version.empty() ? "unknown" : d.driver_version,
                  ", gpulet ", d.gpulet_version, ", boot ",
                  d.boot_id.empty() ? "unknown" : d.boot_id, "\n");
  absl::StrAppend(&out, "fault    ", FormatMillis(d.fault_ms), "  ", d.fault, "\n");
  absl::StrAppend(&out, "verdict  ", CauseName(v.cause), ": ", v.headline, "\n");
  for (const Evidence& e : v.evidence) {
    absl::StrAppend(&out, "  - ", e.at_ms != 0 ? absl::StrCat(HourMinSec(e.at_ms), " ") : "",
                    e.text, "\n");
  }
  absl::StrAppend(&out, "next     ", v.next, "\n\nevents\n");
  for (const RecordedEvent& e : d.events) {
    absl::StrAppendFormat(&out, "  %s  %-14s %s%s\n", HourMinSec(e.at_ms), EventKindName(e.kind),
                          e.text, e.pod.empty() ? "" : absl::StrCat(" [", e.pod, "]"));
  }
  if (d.events.empty()) absl::StrAppend(&out, "  (none)\n");
  absl::StrAppend(
      &out,
      "\nsamples (every one in the last minute before the fault, one a minute before that)\n");
  absl::StrAppend(&out,
                  "  time      temp  power/limit W   sm MHz  throttle  util  fb MiB  link       "
                  "replays  aer c/n/f  nvml ms\n");
  int64_t last_minute = -1;
  for (const RecordedSample& s : d.samples) {
    bool near = s.at_ms >= d.fault_ms - 60'000;
    int64_t minute = s.at_ms / 60'000;
    if (!near && minute == last_minute) continue;
    last_minute = minute;
    auto num = [&](Column c) {
      std::optional<int64_t> x = s.Get(c);
      return x ? absl::StrCat(*x) : std::string("-");
    };
    std::string power = "-";
    if (auto mw = s.Get(Column::kPowerMw)) {
      power = absl::StrFormat("%.0f", *mw / 1000.0);
      if (auto lim = s.Get(Column::kPowerLimitMw))
        absl::StrAppendFormat(&power, "/%.0f", *lim / 1000.0);
    }
    std::string link = "-";
    if (auto w = s.Get(Column::kPcieLinkWidth)) {
      link = absl::StrCat("x", *w);
      if (auto m = s.Get(Column::kPcieLinkMts))
        absl::StrAppendFormat(&link, "@%.1fGT", *m / 1000.0);
    }
    std::string throttle = "-";
    if (auto r = s.Get(Column::kThrottleReasons)) throttle = absl::StrFormat("0x%x", *r);
    std::string aer = absl::StrCat(num(Column::kAerCorrectable), "/", num(Column::kAerNonFatal),
                                   "/", num(Column::kAerFatal));
    std::string temp = s.Get(Column::kAnswering) == 0 ? "lost" : num(Column::kGpuTempC);
    absl::StrAppendFormat(&out, "  %s  %4s  %13s  %7s  %8s  %4s  %6s  %-9s  %7s  %9s  %7s\n",
                          HourMinSec(s.at_ms), temp, power, num(Column::kSmClockMhz), throttle,
                          num(Column::kGpuUtilPercent), num(Column::kFbUsedMib), link,
                          num(Column::kPcieReplays), aer, num(Column::kNvmlMs));
  }
  if (d.samples.empty()) absl::StrAppend(&out, "  (none)\n");
  return out;
}

namespace {

std::string Escape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        // Control characters are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t') out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::string TimelineSvg(const RecorderDump& d, const Verdict& v) {
  constexpr int kWidth = 960, kLeft = 70, kRight = 20, kPanel = 110, kGap = 30, kTop = 70;
  struct Panel {
    const char* title;
    std::vector<std::pair<Column, const char*>> series;  // column, colour
    double scale;                                        // value → plotted unit
  };
  const std::vector<Panel> panels = {
      {"GPU temperature (°C)", {{Column::kGpuTempC, "#d62728"}, {Column::kMemTempC, "#ff9896"}}, 1},
      {"power and its limit (W)",
       {{Column::kPowerMw, "#1f77b4"}, {Column::kPowerLimitMw, "#7f7f7f"}},
       0.001},
      {"SM clock (MHz)", {{Column::kSmClockMhz, "#2ca02c"}}, 1},
      {"PCIe: replays, AER correctable / non-fatal / fatal",
       {{Column::kPcieReplays, "#9467bd"},
        {Column::kAerCorrectable, "#8c564b"},
        {Column::kAerNonFatal, "#e377c2"},
        {Column::kAerFatal, "#000000"}},
       1},
  };
  const int height = kTop + static_cast<int>(panels.size()) * (kPanel + kGap) + 40;
  int64_t t0 = d.fault_ms, t1 = d.fault_ms + 1;
  for (const RecordedSample& s : d.samples) {
    t0 = std::min(t0, s.at_ms);
    t1 = std::max(t1, s.at_ms);
  }
  for (const RecordedEvent& e : d.events) {
    t0 = std::min(t0, e.at_ms);
    t1 = std::max(t1, e.at_ms);
  }
  if (t1 <= t0) t1 = t0 + 1;
  const double plot_w = kWidth - kLeft - kRight;
  auto x_of = [&](int64_t t) {
    return kLeft + plot_w * static_cast<double>(t - t0) / static_cast<double>(t1 - t0);
  };
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n",
      kWidth, height);
  absl::StrAppendFormat(
      &out, "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">%s</text>\n", kLeft,
      Escape(absl::StrCat(d.uuid, " ", d.name, " — fault at ", FormatMillis(d.fault_ms))));
  absl::StrAppendFormat(&out, "<text x=\"%d\" y=\"38\">%s</text>\n", kLeft, Escape(d.fault));
  absl::StrAppendFormat(&out,
                        "<text x=\"%d\" y=\"56\" font-weight=\"bold\">verdict: %s — %s</text>\n",
                        kLeft, CauseName(v.cause), Escape(v.headline));
  for (size_t p = 0; p < panels.size(); ++p) {
    const Panel& panel = panels[p];
    const int top = kTop + static_cast<int>(p) * (kPanel + kGap) + 14;
    double lo = 0, hi = 1;
    bool any = false;
    for (const RecordedSample& s : d.samples) {
      for (const auto& [c, colour] : panel.series) {
        if (auto x = s.Get(c)) {
          double y = *x * panel.scale;
          lo = any ? std::min(lo, y) : y;
          hi = any ? std::max(hi, y) : y;
          any = true;
        }
      }
    }
    if (hi <= lo) hi = lo + 1;
    absl::StrAppendFormat(&out, "<text x=\"%d\" y=\"%d\">%s</text>\n", kLeft, top - 4,
                          Escape(panel.title));
    absl::StrAppendFormat(&out,
                          "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%d\" fill=\"none\" "
                          "stroke=\"#ccc\"/>\n",
                          kLeft, top, plot_w, kPanel);
    absl::StrAppendFormat(&out, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f</text>\n",
                          kLeft - 4, top + 10, hi);
    absl::StrAppendFormat(&out, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f</text>\n",
                          kLeft - 4, top + kPanel, lo);
    for (const auto& [c, colour] : panel.series) {
      std::string points;
      for (const RecordedSample& s : d.samples) {
        std::optional<int64_t> x = s.Get(c);
        if (!x) continue;
        double y = top + kPanel - (*x * panel.scale - lo) / (hi - lo) * kPanel;
        absl::StrAppendFormat(&points, "%.1f,%.1f ", x_of(s.at_ms), y);
      }
      if (points.empty()) continue;
      absl::StrAppendFormat(&out,
                            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                            "points=\"%s\"><title>%s</title></polyline>\n",
                            colour, points, InfoOf(c).name);
    }
    // Events as ticks along the panel's bottom; XIDs and health changes across it.
    for (const RecordedEvent& e : d.events) {
      const char* colour = e.kind == EventKind::kXid      ? "#d62728"
                           : e.kind == EventKind::kHealth ? "#ff7f0e"
                                                          : "#999999";
      bool across = e.kind == EventKind::kXid || e.kind == EventKind::kHealth;
      absl::StrAppendFormat(
          &out,
          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"%s\"><title>%s "
          "%s</title></line>\n",
          x_of(e.at_ms), x_of(e.at_ms), across ? top : top + kPanel - 6, top + kPanel, colour,
          HourMinSec(e.at_ms), Escape(e.text));
    }
    absl::StrAppendFormat(&out,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#d62728\" "
                          "stroke-width=\"2\" stroke-dasharray=\"4 3\"/>\n",
                          x_of(d.fault_ms), x_of(d.fault_ms), top, top + kPanel);
  }
  absl::StrAppendFormat(&out, "<text x=\"%d\" y=\"%d\">%s</text>\n", kLeft, height - 14,
                        HourMinSec(t0));
  absl::StrAppendFormat(&out, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s (UTC)</text>\n",
                        kWidth - kRight, height - 14, HourMinSec(t1));
  out += "</svg>\n";
  return out;
}

}  // namespace gpulet::recorder
