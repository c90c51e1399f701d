#!/usr/bin/env python3
"""`make e2e`: gpulet against a real single-node Kubernetes cluster, on each tested version.

  tests/e2e/e2e.py [--versions v1.34.4,v1.37.2] [--only NAME,...] [--keep] [--gpulet BINARY]

For each version it builds the peers (scripts/e2e/build.sh, cached outside the clone), starts
the cluster (tests/e2e/cluster.py: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kube-proxy, kubelet, containerd 2.x with runc, CDI and the CNI bridge), serves
the archive `make image` saved with `gpulet image-serve` (the kubelet pulls it from there,
pinned by digest), and installs gpulet as a user does: the node labelled,
`kubectl apply -k` of deploy/ through tests/e2e/overlay (the NVML simulator instead of GPUs).
Then each scenario below runs and is asserted from the API server's side and from inside the
containers. It needs root. Exit 0 when every scenario passed on every version.

--reuse-image skips `make image` when podman has the image (a faster loop while changing
only the suite). --keep leaves the last cluster running (kubectl --kubeconfig <work>/admin.kubeconfig) for a
person to look at; --only runs the named scenarios (and those they build on).
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import traceback

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import cluster as clusterlib  # noqa: E402
from cluster import ClusterError, NODE, run, wait_for  # noqa: E402

# The oldest Kubernetes gpulet supports (resource.k8s.io/v1 is GA in 1.34) and the newest
# served. Keep docs/e2e.md's table in step.
VERSIONS = ["v1.34.4", "v1.37.2"]
IMAGE = "localhost/gpulet:0.1.0"
BUSYBOX = "localhost/gpulet-e2e/busybox:1"
# An application image as a user would bring: the VRAM test application (tests/vram/vram_app.c)
# with its glibc and the CUDA driver and NVML stand-ins, nothing of gpulet's.
VRAM_APP = "localhost/gpulet-e2e/vram-app:1"
NODE_DIR = "/var/lib/gpulet-e2e"
SIM_STATE = "/var/lib/gpulet/e2e-sim-state.json"
# The MIG scenario's simulator state (tests/e2e/overlay-mig names it), apart from homelab's.
MIG_SIM_STATE = "/var/lib/gpulet/e2e-sim-state-mig.json"
MIG_FIXTURE_ROOT = os.path.join(SRC, "sim", "fixtures", "h200-mig", "root")
# Where the NVIDIA driver lists its MIG capability devices' minors. This machine has no NVIDIA
# driver, so the MIG scenario mounts a tmpfs over the host's /proc/driver with the fixture's
# list, which gpulet reads through its host root (the DaemonSet's /host).
PROC_DRIVER = "/proc/driver"
NAMESPACE = "gpulet-system"


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


class Suite:
    def __init__(self, version, bins, work, gpulet, images, gpulet_image):
        self.version = version
        self.c = clusterlib.Cluster(version, bins, work)
        self.work = work
        self.gpulet = gpulet  # the host-side binary, for `gpulet sim` only
        self.images = images  # archives imported into containerd (pause, busybox)
        # gpulet's image: {"archive", "digest", "ref"}; the kubelet pulls `ref` (pinned by
        # digest) from `gpulet image-serve`, as a node with no registry does.
        self.gpulet_image = gpulet_image
        self.results = []

    # --- helpers -------------------------------------------------------------------------

    def sim(self, *args, fixture="homelab", state=SIM_STATE):
        run([self.gpulet, "--simulate", fixture, "--sim-state", state, "sim", *args])

    def node(self):
        return self.c.get_json("node", NODE)

    def capacity(self, resource="nvidia.com/gpu"):
        n = self.node()
        return (n["status"].get("capacity", {}).get(resource),
                n["status"].get("allocatable", {}).get(resource))

    def condition(self, type_):
        for c in self.node()["status"].get("conditions", []):
            if c["type"] == type_:
                return c
        return None

    def events(self, reason, namespace="default"):
        items = self.c.get_json("events.v1.events.k8s.io", "-n", namespace)["items"]
        return [e for e in items if e.get("reason") == reason]

    def gpulet_pod(self):
        pods = self.c.get_json("pods", "-n", NAMESPACE, "-l",
                               "app.kubernetes.io/name=gpulet")["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return live[0] if len(live) == 1 else None

    def gpulet_log(self, tail=40):
        """The end of the gpulet pod's log (all of it with tail=-1)."""
        p = self.gpulet_pod()
        if p is None:
            return "(no gpulet pod)"
        return self.c.kubectl("logs", "-n", NAMESPACE, p["metadata"]["name"], f"--tail={tail}",
                              check=False).stdout

    def pod_phase(self, name):
        r = self.c.kubectl("get", "pod", name, "-o", "json", check=False)
        if r.returncode != 0:
            return None
        return json.loads(r.stdout)["status"].get("phase")

    def gpu_pod(self, name, gpus=1, claim=None, resource="nvidia.com/gpu"):
        """Creates a busybox pod that asks for `gpus` of `resource` (or the ResourceClaim
        `claim`) and prints what it sees, then sleeps."""
        script = ("echo BEGIN; ls /dev | grep nvidia | sed 's/^/dev /';"
                  " ls /dev/nvidia-caps 2>/dev/null | sed 's|^|dev nvidia-caps/|';"
                  " env | sed 's/^/env /';"
                  " for f in /usr/local/lib/*; do echo \"lib $f $(readlink $f)\"; done;"
                  " for f in /run/gpulet/lib/libgpulet-vram.so /run/gpulet/vram/slice; do"
                  " test -f $f && echo \"file $f\"; done;"
                  " echo END; sleep 86400")
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default"},
               "spec": {"terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "main", "image": BUSYBOX,
                                        "imagePullPolicy": "Never",
                                        "command": ["sh", "-c", script]}]}}
        if claim:
            pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
            pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        else:
            pod["spec"]["containers"][0]["resources"] = {"limits": {resource: str(gpus)}}
        self.c.kubectl("apply", "-f", "-", input_text=json.dumps(pod))

    def seen_inside(self, name):
        """What the pod's container printed: {'dev': [...], 'env': {...}, 'lib': {...}}."""
        out = self.c.kubectl("logs", name, check=False).stdout
        if "END" not in out:
            return None
        seen = {"dev": [], "env": {}, "lib": {}, "file": []}
        for line in out.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "dev":
                seen["dev"].append("/dev/" + rest)
            elif kind == "env":
                k, _, v = rest.partition("=")
                seen["env"][k] = v
            elif kind == "file":
                seen["file"].append(rest)
            elif kind == "lib":
                path, _, target = rest.partition(" ")
                seen["lib"][path] = target
        return seen

    def running(self, name, timeout=90):
        def up():
            phase = self.pod_phase(name)
            if phase in ("Failed", "Succeeded"):
                raise Failure(f"pod {name} ended: {phase}")
            return phase == "Running" and self.seen_inside(name)
        try:
            return wait_for(f"pod {name} to run and print what it sees", up, timeout=timeout)
        except ClusterError as e:
            desc = self.c.kubectl("describe", "pod", name, check=False).stdout[-1500:]
            raise Failure(f"{e}\n{desc}") from e

    def cdi_spec(self):
        for d in ("/var/run/cdi", "/etc/cdi"):
            for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                if f.startswith("gpulet"):
                    with open(os.path.join(d, f)) as fh:
                        return yaml.safe_load(fh)
        raise Failure("gpulet wrote no CDI spec in /var/run/cdi or /etc/cdi")

    # --- set-up --------------------------------------------------------------------------

    def make_node_dir(self):
        """The host side of the simulated GPUs: device nodes, driver files, the hook."""
        shutil.rmtree(NODE_DIR, ignore_errors=True)
        dev = os.path.join(NODE_DIR, "devroot", "dev")
        os.makedirs(dev)
        st = os.stat("/dev/null")
        for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                     "nvidia-modeset"):
            os.mknod(os.path.join(dev, name), 0o666 | 0o020000, st.st_rdev)
        driver = os.path.join(NODE_DIR, "driver")
        shutil.copytree(os.path.join(SRC, "sim/fixtures/homelab/root/usr"),
                        os.path.join(driver, "usr"), symlinks=True)
        for lib in ("libnvidia-ml", "libcuda"):
            os.symlink(f"{lib}.so.570.133.20",
                       os.path.join(driver, "usr/local/lib", f"{lib}.so.1"))
        shutil.copy(os.path.join(SRC, "tests", "cdi_hook_standin.py"),
                    os.path.join(NODE_DIR, "hook"))
        os.chmod(os.path.join(NODE_DIR, "hook"), 0o755)
        # gpulet's state on the host (the DaemonSet's /var/lib/gpulet: XID history, fault
        # records, DRA checkpoint): a fresh node's, not an earlier run's.
        shutil.rmtree(os.path.dirname(SIM_STATE), ignore_errors=True)
        os.makedirs(os.path.dirname(SIM_STATE))
        self.mig_driver_files(False)  # an interrupted run's

    def mig_driver_files(self, present):
        """What the NVIDIA driver adds on a MIG node, for the h200-mig fixture: its
        /proc/driver/nvidia-caps/mig-minors (a tmpfs over the host's /proc/driver) and the
        capability device nodes /dev/nvidia-caps/nvidia-cap<N> under the e2e device root
        (/dev/null's numbers, as the GPU nodes), one for every minor the list names, as
        `nvidia-modprobe -f` makes them. present=False takes both away."""
        with open("/proc/self/mountinfo") as f:
            ours = any(line.split()[4] == PROC_DRIVER and " gpulet-e2e-driver " in line
                       for line in f)
        if ours:
            run(["umount", PROC_DRIVER])
        caps_dev = os.path.join(NODE_DIR, "devroot", "dev", "nvidia-caps")
        shutil.rmtree(caps_dev, ignore_errors=True)
        if not present:
            return
        run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "gpulet-e2e-driver", PROC_DRIVER])
        os.makedirs(os.path.join(PROC_DRIVER, "nvidia-caps"))
        minors = os.path.join(MIG_FIXTURE_ROOT, "proc/driver/nvidia-caps/mig-minors")
        shutil.copy(minors, os.path.join(PROC_DRIVER, "nvidia-caps", "mig-minors"))
        os.makedirs(caps_dev)
        st = os.stat("/dev/null")
        with open(minors) as f:
            for line in f:
                if line.strip():
                    os.mknod(os.path.join(caps_dev, "nvidia-cap" + line.split()[1]),
                             0o666 | 0o020000, st.st_rdev)

    def apply_overlay(self, name):
        """`kubectl apply -k` of tests/e2e/NAME with gpulet's image pinned by digest to the
        one `gpulet image-serve` serves (a kustomization beside the cluster's files that sets
        it, as a user pins it with `kustomize edit set image`)."""
        d = os.path.join(self.work, "install-" + name)
        os.makedirs(d, exist_ok=True)
        ref, digest = self.gpulet_image["ref"].split("@")
        with open(os.path.join(d, "kustomization.yaml"), "w") as f:
            yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1",
                            "kind": "Kustomization",
                            "resources": [os.path.relpath(os.path.join(HERE, name), d)],
                            "images": [{"name": "gpulet", "newName": ref,
                                        "digest": digest}]}, f)
        self.c.kubectl("apply", "-k", d)

    def install(self):
        for archive in self.images:
            self.c.import_image(archive)
        self.make_node_dir()
        self.c.kubectl("label", "node", NODE, "nvidia.com/gpu.present=true", "--overwrite")
        self.apply_overlay("overlay")

    # --- scenarios -----------------------------------------------------------------------

    def scenario_registers(self):
        """The device plugin registers and the Node shows both GPUs."""
        try:
            wait_for("nvidia.com/gpu capacity 2", lambda: self.capacity() == ("2", "2"),
                     timeout=150)
        except ClusterError as e:
            raise Failure(f"{e}; capacity {self.capacity()}; gpulet log:\n{self.gpulet_log()}")
        status = self.gpulet_pod()["status"]["containerStatuses"][0]
        check(status["imageID"].endswith(self.gpulet_image["digest"]),
              f"gpulet runs {status['image']} ({status['imageID']}), not the image pinned to "
              f"{self.gpulet_image['ref']}")
        # The other way in for a containerd node, `ctr images import` of the same archive,
        # keeps the digest the manifests pin. After the pull above: containerd shares blobs
        # between namespaces, and an import first would have left the kubelet nothing to pull.
        ctr = [self.c.bins["ctr"], "--address", self.c.containerd_sock, "-n", "gpulet-e2e-import"]
        run(ctr + ["images", "import", self.gpulet_image["archive"]], timeout=300)
        listed = run(ctr + ["images", "ls"]).stdout
        check(self.gpulet_image["digest"] in listed,
              f"ctr images import of {self.gpulet_image['archive']} does not show "
              f"{self.gpulet_image['digest']}:\n{listed}")
        check(self.condition("GpuUnhealthy") is not None,
              "gpulet's GpuUnhealthy condition is not on the Node")
        check(self.condition("GpuUnhealthy")["status"] == "False",
              f"GpuUnhealthy: {self.condition('GpuUnhealthy')}")

    def scenario_pod_sees_cdi_devices(self):
        """A pod asking for nvidia.com/gpu runs and sees what gpulet's CDI spec names."""
        self.gpu_pod("gpu-a")
        seen = self.running("gpu-a")
        spec = self.cdi_spec()
        nvidia_devs = [d for d in seen["dev"] if d.startswith("/dev/nvidia") and
                       d[len("/dev/nvidia"):].isdigit()]
        check(len(nvidia_devs) == 1, f"the pod sees GPU nodes {nvidia_devs}, not one")
        # The device the pod got, by its node, and everything the spec says it brings.
        dev = next((d for d in spec["devices"]
                    if any(n["path"].endswith(nvidia_devs[0])
                           for n in d["containerEdits"].get("deviceNodes", []))), None)
        check(dev is not None, f"no device in the CDI spec has {nvidia_devs[0]}")
        edits = [spec.get("containerEdits", {}), dev["containerEdits"]]
        for e in edits:
            for n in e.get("deviceNodes", []):
                check(n["path"] in seen["dev"], f"{n['path']} from the CDI spec is not in the pod")
            for kv in e.get("env", []):
                k, _, v = kv.partition("=")
                check(seen["env"].get(k) == v,
                      f"env {k}={v} from the CDI spec is {seen['env'].get(k)!r} in the pod")
            for m in e.get("mounts", []):
                if m["containerPath"].startswith("/usr/local/lib/"):
                    check(m["containerPath"] in seen["lib"],
                          f"mount {m['containerPath']} from the CDI spec is not in the pod")
        # containerd ran the spec's createContainer hook (the stand-in recorded it).
        with open(os.path.join(NODE_DIR, "hook.log")) as f:
            check("create-symlinks" in f.read(), "the CDI spec's hook did not run")

    def scenario_metrics_name_the_pod(self):
        """gpulet's metrics attribute the GPU that gpu-a holds to it, from the real kubelet's
        PodResources API (dcgm-exporter's pod, namespace and container labels)."""
        ip = self.gpulet_pod()["status"]["podIP"]

        def attributed():
            r = run(["curl", "-sf", f"http://{ip}:9400/metrics"], check=False, timeout=10)
            return [line for line in r.stdout.splitlines()
                    if line.startswith("DCGM_FI_DEV_FB_USED{") and 'pod="gpu-a"' in line]
        try:
            lines = wait_for("DCGM_FI_DEV_FB_USED with pod=\"gpu-a\"", attributed, timeout=90)
        except ClusterError as e:
            raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")
        check(len(lines) == 1, f"gpu-a holds one GPU but {len(lines)} series name it: {lines}")
        check('namespace="default"' in lines[0] and 'container="main"' in lines[0],
              f"the series lacks the namespace or container: {lines[0]}")

    def scenario_config_reload(self):
        """The ConfigMap is edited as a user would (kubectl patch): gpulet reloads it through
        the kubelet's projection of the volume, with no restart; a bad edit is an Event, and
        the same mistake again counts in its series."""
        text = self.config_text()
        check("quietPeriod: 5m" in text, "the shipped config no longer says quietPeriod: 5m")
        pod = self.gpulet_pod()["metadata"]["name"]
        patch = self.patch_config
        patch(text.replace("quietPeriod: 5m", "quietPeriod: 5x"))

        def refused():
            return self.events("GpuletConfigRefused", NAMESPACE) + self.events(
                "GpuletConfigRefused")
        try:
            wait_for("an Event GpuletConfigRefused", refused, timeout=150)
            # The same mistake again (the file changed, the error did not): one Event, its
            # series counting the repeat (a PATCH of the Event, which rbac then sees used).
            patch(text.replace("quietPeriod: 5m", "quietPeriod: 5x") + "\n# still 5x\n")
            wait_for("the repeat folded into the Event's series", lambda: any(
                (e.get("series") or {}).get("count", 0) >= 2 for e in refused()), timeout=150)
        except ClusterError as e:
            raise Failure(f"{e}; Events {refused()}; gpulet log:\n{self.gpulet_log()}")
        patch(text.replace("quietPeriod: 5m", "quietPeriod: 20s"))
        try:
            wait_for("gpulet to log the reload", lambda: "health.quietPeriod" in self.c.kubectl(
                "logs", "-n", NAMESPACE, pod, check=False).stdout, timeout=150)
        except ClusterError as e:
            raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")
        check(self.gpulet_pod()["metadata"]["name"] == pod, "gpulet's pod was replaced")
        restarts = self.gpulet_pod()["status"]["containerStatuses"][0]["restartCount"]
        check(restarts == 0, f"gpulet restarted {restarts} times for a reload")

    def scenario_unhealthy_and_back(self):
        """A GPU falls off the bus: allocatable drops, condition and Event appear; it comes
        back: allocatable, condition clear."""
        self.sim("lose", "1")
        try:
            wait_for("allocatable 1 after GPU 1 is lost",
                     lambda: self.capacity()[1] == "1", timeout=60)
            wait_for("GpuUnhealthy True",
                     lambda: (self.condition("GpuUnhealthy") or {}).get("status") == "True",
                     timeout=60)
            wait_for("an Event GpuUnhealthy on the Node",
                     lambda: any(e["regarding"]["kind"] == "Node"
                                 for e in self.events("GpuUnhealthy")), timeout=60)
        except ClusterError as e:
            raise Failure(f"{e}; capacity {self.capacity()}; gpulet log:\n{self.gpulet_log()}")
        self.sim("recover", "1")
        try:
            wait_for("allocatable 2 after recovery", lambda: self.capacity()[1] == "2",
                     timeout=90)
            # The quiet period is 20 s since config_reload.
            wait_for("GpuUnhealthy False after the quiet period",
                     lambda: (self.condition("GpuUnhealthy") or {}).get("status") == "False",
                     timeout=120)
        except ClusterError as e:
            raise Failure(f"{e}; condition {self.condition('GpuUnhealthy')}")

    def scenario_long_node_name(self):
        """Event names for the longest valid node name, checked by the real API server: a
        second gpulet, on the host (the same binary, the homelab simulator, the admin
        kubeconfig), reports for a Node whose name is 253 characters. Its GpuUnhealthy Event
        is accepted, under a name the API allows, and its condition is patched onto that
        Node; gpulet logs no refused Event."""
        name = ".".join(["n" * 63, "o" * 63, "d" * 63, "e" * 61])
        check(len(name) == 253, f"the node name is {len(name)} characters, not 253")
        self.c.kubectl("apply", "-f", "-", input_text=json.dumps(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
        d = os.path.join(self.work, "long-node")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "kubelet", "device-plugins"))
        root = os.path.join(d, "root")
        shutil.copytree(os.path.join(SRC, "sim/fixtures/homelab/root"), root, symlinks=True)
        state = os.path.join(d, "sim-state.json")
        config = os.path.join(d, "config.yaml")
        with open(config, "w") as f:
            f.write(f"version: v1\nkubeletDir: {d}/kubelet\nmetrics: {{address: \"\"}}\n"
                    "labels: {featuresFile: \"\"}\n"
                    "health: {kmsg: false, quietPeriod: 5s, xidHistoryFile: \"\"}\n"
                    f"cluster: {{enabled: true, kubeconfig: {self.c.admin_kubeconfig}}}\n")
        log_path = os.path.join(d, "gpulet.log")
        env = dict(os.environ, NODE_NAME=name)
        with open(log_path, "w") as log:
            proc = subprocess.Popen([self.gpulet, "--simulate", "homelab", "--host-root", root,
                                     "--sim-state", state, "serve", "--config", config],
                                    stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            def conditions():
                n = self.c.get_json("node", name)
                return {c["type"]: c["status"] for c in n["status"].get("conditions", [])}
            wait_for("gpulet's conditions on the 253-character Node",
                     lambda: conditions().get("GpuUnhealthy") == "False", timeout=60)
            run([self.gpulet, "--simulate", "homelab", "--sim-state", state, "sim", "lose", "1"])

            def regarding():
                return [e for e in self.events("GpuUnhealthy")
                        if e["regarding"].get("name") == name]
            wait_for("a GpuUnhealthy Event regarding the 253-character Node", regarding,
                     timeout=60)
            event = regarding()[0]["metadata"]["name"]
            check(len(event) <= 253 and event.startswith(name[:200]),
                  f"the Event's name {event!r} ({len(event)} characters)")
            wait_for("GpuUnhealthy True on the 253-character Node",
                     lambda: conditions().get("GpuUnhealthy") == "True", timeout=60)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            self.c.kubectl("delete", "node", name, check=False)
        with open(log_path) as f:
            text = f.read()
        check("refused event" not in text, f"gpulet's log names a refused Event:\n{text[-2000:]}")

    def scenario_kubelet_restart(self):
        """The kubelet restarts with a GPU pod running: the pod keeps its GPU, gpulet
        registers again, and a second pod gets the other GPU, not the same one."""
        before = self.seen_inside("gpu-a")
        check(before is not None, "gpu-a is not running before the restart")
        self.c.restart_kubelet()
        wait_for("the Node Ready again", self.c.node_ready, timeout=120)
        wait_for("capacity 2 again", lambda: self.capacity()[0] == "2", timeout=120)
        pod = self.c.get_json("pod", "gpu-a")
        check(pod["status"]["containerStatuses"][0]["restartCount"] == 0,
              "gpu-a restarted with the kubelet")
        self.gpu_pod("gpu-b")
        seen_b = self.running("gpu-b")
        a = [d for d in before["dev"] if d[len("/dev/nvidia"):].isdigit()]
        b = [d for d in seen_b["dev"] if d[len("/dev/nvidia"):].isdigit()]
        check(len(b) == 1 and b != a, f"gpu-b got {b}, gpu-a has {a}: allocated twice")

    def scenario_gpulet_restart(self):
        """gpulet's pod is deleted with both GPUs in use: the DaemonSet brings it back,
        nothing is lost, and a third pod asking for a GPU waits (none is free)."""
        old = self.gpulet_pod()
        check(old is not None, "no gpulet pod")
        self.c.kubectl("delete", "pod", "-n", NAMESPACE, old["metadata"]["name"], "--wait=true")
        wait_for("a new gpulet pod running", lambda: (self.gpulet_pod() or {}).get(
            "status", {}).get("phase") == "Running", timeout=120)
        wait_for("capacity 2 after gpulet restarted", lambda: self.capacity()[0] == "2",
                 timeout=120)
        for name in ("gpu-a", "gpu-b"):
            check(self.pod_phase(name) == "Running", f"{name} is not running after the restart")
        self.gpu_pod("gpu-c")
        time.sleep(10)
        pod = self.c.get_json("pod", "gpu-c")
        check(pod["status"].get("phase") == "Pending",
              f"gpu-c is {pod['status'].get('phase')} though both GPUs are taken")
        self.c.kubectl("delete", "pod", "gpu-c", "--wait=false")

    def config_text(self):
        """The ConfigMap's config.yaml as the API server has it now."""
        cm = self.c.get_json("configmap", "-n", NAMESPACE, "gpulet-config")
        return cm["data"]["config.yaml"]

    def patch_config(self, text):
        """Replaces the ConfigMap's config.yaml with `text`, as a user's kubectl patch does."""
        self.c.kubectl("patch", "configmap", "-n", NAMESPACE, "gpulet-config", "--type=merge",
                       "-p", json.dumps({"data": {"config.yaml": text}}))

    def set_config(self, old, new):
        """Edits the ConfigMap's config.yaml as a user would, replacing `old` with `new`."""
        text = self.config_text()
        check(old in text, f"the ConfigMap no longer says {old!r}")
        self.patch_config(text.replace(old, new))

    def taint(self):
        for t in self.node()["spec"].get("taints", []):
            if t["key"] == "gpulet.dev/gpu-unhealthy":
                return t
        return None

    def scenario_taint_evicts(self):
        """With the taint on and effect NoExecute (a ConfigMap edit), both GPUs going out
        taint the Node and evict the GPU pods; gpulet itself stays, and when the GPUs
        recover it removes the taint."""
        self.set_config("taint: {enabled: false, effect: NoSchedule, share: 1}",
                        "taint: {enabled: true, effect: NoExecute, share: 1}")
        pod = self.gpulet_pod()["metadata"]["name"]
        wait_for("gpulet to reload the taint setting", lambda: "cluster.taint" in self.c.kubectl(
            "logs", "-n", NAMESPACE, pod, check=False).stdout, timeout=120)
        check(self.taint() is None, f"tainted with every GPU healthy: {self.taint()}")
        self.sim("lose", "0")
        self.sim("lose", "1")
        try:
            wait_for("the NoExecute taint", lambda: (self.taint() or {}).get("effect") ==
                     "NoExecute", timeout=90)
            wait_for("gpu-a and gpu-b evicted",
                     lambda: self.pod_phase("gpu-a") is None and self.pod_phase("gpu-b") is None,
                     timeout=120)
        except ClusterError as e:
            raise Failure(f"{e}; taints {self.node()['spec'].get('taints')}; gpulet log:\n"
                          f"{self.gpulet_log()}")
        check(self.gpulet_pod() is not None and self.gpulet_pod()["metadata"]["name"] == pod,
              "gpulet was evicted by its own taint")
        self.sim("recover", "0")
        self.sim("recover", "1")
        try:
            wait_for("the taint removed after recovery", lambda: self.taint() is None,
                     timeout=120)
            wait_for("allocatable 2 again", lambda: self.capacity()[1] == "2", timeout=60)
        except ClusterError as e:
            raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")

    def scenario_gpu_reset(self):
        """The reset rung with the real kubelet: health.reset on (a ConfigMap edit), an XID a
        reset clears (48) on the idle 5090: gpulet resets it (the simulator's card, as the
        kernel's reset would), takes the inventory again by restarting its components in the
        same process (the plugin registers with the kubelet anew), and the GPU returns after
        the quiet period; the pod is not restarted."""
        self.set_config("reset: {mode: dry-run, maxPerDay: 3}", "reset: {mode: on, maxPerDay: 3}")
        pod = self.gpulet_pod()["metadata"]["name"]
        wait_for("gpulet to reload health.reset.mode", lambda: "health.reset.mode" in self.c.kubectl(
            "logs", "-n", NAMESPACE, pod, check=False).stdout, timeout=120)
        self.sim("idle", "1")
        self.sim("xid", "1", "48")
        try:
            wait_for("allocatable 1 after XID 48", lambda: self.capacity()[1] == "1", timeout=60)
            wait_for("an Event GpuReset on the Node",
                     lambda: any(e["regarding"]["kind"] == "Node"
                                 for e in self.events("GpuReset")), timeout=90)
            wait_for("the inventory taken again", lambda: "inventory taken again (after a GPU "
                     "reset)" in self.gpulet_log(tail=-1), timeout=60)
            # The quiet period is 20 s since config_reload: the probation, then back.
            wait_for("allocatable 2 after the probation", lambda: self.capacity()[1] == "2",
                     timeout=120)
        except ClusterError as e:
            raise Failure(f"{e}; capacity {self.capacity()}; gpulet log:\n{self.gpulet_log()}")
        p = self.gpulet_pod()
        check(p is not None and p["metadata"]["name"] == pod and
              p["status"]["containerStatuses"][0]["restartCount"] == 0,
              "gpulet's pod restarted: the inventory must be taken again in the same process")
        self.set_config("reset: {mode: on, maxPerDay: 3}", "reset: {mode: dry-run, maxPerDay: 3}")

    def gpu_of(self, name):
        """The GPU index the pod's container sees (its one /dev/nvidiaN)."""
        seen = self.seen_inside(name) or {"dev": []}
        n = [d[len("/dev/nvidia"):] for d in seen["dev"] if d[len("/dev/nvidia"):].isdigit()]
        check(len(n) == 1, f"{name} sees GPUs {n}, not one")
        return n[0]

    def scenario_eviction(self):
        """The eviction rung against the real API server: with deploy/evict's RBAC and
        health.evict on (a ConfigMap edit, grace 10 s), the pod on a GPU that falls off the
        bus is evicted through the Eviction API, its PodDisruptionBudget holding it until
        deleted; the pod on the other GPU stays."""
        self.c.kubectl("apply", "-f", os.path.join(SRC, "deploy/evict/clusterrole.yaml"))
        self.set_config("evict: {mode: dry-run, grace: 2m, maxPerHour: 10}",
                        "evict: {mode: on, grace: 10s, maxPerHour: 10}")
        pod = self.gpulet_pod()["metadata"]["name"]
        wait_for("gpulet to reload health.evict.mode", lambda: "health.evict.mode" in self.c.kubectl(
            "logs", "-n", NAMESPACE, pod, check=False).stdout, timeout=120)
        self.gpu_pod("evict-a")
        self.gpu_pod("evict-b")
        self.running("evict-a")
        self.running("evict-b")
        on1, on0 = ("evict-a", "evict-b") if self.gpu_of("evict-a") == "1" else ("evict-b",
                                                                                 "evict-a")
        self.c.kubectl("label", "pod", on1, "e2e-pdb=held")
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "e2e-held", "namespace": "default"},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"e2e-pdb": "held"}}}}
        self.c.kubectl("apply", "-f", "-", input_text=json.dumps(pdb))
        wait_for("the budget to allow no disruption", lambda: self.c.get_json(
            "pdb", "e2e-held").get("status", {}).get("disruptionsAllowed") == 0 and
            self.c.get_json("pdb", "e2e-held").get("status", {}).get("currentHealthy") == 1,
            timeout=60)
        self.sim("lose", "1")

        def regarding(reason, name):
            return any(e.get("regarding", {}).get("name") == name for e in self.events(reason))
        try:
            wait_for(f"GpuEvictionBlocked on {on1}", lambda: regarding("GpuEvictionBlocked", on1),
                     timeout=90)
            check(self.pod_phase(on1) == "Running", f"{on1} went despite its budget")
            self.c.kubectl("delete", "pdb", "e2e-held")
            wait_for(f"{on1} evicted", lambda: self.pod_phase(on1) is None, timeout=60)
            wait_for(f"GpuPodEvicted on {on1}", lambda: regarding("GpuPodEvicted", on1),
                     timeout=30)
        except ClusterError as e:
            raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")
        check(self.pod_phase(on0) == "Running", f"{on0}, on the healthy GPU, did not stay")
        self.sim("recover", "1")
        self.set_config("evict: {mode: on, grace: 10s, maxPerHour: 10}",
                        "evict: {mode: dry-run, grace: 2m, maxPerHour: 10}")
        self.c.kubectl("delete", "pod", on0, "--wait=true")
        wait_for("allocatable 2 after recovery", lambda: self.capacity()[1] == "2", timeout=120)

    def talos_standin(self, node_ip):
        """Starts tests/talos/apid_standin.go on the host-only bridge (which pods reach), with
        `node_ip` the node apid may forward to; returns (process, its directory, address)."""
        tool = os.path.join(e2e_cache(), "bin", "talos-apid-standin")
        check(os.access(tool, os.X_OK), f"no {tool}: scripts/e2e/build.sh --tools builds it")
        d = os.path.join(self.work, "talos")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        log = open(os.path.join(d, "standin.log"), "w")
        proc = subprocess.Popen([tool, "--dir", d, "--listen", f"{clusterlib.BRIDGE_IP}:0",
                                 "--node", node_ip], stdin=subprocess.PIPE, stdout=log,
                                stderr=subprocess.STDOUT)
        wait_for("the Talos apid stand-in to listen",
                 lambda: os.path.exists(os.path.join(d, "addr")), timeout=30)
        with open(os.path.join(d, "addr")) as f:
            return proc, d, f.read().strip()

    def reboot_leases(self):
        return self.c.get_json("leases.coordination.k8s.io", "-n", NAMESPACE, "-l",
                               "gpulet.dev/reboot")["items"]

    def scenario_talos_reboot(self):
        """The reboot rung through Talos' machine API against the real API server and
        kubelet: deploy/reboot-talos applied as it is (Talos' side played by a CRD stand-in,
        the Secret its controller writes, and the apid stand-in on the bridge), health.reboot
        via talos (a ConfigMap edit: grace 0s, the stand-in's address). A GPU that falls off
        the bus has gpulet take the node's turn (a Lease), cordon the node, evict its pod
        (a real PodDisruptionBudget holding it until deleted), then ask Talos to reboot
        this node, by its address. The reboot is stood in for by giving the host state the id
        of an earlier boot and restarting gpulet: it uncordons the node, gives the Lease back
        and reports GpuNodeRebooted."""
        node_ip = next(a["address"] for a in self.node()["status"]["addresses"]
                       if a["type"] == "InternalIP")
        proc, d, addr = self.talos_standin(node_ip)
        record = "/var/lib/gpulet/reboots.json"
        try:
            self.c.kubectl("apply", "-f", os.path.join(HERE, "talos-serviceaccount-crd.yaml"))
            wait_for("the talos.dev CRD to be served", lambda: self.c.kubectl(
                "get", "serviceaccounts.talos.dev", "-n", NAMESPACE, check=False).returncode == 0,
                timeout=60)
            # What Talos' controller answers the ServiceAccount with.
            self.c.kubectl("create", "secret", "generic", "gpulet-talos", "-n", NAMESPACE,
                           f"--from-file=config={os.path.join(d, 'config')}")
            old = self.gpulet_pod()["metadata"]["name"]
            self.apply_overlay("overlay-talos")
            wait_for("the gpulet pod with deploy/reboot-talos", lambda: (
                self.gpulet_pod() or {"metadata": {"name": old}})["metadata"]["name"] != old and
                self.gpulet_pod()["status"].get("phase") == "Running", timeout=120)
            check(self.c.get_json("serviceaccounts.talos.dev", "gpulet-talos", "-n", NAMESPACE)
                  ["spec"]["roles"] == ["os:operator"], "the talos.dev ServiceAccount's roles")
            pod = self.gpulet_pod()["metadata"]["name"]
            self.set_config('via: auto, talosconfig: /var/run/secrets/talos.dev/config, '
                            'talosEndpoint: ""',
                            'via: talos, talosconfig: /var/run/secrets/talos.dev/config, '
                            f'talosEndpoint: "{addr}"')
            self.set_config("reboot: {mode: dry-run, grace: 10m,", "reboot: {mode: dry-run, grace: 0s,")
            wait_for("gpulet to reload health.reboot.via", lambda: "health.reboot.via" in
                     self.c.kubectl("logs", "-n", NAMESPACE, pod, check=False).stdout,
                     timeout=120)
            self.gpu_pod("drain-me")
            self.running("drain-me")
            self.c.kubectl("label", "pod", "drain-me", "e2e-pdb=drain")
            pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "e2e-drain", "namespace": "default"},
                   "spec": {"minAvailable": 1,
                            "selector": {"matchLabels": {"e2e-pdb": "drain"}}}}
            self.c.kubectl("apply", "-f", "-", input_text=json.dumps(pdb))
            wait_for("the budget to allow no disruption", lambda: self.c.get_json(
                "pdb", "e2e-drain").get("status", {}).get("disruptionsAllowed") == 0 and
                self.c.get_json("pdb", "e2e-drain").get("status", {}).get("currentHealthy") == 1,
                timeout=60)
            self.sim("lose", "1")
            try:
                wait_for("gpulet's Lease for the fault", lambda: any(
                    l["spec"].get("holderIdentity") == NODE for l in self.reboot_leases()),
                    timeout=90)
                wait_for("the node cordoned by gpulet", lambda: self.node()["spec"].get(
                    "unschedulable") and "gpulet.dev/reboot-cordon" in
                    self.node()["metadata"].get("annotations", {}), timeout=60)
                time.sleep(5)  # the budget holds: drain-me stays, nothing is rebooted yet
                check(self.pod_phase("drain-me") == "Running", "drain-me went despite its budget")
                check(not os.path.exists(os.path.join(d, "reboots.jsonl")),
                      "Talos was asked before the drain finished")
                self.c.kubectl("delete", "pdb", "e2e-drain")
                wait_for("drain-me evicted", lambda: self.pod_phase("drain-me") is None,
                         timeout=90)
                wait_for("Talos asked to reboot the node", lambda: os.path.exists(
                    os.path.join(d, "reboots.jsonl")), timeout=90)
                wait_for("an Event GpuRebootAsked on the Node",
                         lambda: any(e["regarding"]["kind"] == "Node"
                                     for e in self.events("GpuRebootAsked")), timeout=60)
            except ClusterError as e:
                raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")
            with open(os.path.join(d, "reboots.jsonl")) as f:
                asked = [json.loads(line) for line in f]
            check(len(asked) == 1 and asked[0]["node"] == node_ip and
                  asked[0]["roles"] == ["os:operator"] and asked[0]["mode"] == "DEFAULT",
                  f"Talos was asked {asked}, not once for {node_ip} as os:operator")
            # The reboot, stood in for: the card is back, and what gpulet left on the host and
            # the Node carries an earlier boot's id.
            self.sim("recover", "1")
            with open(record) as f:
                rec = json.load(f)
            for r in rec["reboots"]:
                r["boot_id"] = "e2e-earlier-boot"
            with open(record, "w") as f:
                json.dump(rec, f)
            self.c.kubectl("annotate", "node", NODE, "--overwrite",
                           "gpulet.dev/reboot-cordon=e2e-earlier-boot")
            self.c.kubectl("delete", "pod", "-n", NAMESPACE, self.gpulet_pod()["metadata"]["name"])
            try:
                wait_for("the node uncordoned after the reboot", lambda: not self.node()[
                    "spec"].get("unschedulable") and "gpulet.dev/reboot-cordon" not in
                    self.node()["metadata"].get("annotations", {}), timeout=120)
                wait_for("the Lease given back", lambda: not self.reboot_leases(), timeout=30)
                wait_for("an Event GpuNodeRebooted on the Node",
                         lambda: any(e["regarding"]["kind"] == "Node"
                                     for e in self.events("GpuNodeRebooted")), timeout=60)
            except ClusterError as e:
                raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            # Back to overlay/'s install (its ConfigMap too), without the reboot record.
            self.c.kubectl("uncordon", NODE, check=False)
            self.apply_overlay("overlay")
            # deploy/reboot-talos's RBAC stays, for the rbac scenario to read.
            self.c.kubectl("delete", "secret", "-n", NAMESPACE, "gpulet-talos",
                           "--ignore-not-found", check=False)
            self.c.kubectl("delete", "-f", os.path.join(HERE, "talos-serviceaccount-crd.yaml"),
                           "--ignore-not-found", check=False)
            if os.path.exists(record):
                os.remove(record)
            wait_for("allocatable 2 after the Talos scenario", lambda: self.capacity()[1] == "2",
                     timeout=120)

    def scenario_sharing_and_labels(self):
        """ConfigMap edits a user makes on day two: time-slicing (each GPU advertised four
        times) and GPU labels on the Node; a label someone removes comes back."""
        self.set_config("\nhealth:\n", "\nsharing:\n  timeSlicing:\n    replicas: 4\n\nhealth:\n")
        try:
            wait_for("nvidia.com/gpu 8 with four replicas a GPU",
                     lambda: self.capacity() == ("8", "8"), timeout=120)
        except ClusterError as e:
            raise Failure(f"{e}; capacity {self.capacity()}; gpulet log:\n{self.gpulet_log()}")
        self.set_config("\ncluster:\n", "\ncluster:\n  nodeLabels: true\n")
        product = "nvidia.com/gpu.product"
        labels = lambda: self.node()["metadata"].get("labels", {})  # noqa: E731
        try:
            wait_for(f"the label {product} on the Node", lambda: labels().get(product),
                     timeout=120)
        except ClusterError as e:
            raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")
        value = labels()[product]
        self.c.kubectl("label", "node", NODE, product + "-")
        try:
            wait_for(f"gpulet to restore {product}", lambda: labels().get(product) == value,
                     timeout=30)
        except ClusterError as e:
            raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")
        check(labels().get("nvidia.com/gpu.present") == "true",
              "the label the user set is gone")
        self.set_config("\nsharing:\n  timeSlicing:\n    replicas: 4\n\n", "\n")
        wait_for("nvidia.com/gpu 2 again", lambda: self.capacity() == ("2", "2"), timeout=120)

    def scenario_memory_slices(self):
        """Memory slices on (a ConfigMap edit): the Node offers nvidia.com/gpu-memory; a pod
        asking for 4 slices runs with its 4 GiB limit, its slice file and gpulet's VRAM
        library, as the device plugin's answer put them."""
        self.set_config("\nhealth:\n", "\nsharing:\n  memorySlices:\n    enabled: true\n"
                        "\nhealth:\n")
        try:
            wait_for("nvidia.com/gpu-memory on the Node",
                     lambda: int(self.capacity("nvidia.com/gpu-memory")[1] or 0) >= 4,
                     timeout=120)
        except ClusterError as e:
            raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")
        self.gpu_pod("mem-a", gpus=4, resource="nvidia.com/gpu-memory")
        seen = self.running("mem-a")
        check(seen["env"].get("GPULET_MEMORY_LIMIT_MIB") == "4096",
              f"GPULET_MEMORY_LIMIT_MIB is {seen['env'].get('GPULET_MEMORY_LIMIT_MIB')!r}")
        check(seen["env"].get("GPULET_VRAM_SLICE") == "/run/gpulet/vram/slice",
              f"GPULET_VRAM_SLICE is {seen['env'].get('GPULET_VRAM_SLICE')!r}")
        for f in ("/run/gpulet/lib/libgpulet-vram.so", "/run/gpulet/vram/slice"):
            check(f in seen["file"], f"{f} is not in the container (it has {seen['file']})")
        check(len(self.gpu_nodes(seen)) == 1, f"mem-a sees GPU nodes {self.gpu_nodes(seen)}")
        self.c.kubectl("delete", "pod", "mem-a", "--wait=true")
        self.vram_quota_holds()
        self.set_config("\nsharing:\n  memorySlices:\n    enabled: true\n\n", "\n")
        wait_for("nvidia.com/gpu 2 again", lambda: self.capacity() == ("2", "2"), timeout=120)

    def vram_quota_holds(self):
        """An unchanged application image asking for 4 slices, through the kubelet and
        containerd: it allocates through cuGetProcAddress as the CUDA runtime does, against
        the driver stand-in's 16 GiB card, and sees 4 GiB as the card's total, gets 4 GiB and
        is refused the next chunk with CUDA_ERROR_OUT_OF_MEMORY (2)."""
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "vram-app", "namespace": "default"},
               "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                        "containers": [{
                            "name": "main", "image": VRAM_APP, "imagePullPolicy": "Never",
                            "args": ["fill", "proc", "512"],
                            "env": [{"name": "GPULET_CUDA_STANDIN_STATE", "value": "/tmp/card"},
                                    {"name": "GPULET_CUDA_STANDIN_TOTAL_MIB",
                                     "value": "16384"}],
                            "resources": {"limits": {"nvidia.com/gpu-memory": "4"}}}]}}
        self.c.kubectl("apply", "-f", "-", input_text=json.dumps(pod))
        try:
            wait_for("the VRAM application to finish",
                     lambda: self.pod_phase("vram-app") in ("Succeeded", "Failed"), timeout=120)
        except ClusterError as e:
            desc = self.c.kubectl("describe", "pod", "vram-app", check=False).stdout[-1500:]
            raise Failure(f"{e}\n{desc}") from e
        out = self.c.kubectl("logs", "vram-app", check=False).stdout
        check(self.pod_phase("vram-app") == "Succeeded", f"the VRAM application failed: {out}")
        for want in ("total_mib=4096", "device_total_mib=4096", "allocated_mib=4096",
                     "last_rc=2", "free_errors=0"):
            check(want in out.split(), f"expected {want} from inside the container: {out}")
        check("refused with CUDA_ERROR_OUT_OF_MEMORY" in out and "/run/gpulet/vram/slice" in out,
              f"no refusal line naming the slice file in: {out}")
        self.c.kubectl("delete", "pod", "vram-app", "--wait=true")

    def gpu_nodes(self, seen):
        return [d for d in seen["dev"] if d[len("/dev/nvidia"):].isdigit()]

    def cap_nodes(self, seen):
        return sorted(d for d in seen["dev"] if d.startswith("/dev/nvidia-caps/"))

    def set_mig_strategy(self, strategy):
        """One ConfigMap edit: plugin.migStrategy set to `strategy`, the GPU labels on."""
        text = self.config_text()
        check(re.search(r"\n  migStrategy: \w+\n", text),
              "the ConfigMap no longer says plugin.migStrategy")
        new = re.sub(r"\n  migStrategy: \w+\n", f"\n  migStrategy: {strategy}\n", text)
        if "nodeLabels: true" not in new:
            check("\ncluster:\n" in new, "the ConfigMap no longer has a cluster section")
            new = new.replace("\ncluster:\n", "\ncluster:\n  nodeLabels: true\n")
        if new != text:
            self.patch_config(new)

    def allocatable(self):
        return self.node()["status"].get("allocatable", {})

    def wait_allocatable(self, what, want, timeout=150):
        """Waits until the Node's allocatable has `want` ({resource: count}, None for a
        resource the kubelet no longer offers: absent or 0)."""
        def matches():
            have = self.allocatable()
            return all(have.get(r, "0") == (v or "0") for r, v in want.items())
        try:
            wait_for(what, matches, timeout=timeout)
        except ClusterError as e:
            have = {k: v for k, v in self.allocatable().items() if "/" in k}
            raise Failure(f"{e}; allocatable {have}; gpulet log:\n{self.gpulet_log()}") from e

    def mig_pod_sees_its_device(self, name, resource):
        """A pod asking for one `resource` runs and sees the parent GPU's node and exactly
        the two capability nodes of one MIG device, with everything the CDI spec gives that
        device (containerd applied it)."""
        self.gpu_pod(name, resource=resource)
        seen = self.running(name, timeout=120)
        check(self.gpu_nodes(seen) == ["/dev/nvidia0"],
              f"{name} sees GPU nodes {self.gpu_nodes(seen)}, not the H200's /dev/nvidia0")
        caps = self.cap_nodes(seen)
        check(len(caps) == 2, f"{name} sees capability nodes {caps}, not one MIG device's two")
        spec = self.cdi_spec()
        dev = next((d for d in spec["devices"] if d["name"].startswith("MIG-") and sorted(
            n["path"] for n in d["containerEdits"].get("deviceNodes", [])
            if n["path"].startswith("/dev/nvidia-caps/")) == caps), None)
        check(dev is not None, f"no MIG device in gpulet's CDI spec has {caps}")
        for n in dev["containerEdits"].get("deviceNodes", []):
            check(n["path"] in seen["dev"], f"{n['path']} of {dev['name']} is not in {name}")
        for kv in dev["containerEdits"].get("env", []):
            k, _, v = kv.partition("=")
            check(seen["env"].get(k) == v, f"env {k}={v} of {dev['name']} is "
                  f"{seen['env'].get(k)!r} in {name}")
        return dev["name"]

    def scenario_mig(self):
        """A MIG node (the h200-mig fixture: an H200 split into a 3g.71gb, a 2g.35gb and two
        1g.18gb, with the driver's mig-minors and capability nodes): under migStrategy none
        the Node offers one nvidia.com/gpu; single with mixed profiles is refused (an Event,
        the running strategy kept); mixed offers nvidia.com/mig-<profile> with GFD's labels,
        and a pod asking for a 1g.18gb sees the GPU's node and that MIG device's capability
        nodes; a 1g.18gb whose capability nodes go missing is not offered (allocatable drops,
        capacity stays, the CDI spec leaves it out) until they are back; a new layout (seven 1g.18gb, `gpulet sim mig`) reaches the kubelet with no
        restart; single then offers seven nvidia.com/gpu, and a pod gets one MIG device."""
        for name in ("gpu-a", "gpu-b", "gpu-c"):
            self.c.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")
        mig = lambda *a: self.sim("mig", "0", *a, fixture="h200-mig", state=MIG_SIM_STATE)  # noqa: E731
        labels = lambda: self.node()["metadata"].get("labels", {})  # noqa: E731
        gone = {"nvidia.com/mig-1g.18gb": None, "nvidia.com/mig-2g.35gb": None,
                "nvidia.com/mig-3g.71gb": None}
        self.mig_driver_files(True)
        try:
            # The ConfigMap as shipped (apply puts back what an earlier edit changed), then
            # the GPU labels on.
            self.apply_overlay("overlay-mig")
            self.wait_allocatable("one whole H200 under migStrategy none",
                                  {"nvidia.com/gpu": "1", **gone})
            self.set_mig_strategy("none")
            try:
                wait_for("nvidia.com/mig.capable=true on the Node",
                         lambda: labels().get("nvidia.com/mig.capable") == "true", timeout=150)
            except ClusterError as e:
                raise Failure(f"{e}; labels {labels()}; gpulet log:\n{self.gpulet_log()}") from e

            self.set_mig_strategy("single")

            def refused():
                return [e for e in self.events("GpuletConfigRefused", NAMESPACE) +
                        self.events("GpuletConfigRefused")
                        if "more than one MIG device type" in e.get("note", "")]
            try:
                wait_for("an Event GpuletConfigRefused for single with four profiles", refused,
                         timeout=150)
            except ClusterError as e:
                raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}") from e
            check(self.allocatable().get("nvidia.com/gpu") == "1",
                  f"the refused strategy changed nvidia.com/gpu: {self.allocatable()}")

            self.set_mig_strategy("mixed")
            self.wait_allocatable("a resource for each MIG profile under mixed", {
                "nvidia.com/mig-1g.18gb": "2", "nvidia.com/mig-2g.35gb": "1",
                "nvidia.com/mig-3g.71gb": "1", "nvidia.com/gpu": None})
            try:
                wait_for("GFD's MIG labels under mixed",
                         lambda: labels().get("nvidia.com/mig-1g.18gb.count") == "2",
                         timeout=60)
            except ClusterError as e:
                raise Failure(f"{e}; labels {labels()}") from e
            for key, want in (("nvidia.com/mig.strategy", "mixed"),
                              ("nvidia.com/mig-1g.18gb.product", "NVIDIA-H200-MIG-1g.18gb"),
                              ("nvidia.com/mig-3g.71gb.count", "1")):
                check(labels().get(key) == want, f"label {key} is {labels().get(key)!r}")
            got = self.mig_pod_sees_its_device("mig-a", "nvidia.com/mig-1g.18gb")
            check(got in ("MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0203",
                          "MIG-c1a7e0f2-9b34-5d58-8e61-2f0b7a3d0204"),
                  f"mig-a got {got}, not one of the two 1g.18gb devices")
            self.c.kubectl("delete", "pod", "mig-a", "--wait=true")

            # One 1g.18gb device (GPU instance 4) loses its capability nodes: the CDI spec
            # leaves it out, so the plugin must stop offering it (its CDI name would not
            # resolve), and offer it again once the nodes are back.
            caps_dev = os.path.join(NODE_DIR, "devroot", "dev", "nvidia-caps")
            gi4 = ["nvidia-cap39", "nvidia-cap40"]  # gpu0/gi4/access, gpu0/gi4/ci0/access
            st = os.stat(os.path.join(caps_dev, gi4[0]))
            for node in gi4:
                os.unlink(os.path.join(caps_dev, node))
            self.wait_allocatable("one 1g.18gb offered while the other's capability nodes are "
                                  "missing", {"nvidia.com/mig-1g.18gb": "1"}, timeout=60)
            capacity = self.node()["status"]["capacity"].get("nvidia.com/mig-1g.18gb")
            check(capacity == "2", f"capacity of nvidia.com/mig-1g.18gb is {capacity}, not 2 "
                  "(the device is Unhealthy, not gone)")
            check("2f0b7a3d0204" not in json.dumps(self.cdi_spec()),
                  "GPU instance 4's MIG device is still in the CDI spec without its nodes")
            for node in gi4:
                os.mknod(os.path.join(caps_dev, node), 0o666 | 0o020000, st.st_rdev)
            self.wait_allocatable("both 1g.18gb offered once the nodes are back",
                                  {"nvidia.com/mig-1g.18gb": "2"}, timeout=60)

            # An operator re-partitions the card (nvidia-smi mig, mig-parted) under gpulet.
            mig("layout", ",".join(["1g.18gb"] * 7))
            self.wait_allocatable("seven 1g.18gb after the new layout, gpulet not restarted", {
                "nvidia.com/mig-1g.18gb": "7", "nvidia.com/mig-2g.35gb": None,
                "nvidia.com/mig-3g.71gb": None, "nvidia.com/gpu": None})
            restarts = self.gpulet_pod()["status"]["containerStatuses"][0]["restartCount"]
            check(restarts == 0, f"gpulet restarted {restarts} times for a layout change")

            self.set_mig_strategy("single")
            self.wait_allocatable("seven nvidia.com/gpu under single", {
                "nvidia.com/gpu": "7", "nvidia.com/mig-1g.18gb": None})
            try:
                wait_for("nvidia.com/mig.strategy single",
                         lambda: labels().get("nvidia.com/mig.strategy") == "single", timeout=60)
            except ClusterError as e:
                raise Failure(f"{e}; labels {labels()}") from e
            for key, want in (("nvidia.com/gpu.product", "NVIDIA-H200-MIG-1g.18gb"),
                              ("nvidia.com/gpu.count", "7")):
                check(labels().get(key) == want, f"label {key} is {labels().get(key)!r}")
            self.mig_pod_sees_its_device("mig-b", "nvidia.com/gpu")
        finally:
            for name in ("mig-a", "mig-b"):
                self.c.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true",
                               check=False)
            # The homelab install and its ConfigMap as shipped (migStrategy none, no labels).
            self.apply_overlay("overlay")
            self.wait_allocatable("the homelab's two GPUs again", {"nvidia.com/gpu": "2"})
            self.mig_driver_files(False)

    def scenario_dra(self):
        """gpulet as a DRA driver (deploy/overlays/dra): ResourceSlices published, a
        ResourceClaim allocated by the real scheduler and prepared, the container sees its
        device; the kubelet restarts in between; unprepared when the pod goes."""
        for name in ("gpu-a", "gpu-b", "gpu-c"):
            self.c.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")
        self.apply_overlay("overlay-dra")

        def slices():
            items = self.c.get_json("resourceslices")["items"]
            return [s for s in items if s["spec"].get("driver") == "gpu.gpulet.dev" and
                    s["spec"].get("nodeName") == NODE]
        try:
            wait_for("ResourceSlices of gpu.gpulet.dev with both GPUs",
                     lambda: sum(len(s["spec"].get("devices", [])) for s in slices()) == 2,
                     timeout=180)
            wait_for("the device plugin to give the GPUs up to DRA",
                     lambda: self.capacity()[1] in ("0", None), timeout=120)
        except ClusterError as e:
            raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")
        # A GPU out: its device taint is in the slice where the API server serves device
        # taints (DRADeviceTaints: GA in 1.37, alpha and off in 1.34), and where it does not,
        # gpulet says the server dropped it.
        self.sim("lose", "1")

        def tainted_devices():
            return [d for s in slices() for d in s["spec"]["devices"] if d.get("taints")]
        if self.version >= "v1.36":
            try:
                wait_for("the device taint in the ResourceSlice", tainted_devices, timeout=120)
            except ClusterError as e:
                raise Failure(f"{e}; slices {json.dumps(slices())}; gpulet log:\n"
                              f"{self.gpulet_log()}")
        else:
            wait_for("gpulet to say the API server dropped the device taint",
                     lambda: "dropped spec.devices[].taints (feature gate DRADeviceTaints)" in
                     self.gpulet_log(tail=-1), timeout=60)
            check(not tainted_devices(), "a 1.34 API server kept a device taint")
        self.sim("recover", "1")
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "gpu-claim", "namespace": "default"},
                 "spec": {"devices": {"requests": [
                     {"name": "gpu", "exactly": {"deviceClassName": "gpu.gpulet.dev"}}]}}}
        self.c.kubectl("apply", "-f", "-", input_text=json.dumps(claim))
        self.gpu_pod("dra-a", claim="gpu-claim")
        seen = self.running("dra-a", timeout=120)
        check(len(self.gpu_nodes(seen)) == 1, f"dra-a sees GPU nodes {self.gpu_nodes(seen)}")
        got = self.c.get_json("resourceclaim", "gpu-claim")
        results = got["status"]["allocation"]["devices"]["results"]
        check(len(results) == 1 and results[0]["driver"] == "gpu.gpulet.dev",
              f"the claim's allocation: {results}")
        check(any(r.get("name") == "dra-a" for r in got["status"].get("reservedFor", [])),
              "the claim is not reserved for dra-a")
        uid = got["metadata"]["uid"]
        claim_specs = lambda: [f for f in os.listdir("/var/run/cdi") if uid in f]  # noqa: E731
        check(claim_specs(), f"no CDI spec for claim {uid} in /var/run/cdi")

        self.c.restart_kubelet()
        wait_for("the Node Ready again", self.c.node_ready, timeout=120)
        pod = self.c.get_json("pod", "dra-a")
        check(pod["status"]["containerStatuses"][0]["restartCount"] == 0,
              "dra-a restarted with the kubelet")

        # An upgrade of gpulet with the claim prepared: the DaemonSet surges (the new pod
        # serves beside the old one), and the new pod unprepares what the old one prepared.
        old = self.gpulet_pod()["metadata"]["name"]
        self.c.kubectl("rollout", "restart", "-n", NAMESPACE, "daemonset/gpulet")
        self.c.kubectl("rollout", "status", "-n", NAMESPACE, "daemonset/gpulet",
                       "--timeout=180s", timeout=200)
        wait_for("one gpulet pod, the new one",
                 lambda: (self.gpulet_pod() or {}).get("metadata", {}).get("name") not in
                 (None, old), timeout=60)
        check(self.pod_phase("dra-a") == "Running", "dra-a stopped during gpulet's upgrade")

        self.c.kubectl("delete", "pod", "dra-a", "--wait=true")
        try:
            wait_for("gpulet to unprepare the claim (its CDI spec gone)",
                     lambda: not claim_specs(), timeout=90)
        except ClusterError as e:
            raise Failure(f"{e}; gpulet log:\n{self.gpulet_log()}")
        self.c.kubectl("delete", "resourceclaim", "gpu-claim", "--wait=true")

    # Grants no scenario exercises, each with where it is used and tested instead.
    RBAC_NOT_EXERCISED = {
        ("resource.k8s.io", "resourceslices", "get"):
            "only after a write conflict (another writer, or the old and new pod of a rolling "
            "update at once, which a run meets by chance): "
            "SlicePublisherTest.AConflictReReadsTheSliceAndWritesAgain",
        ("coordination.k8s.io", "leases", "update"):
            "only to take over a Lease another node let expire: "
            "DrainingRebooterTest.AnotherNodesTurnForTheSameReasonIsWaitedOut",
        ("resource.k8s.io", "resourceslices", "delete"):
            "only when the pool needs fewer slices (more than 64 devices before) or another "
            "name's leftovers: SlicePublisherTest.MoreThan64DevicesSplitAndFewerDeleteTheExtraSlice",
    }

    def scenario_rbac(self):
        """RBAC grants exactly what gpulet uses: in the API server's audit log of everything
        gpulet's ServiceAccount did in the scenarios before, no request was forbidden, and
        every verb its ClusterRoles and deploy/reboot-talos's Role grant was used (or is
        listed above with why not)."""
        used, forbidden = set(), []
        with open(self.c.audit_log) as f:
            for line in f:
                ev = json.loads(line)
                ref = ev.get("objectRef", {})
                resource = ref.get("resource", "")
                if ref.get("subresource"):
                    resource += "/" + ref["subresource"]
                key = (ref.get("apiGroup", ""), resource, ev.get("verb"))
                if ev.get("responseStatus", {}).get("code") == 403:
                    forbidden.append(key)
                used.add(key)
        check(used, "the audit log has no request by gpulet's ServiceAccount")
        check(not forbidden, f"gpulet was refused: {sorted(set(forbidden))}")
        granted = set()
        for kind, role in (("clusterrole", "gpulet"), ("clusterrole", "gpulet-dra"),
                           ("clusterrole", "gpulet-evict"), ("clusterrole", "gpulet-reboot"),
                           ("role", "gpulet-reboot")):
            r = self.c.kubectl("get", kind, role, "-n", NAMESPACE, "-o", "json", check=False)
            if r.returncode != 0:
                continue
            for rule in json.loads(r.stdout)["rules"]:
                for g in rule.get("apiGroups", []):
                    for res in rule.get("resources", []):
                        for verb in rule.get("verbs", []):
                            granted.add((g, res, verb))
        unused = sorted(granted - used - set(self.RBAC_NOT_EXERCISED))
        check(not unused, f"granted but never used by gpulet: {unused} (used: {sorted(used)})")

    SCENARIOS = ["registers", "pod_sees_cdi_devices", "metrics_name_the_pod", "config_reload",
                 "unhealthy_and_back", "long_node_name", "kubelet_restart", "gpulet_restart",
                 "taint_evicts", "gpu_reset", "eviction", "talos_reboot", "sharing_and_labels",
                 "memory_slices", "mig", "dra", "rbac"]

    def run(self, only):
        self.c.start()
        self.install()
        for name in self.SCENARIOS:
            if only and name not in only:
                continue
            start = time.monotonic()
            try:
                getattr(self, "scenario_" + name)()
                status, detail = "PASS", ""
            except (Failure, ClusterError) as e:
                status, detail = "FAIL", str(e)
            except Exception:  # a bug in the suite itself: say where
                status, detail = "FAIL", traceback.format_exc()
            took = time.monotonic() - start
            self.results.append((name, status, took, detail))
            print(f"e2e {self.version} {status} {name} ({took:.0f} s)" +
                  (f"\n{detail}" if detail else ""), flush=True)


def e2e_cache():
    """Where scripts/e2e/build.sh keeps what it builds."""
    return os.environ.get("GPULET_E2E_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpulet-e2e")


def peer_bins(versions):
    run([os.path.join(SRC, "scripts/e2e/build.sh"), *versions], capture=False, timeout=7200)
    cache = e2e_cache()
    per_version = {}
    for v in versions:
        bins = {}
        for d in sorted(os.listdir(cache)):
            if d.startswith("kubernetes-") and d != f"kubernetes-{v}":
                continue
            bindir = os.path.join(cache, d, "bin")
            if os.path.isdir(bindir):
                for b in os.listdir(bindir):
                    bins[b] = os.path.join(bindir, b)
        per_version[v] = bins
    return per_version


def vram_app_image(work, vram_dir):
    """The application image of the VRAM scenario, as tests/vram_podman_test.sh builds it: the
    test application, the driver stand-ins in /usr/lib, and the loader and glibc it links at
    the paths it names (the loader under its soname in the library directory too, as Debian's
    images have it: the audit library's link namespace finds it by name)."""
    root = os.path.join(work, "vram-app-root")
    shutil.rmtree(root, ignore_errors=True)
    for d in ("bin", "usr/lib", "tmp", "lib/x86_64-linux-gnu"):
        os.makedirs(os.path.join(root, d))
    shutil.copy(os.path.join(vram_dir, "vram_app"), os.path.join(root, "bin", "vram_app"))
    for lib in ("libcuda.so.1", "libnvidia-ml.so.1"):
        shutil.copy(os.path.join(vram_dir, lib), os.path.join(root, "usr", "lib", lib))
    linked = run(["ldd", os.path.join(vram_dir, "vram_app")]).stdout
    for path in re.findall(r"(/\S+)", linked):
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        shutil.copy(path, root + path)
        if "/ld-linux" in path:
            shutil.copy(path, os.path.join(root, "lib", "x86_64-linux-gnu"))
    out = os.path.join(work, "vram-app.tar")
    run([sys.executable, os.path.join(HERE, "oci_image.py"), "--root", root, "--name", VRAM_APP,
         "--out", out, "--entrypoint", "/bin/vram_app"])
    return out


def build_images(work, reuse_image, vram_dir):
    """The sandbox (pause), busybox and VRAM application images to import, and gpulet's OCI
    archive from `make image` (or saved from the image podman has, with --reuse-image) with
    its digest."""
    os.makedirs(work, exist_ok=True)
    out = []
    pause_root = os.path.join(work, "pause-root")
    os.makedirs(pause_root, exist_ok=True)
    run(["gcc", "-static", "-O2", "-o", os.path.join(pause_root, "pause"),
         os.path.join(HERE, "pause.c")])
    out.append(os.path.join(work, "pause.tar"))
    run([sys.executable, os.path.join(HERE, "oci_image.py"), "--root", pause_root, "--name",
         clusterlib.PAUSE_IMAGE, "--out", out[-1], "--entrypoint", "/pause"])
    bb_root = os.path.join(work, "busybox-root")
    shutil.rmtree(bb_root, ignore_errors=True)
    os.makedirs(os.path.join(bb_root, "bin"))
    shutil.copy("/bin/busybox", os.path.join(bb_root, "bin", "busybox"))
    for applet in ("sh", "ls", "cat", "env", "sleep", "grep", "sed", "readlink", "echo", "test"):
        os.symlink("busybox", os.path.join(bb_root, "bin", applet))
    out.append(os.path.join(work, "busybox.tar"))
    run([sys.executable, os.path.join(HERE, "oci_image.py"), "--root", bb_root, "--name",
         BUSYBOX, "--out", out[-1], "--cmd", "sh"])
    out.append(vram_app_image(work, vram_dir))
    if not (reuse_image and run(["podman", "image", "exists", IMAGE], check=False).returncode == 0):
        run(["make", "-C", SRC, "image"], capture=False, timeout=3600)
    # What `make image` saves (scripts/image-save.sh), here for the image podman has now.
    run([os.path.join(SRC, "scripts", "image-save.sh"), IMAGE, work], timeout=600)
    archive = os.path.join(work, "gpulet-" + IMAGE.rsplit(":", 1)[1] + ".oci.tar")
    with open(archive + ".digest") as f:
        digest = f.read().strip()
    return out, {"archive": archive, "digest": digest}


def serve_gpulet_image(gpulet, image, work):
    """Starts `gpulet image-serve` on the archive (the registry of a node with none); returns
    the process and sets image["ref"], the pinned reference the kubelet pulls."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(work, "image-serve.log"), "w")
    proc = subprocess.Popen([gpulet, "image-serve", image["archive"], "--address",
                             f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    wait_for("gpulet image-serve to answer /v2/",
             lambda: run(["curl", "-fsS", f"http://127.0.0.1:{port}/v2/"],
                         check=False).returncode == 0, timeout=20)
    image["ref"] = f"127.0.0.1:{port}/gpulet@{image['digest']}"
    return proc


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--versions", default=",".join(VERSIONS))
    p.add_argument("--only", default="")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--reuse-image", action="store_true",
                   help="use podman's gpulet image as it is instead of `make image`")
    p.add_argument("--gpulet", default=os.path.join(SRC, "build", "gpulet"))
    p.add_argument("--work", default="/var/tmp/gpulet-e2e")
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("e2e: needs root (a kubelet, containerd and mounts); run it as root")
    if not os.access(a.gpulet, os.X_OK):
        sys.exit(f"e2e: no gpulet binary at {a.gpulet} (make build, or --gpulet PATH)")
    versions = [v for v in a.versions.split(",") if v]
    only = {s for s in a.only.split(",") if s}
    unknown = only - set(Suite.SCENARIOS)
    if unknown:
        sys.exit(f"e2e: unknown scenario(s) {sorted(unknown)}; known: {Suite.SCENARIOS}")
    start = time.monotonic()
    bins = peer_bins(versions)
    print(f"e2e: peers ready in {time.monotonic() - start:.0f} s", flush=True)
    vram_dir = os.path.join(os.path.dirname(a.gpulet), "vram-test")
    if not os.access(os.path.join(vram_dir, "vram_app"), os.X_OK):
        sys.exit(f"e2e: no VRAM test application in {vram_dir} (make e2e builds it)")
    images, gpulet_image = build_images(os.path.join(a.work, "images"), a.reuse_image, vram_dir)
    print(f"e2e: images ready at {time.monotonic() - start:.0f} s", flush=True)
    image_server = serve_gpulet_image(a.gpulet, gpulet_image, a.work)
    results = []
    for i, v in enumerate(versions):
        suite = Suite(v, bins[v], os.path.join(a.work, v), a.gpulet, images, gpulet_image)
        try:
            suite.run(only)
        except (ClusterError, Failure) as e:
            suite.results.append(("cluster", "FAIL", 0, str(e)))
            print(f"e2e {v} FAIL cluster\n{e}", flush=True)
        finally:
            if not (a.keep and i == len(versions) - 1):
                suite.c.stop()
        results += [(v, *r) for r in suite.results]
    image_server.terminate()
    image_server.wait(timeout=10)
    failed = [r for r in results if r[2] != "PASS"]
    print(f"e2e: {len(results) - len(failed)} passed, {len(failed)} failed in "
          f"{time.monotonic() - start:.0f} s")
    for v, name, status, took, _ in results:
        print(f"  {v:9} {status} {name} ({took:.0f} s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
