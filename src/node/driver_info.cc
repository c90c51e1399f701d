#include "node/driver_info.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace gpulet::node {
namespace {

// "570.133.20", "535.54.03", "418.87.01": digits and dots, at least one dot, digit first.
bool LooksLikeVersion(absl::string_view token) {
  if (token.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(token.front()))) {
    return false;
  }
  bool has_dot = false;
  for (char c : token) {
    if (c == '.') {
      has_dot = true;
    } else if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return has_dot && token.back() != '.';
}

std::string FirstNvrmLine(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::string_view stripped = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(stripped, "NVRM version:")) return std::string(stripped);
  }
  return "";
}

}  // namespace

absl::string_view DriverFlavorName(DriverFlavor flavor) {
  switch (flavor) {
    case DriverFlavor::kOpen:
      return "open";
    case DriverFlavor::kProprietary:
      return "proprietary";
    case DriverFlavor::kUnknown:
      break;
  }
  return "unknown";
}

bool DriverFlavorSupports(DriverFlavor running, ModuleFlavor required) {
  if (running == DriverFlavor::kOpen) return required != ModuleFlavor::kProprietaryRequired;
  if (running == DriverFlavor::kProprietary) return required != ModuleFlavor::kOpenRequired;
  return true;
}

NvrmVersion ParseNvrmVersion(absl::string_view text) {
  NvrmVersion out;
  std::string line = FirstNvrmLine(text);
  if (line.empty()) return out;
  absl::string_view rest =
      absl::string_view(line).substr(absl::string_view("NVRM version:").size());
  // The open build says "Open Kernel Module"; the proprietary one just "Kernel Module".
  // Anything else (a future wording) stays kUnknown rather than being guessed.
  if (absl::StrContains(rest, "Open Kernel Module")) {
    out.flavor = DriverFlavor::kOpen;
  } else if (absl::StrContains(rest, "Kernel Module")) {
    out.flavor = DriverFlavor::kProprietary;
  }
  // The version is the first version-shaped token: it follows the architecture
  // ("x86_64", "aarch64"), which is not version-shaped, and precedes the build date.
  for (absl::string_view token : absl::StrSplit(rest, ' ', absl::SkipEmpty())) {
    token = absl::StripAsciiWhitespace(token);
    if (LooksLikeVersion(token)) {
      out.version = std::string(token);
      break;
    }
  }
  return out;
}

LoadedModules ParseProcModules(absl::string_view text) {
  LoadedModules out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    absl::string_view name = absl::StripLeadingAsciiWhitespace(line);
    name = name.substr(0, name.find_first_of(" \t"));
    if (name == "nvidia") {
      out.nvidia = true;
    } else if (name == "nvidia_uvm") {
      out.nvidia_uvm = true;
    } else if (name == "nvidia_modeset") {
      out.nvidia_modeset = true;
    } else if (name == "nvidia_drm") {
      out.nvidia_drm = true;
    } else if (name == "nouveau") {
      out.nouveau = true;
    }
  }
  return out;
}

DriverInfo ReadDriverInfo(const HostFs& fs) {
  DriverInfo info;

  if (absl::StatusOr<std::string> text = fs.ReadFile("/proc/driver/nvidia/version", 64 * 1024);
      text.ok()) {
    info.version_file_present = true;
    info.nvrm_line = FirstNvrmLine(*text);
    NvrmVersion parsed = ParseNvrmVersion(*text);
    info.version = std::move(parsed.version);
    info.flavor = parsed.flavor;
  }
  if (absl::StatusOr<std::string> text = fs.ReadAttribute("/sys/module/nvidia/version");
      text.ok()) {
    info.module_version = std::string(absl::StripAsciiWhitespace(*text));
  }

  if (absl::StatusOr<std::string> text = fs.ReadFile("/proc/modules"); text.ok()) {
    info.proc_modules_readable = true;
    info.modules = ParseProcModules(*text);
  }

  if (absl::StatusOr<std::string> text = fs.ReadFile("/proc/driver/nvidia-caps/mig-minors");
      text.ok()) {
    if (absl::StatusOr<MigMinors> minors = ParseMigMinors(*text); minors.ok()) {
      info.mig_minors = *std::move(minors);
    }
  }
  info.dev_nvidiactl = fs.Exists("/dev/nvidiactl");
  info.dev_nvidia_uvm = fs.Exists("/dev/nvidia-uvm");
  info.dev_nvidia_uvm_tools = fs.Exists("/dev/nvidia-uvm-tools");
  info.dev_nvidia_modeset = fs.Exists("/dev/nvidia-modeset");
  if (absl::StatusOr<std::vector<std::string>> names = fs.ListDir("/dev"); names.ok()) {
    for (const std::string& name : *names) {
      absl::string_view s = name;
      if (!absl::ConsumePrefix(&s, "nvidia") || s.empty()) continue;
      // Only digits: "nvidia0" is a GPU, "nvidia-uvm" and "nvidiactl" are not.
      if (!std::all_of(s.begin(), s.end(),
                       [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); })) {
        continue;
      }
      int minor = 0;
      if (absl::SimpleAtoi(s, &minor)) info.dev_gpu_minors.push_back(minor);
    }
    std::sort(info.dev_gpu_minors.begin(), info.dev_gpu_minors.end());
  }
  return info;
}

}  // namespace gpulet::node
