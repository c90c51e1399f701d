#include "daemon/inventory_watch.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpulet::daemon {
namespace {

std::string Node(unsigned minor) { return absl::StrCat("/dev/nvidia", minor); }

// What differs between the driver's view of one GPU and what gpulet serves; "" when nothing.
std::string Difference(const gpu::Inventory& served, const node::DriverGpu& d) {
  const gpu::Gpu* g = served.FindByBusId(d.bus_id);
  const std::string where = absl::StrCat(d.uuid.empty() ? "the GPU" : d.uuid, " at ", d.bus_id);
  if (g == nullptr) {
    return absl::StrCat(where, " is served by the driver",
                        d.minor ? absl::StrCat(" as ", Node(*d.minor)) : "",
                        ", and gpulet does not serve it");
  }
  if (!d.uuid.empty() && !g->uuid.empty() && d.uuid != g->uuid) {
    return absl::StrCat(d.bus_id, " holds ", d.uuid, " now (served as ", g->uuid, ")");
  }
  if (!d.minor) return "";
  if (!g->minor) {
    return absl::StrCat(where, " is served by the driver as ", Node(*d.minor),
                        " now (gpulet serves it without the driver)");
  }
  if (*g->minor != *d.minor) {
    return absl::StrCat(where, " is ", Node(*d.minor), " now (served as ", Node(*g->minor), ")");
  }
  return "";
}

}  // namespace

std::string InventoryWatch::Check(const gpu::Inventory& served,
                                  const absl::StatusOr<std::vector<node::DriverGpu>>& driver) {
  if (!driver.ok()) return "";
  std::vector<std::string> differences;
  for (const node::DriverGpu& d : *driver) {
    if (d.excluded || d.bus_id.empty()) continue;
    if (std::string difference = Difference(served, d); !difference.empty()) {
      differences.push_back(std::move(difference));
    }
  }
  std::string now = absl::StrJoin(differences, "; ");
  if (now == acted_on_) return "";
  acted_on_ = now;
  return now;
}

}  // namespace gpulet::daemon
