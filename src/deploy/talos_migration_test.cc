// PlanKubeNodeMigration on hand-written machine configurations (the shapes `talosctl get
// machineconfig` prints); what Talos' own code makes of the result is checked by
// talos_machinery_test.cc.
#include "deploy/talos_migration.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/talos_releases.h"

namespace gpulet::deploy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const node::Release& Release(int minor) { return *node::FindRelease(1, minor)->release; }

// A worker configured by Talos 1.13 with gpulet's 1.13 patch and the user's own node IP.
constexpr char kUpgradedWorker[] = R"(version: v1alpha1
machine:
  type: worker
  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.35.0
    extraArgs:
      register-with-taints: nvidia.com/gpu=present:NoSchedule,dedicated:NoExecute
      rotate-server-certificates: "true"
    nodeIP:
      validSubnets: [192.168.1.0/24, "!192.168.1.9/32"]
  nodeLabels:
    nvidia.com/gpu.present: "true"
    topology.kubernetes.io/zone: lab
  nodeAnnotations:
    rack: r13
  nodeTaints:
    gpu-maintenance: "true:NoSchedule"
cluster:
  clusterName: homelab
---
apiVersion: v1alpha1
kind: HostnameConfig
auto: stable
)";

TEST(TalosMigrationTest, EveryKubeNodeConflictOfTheTableHasACarryRule) {
  for (const node::Release& r : node::KnownReleases()) {
    EXPECT_THAT(UncarriedKubeNodeConflicts(r), ::testing::IsEmpty()) << r.Name();
  }
}

TEST(TalosMigrationTest, ReleasesWithoutKubeNodeConfigMoveNothing) {
  absl::StatusOr<KubeNodeMigration> plan = PlanKubeNodeMigration(Release(13), kUpgradedWorker, "c");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->moved.empty());
  EXPECT_FALSE(plan->deletes.IsMap());
}

TEST(TalosMigrationTest, AnUpgradedWorkerMovesEveryRefusedFieldWithItsValue) {
  absl::StatusOr<KubeNodeMigration> plan =
      PlanKubeNodeMigration(Release(14), kUpgradedWorker, "current.yaml");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->moved, ElementsAre("machine.nodeLabels", "machine.nodeAnnotations",
                                       "machine.nodeTaints", "machine.kubelet.nodeIP",
                                       "machine.kubelet.extraArgs.register-with-taints"));
  const YAML::Node& d = plan->deletes;
  EXPECT_EQ(d["machine"]["nodeLabels"]["$patch"].Scalar(), "delete");
  EXPECT_EQ(d["machine"]["kubelet"]["nodeIP"]["$patch"].Scalar(), "delete");
  EXPECT_EQ(d["machine"]["kubelet"]["extraArgs"]["register-with-taints"]["$patch"].Scalar(),
            "delete");
  // The other kubelet flag and the kubelet image stay where they are.
  EXPECT_FALSE(d["machine"]["kubelet"]["extraArgs"]["rotate-server-certificates"]);
  EXPECT_FALSE(d["machine"]["kubelet"]["image"]);

  const YAML::Node& c = plan->carried;
  EXPECT_EQ(c["labels"]["topology.kubernetes.io/zone"].Scalar(), "lab");
  EXPECT_EQ(c["labels"]["nvidia.com/gpu.present"].Scalar(), "true");
  EXPECT_EQ(c["annotations"]["rack"].Scalar(), "r13");
  EXPECT_EQ(c["taints"]["gpu-maintenance"].Scalar(), "true:NoSchedule");
  EXPECT_EQ(c["taints"]["nvidia.com/gpu"].Scalar(), "present:NoSchedule");
  EXPECT_EQ(c["taints"]["dedicated"].Scalar(), "NoExecute");
  ASSERT_EQ(c["nodeIP"]["validSubnets"].size(), 2u);
  EXPECT_EQ(c["nodeIP"]["validSubnets"][1].Scalar(), "!192.168.1.9/32");
  // A worker gets no control-plane label or taint.
  EXPECT_FALSE(c["labels"]["node-role.kubernetes.io/control-plane"]);
  EXPECT_FALSE(plan->has_kube_node_config);
}

TEST(TalosMigrationTest, AControlPlaneKeepsTheLabelAndTheTaintTalosGaveIt) {
  constexpr char kNotSchedulable[] = "version: v1alpha1\nmachine: {type: controlplane}\n";
  absl::StatusOr<KubeNodeMigration> plan = PlanKubeNodeMigration(Release(14), kNotSchedulable, "c");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->moved.empty());
  EXPECT_EQ(plan->carried["labels"]["node-role.kubernetes.io/control-plane"].Scalar(), "");
  EXPECT_EQ(plan->carried["taints"]["node-role.kubernetes.io/control-plane"].Scalar(),
            "NoSchedule");

  constexpr char kSchedulable[] =
      "version: v1alpha1\nmachine: {type: init}\ncluster: {allowSchedulingOnMasters: true}\n";
  plan = PlanKubeNodeMigration(Release(14), kSchedulable, "c");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->moved, ElementsAre("cluster.allowSchedulingOnMasters"));
  EXPECT_EQ(plan->deletes["cluster"]["allowSchedulingOnMasters"]["$patch"].Scalar(), "delete");
  EXPECT_TRUE(plan->carried["labels"]["node-role.kubernetes.io/control-plane"]);
  EXPECT_FALSE(plan->carried["taints"]);
}

TEST(TalosMigrationTest, ANodeInstalledWithOneFourteenNeedsNothingMoved) {
  constexpr char kNew[] =
      "version: v1alpha1\nmachine: {type: controlplane}\n---\napiVersion: v1alpha1\n"
      "kind: KubeNodeConfig\nnodeIP: {}\ntaints: {node-role.kubernetes.io/control-plane: "
      "NoSchedule}\n";
  absl::StatusOr<KubeNodeMigration> plan = PlanKubeNodeMigration(Release(14), kNew, "c");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->has_kube_node_config);
  EXPECT_TRUE(plan->moved.empty());
  EXPECT_FALSE(plan->deletes.IsMap());
  EXPECT_EQ(plan->carried.size(), 0u);  // its KubeNodeConfig already says it all
}

TEST(TalosMigrationTest, BadConfigurationsAreRefusedNamingTheFileAndField) {
  struct Case {
    const char* yaml;
    const char* says;
  };
  const Case cases[] = {
      {"machine: [unclosed", "current.yaml"},
      {"apiVersion: v1alpha1\nkind: HostnameConfig\n", "no v1alpha1 document"},
      {"version: v1alpha1\nmachine:\n  nodeLabels: [a, b]\n",
       "current.yaml: .machine.nodeLabels is not a map of strings"},
      {"version: v1alpha1\nmachine:\n  nodeLabels: {a: {b: c}}\n", ".machine.nodeLabels"},
      {"version: v1alpha1\nmachine:\n  kubelet:\n    nodeIP: {validSubnets: [10.0.0.0/8], "
       "other: x}\n",
       ".machine.kubelet.nodeIP.other has no place"},
      {"version: v1alpha1\nmachine:\n  kubelet:\n    extraArgs: {register-with-taints: "
       "nocolon}\n",
       "entry 'nocolon' is not key=value:Effect"},
      {"version: v1alpha1\ncluster: {allowSchedulingOnControlPlanes: maybe}\n",
       ".cluster.allowSchedulingOnControlPlanes is not true or false"},
      // Keys that are no Kubernetes key: a long one would not even print back as YAML (the
      // fuzzer's find: an implicit key is at most 1024 characters).
      {"version: v1alpha1\nmachine:\n  nodeLabels: {\"a b\": c}\n",
       ".machine.nodeLabels has the key 'a b', which is not a Kubernetes qualified name"},
      {"version: v1alpha1\nmachine:\n  nodeTaints: {\"k\\x0b\": NoSchedule}\n",
       "has the key 'k\\x0b'"},
      {"version: v1alpha1\nmachine:\n  kubelet:\n    nodeIP: {validSubnets: {a: b}}\n",
       ".machine.kubelet.nodeIP.validSubnets is not a list of subnets"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<KubeNodeMigration> plan =
        PlanKubeNodeMigration(Release(14), c.yaml, "current.yaml");
    ASSERT_FALSE(plan.ok()) << c.yaml;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_THAT(plan.status().message(), HasSubstr(c.says)) << c.yaml;
  }
  // A taint key of 2000 characters in the kubelet flag: refused, and the error shows 80.
  const std::string flag = absl::StrCat(
      "version: v1alpha1\nmachine:\n  kubelet:\n    extraArgs: {register-with-taints: \"",
      std::string(2000, 'k'), "=v:NoSchedule\"}\n");
  absl::StatusOr<KubeNodeMigration> plan = PlanKubeNodeMigration(Release(14), flag, "current.yaml");
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr(absl::StrCat("'", std::string(80, 'k'), "...'")));
  EXPECT_LT(plan.status().message().size(), 500u);
}

}  // namespace
}  // namespace gpulet::deploy
