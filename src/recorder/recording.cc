#include "recorder/recording.h"

#include <algorithm>

namespace gpulet {

const ColumnInfo& InfoOf(Column column) { return kColumns[static_cast<size_t>(column)]; }

void RecordedSample::Set(Column c, std::optional<int64_t> v) {
  if (!v) return;
  int64_t clamped = std::clamp<int64_t>(*v, std::numeric_limits<int32_t>::min() + int64_t{1},
                                        std::numeric_limits<int32_t>::max());
  values[static_cast<size_t>(c)] = static_cast<int32_t>(clamped);
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

}  // namespace gpulet
