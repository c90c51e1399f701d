#include "recorder/recording.h"

#include <algorithm>

namespace gpulet::recorder {

const ColumnInfo& InfoOf(Column column) { return kColumns[static_cast<size_t>(column)]; }

void RecordedSample::Set(Column c, std::optional<int64_t> v) {
  if (!v) return;
  int64_t clamped = std::clamp<int64_t>(*v, std::numeric_limits<int32_t>::min() + int64_t{1},
                                        std::numeric_limits<int32_t>::max());
  values[static_cast<size_t>(c)] = static_cast<int32_t>(clamped);
}

void RecordedSample::FoldIn(const RecordedSample& later) {
  for (size_t i = 0; i < kColumnCount; ++i) {
    int32_t& mine = values[i];
    const int32_t theirs = later.values[i];
    if (theirs == kAbsent) continue;
    if (mine == kAbsent) {
      mine = theirs;
      continue;
    }
    switch (kColumns[i].fold) {
      case Fold::kMax:
        mine = std::max(mine, theirs);
        break;
      case Fold::kMin:
        mine = std::min(mine, theirs);
        break;
      case Fold::kOr:
        mine = mine | theirs;
        break;
    }
  }
  at_ms = later.at_ms;
}

const char* EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kXid:
      return "xid";
    case EventKind::kHealth:
      return "health";
    case EventKind::kNvmlError:
      return "nvml";
    case EventKind::kProcessStart:
      return "process-start";
    case EventKind::kProcessStop:
      return "process-stop";
    case EventKind::kRecorderStart:
      return "recorder-start";
  }
  return "?";
}

std::optional<EventKind> ParseEventKind(std::string_view name) {
  for (EventKind k :
       {EventKind::kXid, EventKind::kHealth, EventKind::kNvmlError, EventKind::kProcessStart,
        EventKind::kProcessStop, EventKind::kRecorderStart}) {
    if (name == EventKindName(k)) return k;
  }
  return std::nullopt;
}

}  // namespace gpulet::recorder
