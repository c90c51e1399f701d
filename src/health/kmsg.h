// Parsing of /dev/kmsg records, the kernel log as the kernel hands it to readers.
//
// Each read() of /dev/kmsg returns one record:
//   "<prio>,<seq>,<usec>,<flag>[,more fields];<text>\n"
// followed by optional dictionary lines that begin with a space (" SUBSYSTEM=pci",
// " DEVICE=+pci:0000:3b:00.0"). prio is facility << 3 | level, seq grows by one per record
// (a gap means records were overwritten before they were read), usec is microseconds since
// boot, flag is '-' for a whole message and 'c' (or '+' on old kernels) for a fragment.
// Non-printable bytes in the text and dictionary values are escaped as \xNN, so a message
// printed with embedded newlines (the NVIDIA "fallen off the bus" message) arrives as one
// record containing "\x0a". This file turns that into a KmsgRecord with the text unescaped.
//
// The parser runs on whatever a host hands us, so it never trusts the input: every
// malformed record gives an InvalidArgument status, never a crash (a fuzz target checks).
//
// Thread-safety: pure functions; safe to call concurrently.
#ifndef GPULET_HEALTH_KMSG_H_
#define GPULET_HEALTH_KMSG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpulet::health {

struct KmsgRecord {
  int facility = 0;  // 0 = kernel; user-space writes to /dev/kmsg cannot use 0
  int level = 0;     // 0 (emerg) .. 7 (debug)
  uint64_t seq = 0;
  uint64_t timestamp_us = 0;                // since boot (CLOCK_MONOTONIC-like)
  bool continuation = false;                // flag 'c' or '+': a fragment of a longer message
  std::string text;                         // unescaped; may contain '\n'
  std::map<std::string, std::string> dict;  // KEY=VALUE dictionary lines, values unescaped

  bool from_kernel() const { return facility == 0; }
};

// Parses one raw record. The trailing newline is optional (files written by hand often lack
// it). InvalidArgument, quoting the start of the record, when the header is malformed or a
// second record follows the first (records must be passed one at a time).
absl::StatusOr<KmsgRecord> ParseKmsgRecord(absl::string_view raw);

// Replaces each "\xNN" (two hex digits, either case) by its byte; anything else, including
// a backslash not followed by a valid escape, is kept as it is.
std::string UnescapeKmsgText(absl::string_view text);

// Splits text holding several raw records one after another (a dump of /dev/kmsg, a test
// fixture) into single records: a record starts at every line that does not begin with a
// space. Empty lines and lines starting with '#' before a record are skipped, so fixture
// files can carry comments.
std::vector<std::string> SplitKmsgRecords(absl::string_view text);

}  // namespace gpulet::health

#endif  // GPULET_HEALTH_KMSG_H_
