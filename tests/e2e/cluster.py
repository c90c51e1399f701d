"""A real single-node Kubernetes cluster on this machine, for the e2e suite (tests/e2e/e2e.py).

Every component is the real one, built from its own module by scripts/e2e/build.sh: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubelet, containerd 2.x
with runc and CDI, and the CNI bridge plugins. It runs as root. Nothing listens beyond this
machine: etcd and the components' health ports are on 127.0.0.1; the API server and the
kubelet listen on the address of a host-only bridge (BRIDGE_IP), which pods need to reach the
API server through the `kubernetes` Service, as in any cluster. The bridge has no uplink.

The PKI (a CA, the API server's serving certificate, client certificates for each component,
the service-account key pair) is made with the openssl command line at start, valid for two
days. Logs go to <work>/logs/<component>.log; tail() returns the end of one for a failure
message.

Paths the kubelet and its plugins agree on are the real ones (/var/lib/kubelet, /var/run/cdi),
because the DaemonSet under test mounts them by those names; containerd keeps its state under
<work>. stop() tears everything down and unmounts what the kubelet and containerd left.
"""
import json
import os
import shutil
import signal
import subprocess
import time

BRIDGE = "gpulete2e0"
BRIDGE_IP = "10.244.0.1"
POD_SUBNET = "10.244.0.0/24"
SERVICE_RANGE = "10.0.0.0/24"
API_PORT = 6443
NODE = "gpulet-e2e"
KUBELET_DIR = "/var/lib/kubelet"
PAUSE_IMAGE = "localhost/gpulet-e2e/pause:1"
GPULET_USER = "system:serviceaccount:gpulet-system:gpulet"


class ClusterError(Exception):
    pass


def run(args, check=True, capture=True, timeout=120, env=None, input_text=None):
    """Runs a command (a list: never through a shell); returns CompletedProcess."""
    try:
        r = subprocess.run(args, capture_output=capture, text=True, timeout=timeout, env=env,
                           input=input_text)
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"{' '.join(args)}: no answer in {timeout} s") from e
    if check and r.returncode != 0:
        raise ClusterError(f"{' '.join(args)} exited {r.returncode}: {r.stderr or r.stdout}")
    return r


def wait_for(what, predicate, timeout=120, interval=0.5):
    """Polls `predicate` until it returns a true value (returned) or raises after `timeout`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except ClusterError as e:
            last = e
        time.sleep(interval)
    raise ClusterError(f"timed out after {timeout} s waiting for {what}" +
                       (f" (last error: {last})" if last else ""))


class Pki:
    """A CA and the certificates the components present, made with openssl."""

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.ca_crt = self.path("ca.crt")
        run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", self.path("ca.key"), "-out",
             self.ca_crt, "-days", "2", "-subj", "/CN=gpulet-e2e-ca"])
        run(["openssl", "genrsa", "-out", self.path("sa.key"), "2048"])
        run(["openssl", "rsa", "-in", self.path("sa.key"), "-pubout", "-out",
             self.path("sa.pub")])

    def path(self, name):
        return os.path.join(self.dir, name)

    def issue(self, name, subject, sans=None):
        """Issues <name>.crt/.key for `subject` ("/O=.../CN=..."), for server and client use."""
        key, csr, crt = self.path(name + ".key"), self.path(name + ".csr"), self.path(name + ".crt")
        run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", csr, "-subj",
             subject])
        ext = self.path(name + ".ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\n")
            f.write("keyUsage=digitalSignature,keyEncipherment\n")
            f.write("extendedKeyUsage=serverAuth,clientAuth\n")
            if sans:
                f.write("subjectAltName=" + ",".join(sans) + "\n")
        run(["openssl", "x509", "-req", "-in", csr, "-CA", self.ca_crt, "-CAkey",
             self.path("ca.key"), "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", ext])
        return crt, key


class Cluster:
    """One cluster; start() brings it up, stop() takes it down. Binaries by name in `bins`."""

    def __init__(self, version, bins, work, feature_gates=""):
        self.version = version
        self.bins = bins
        self.work = work
        self.feature_gates = feature_gates
        self.procs = {}  # name -> Popen
        self.logs = os.path.join(work, "logs")
        self.containerd_sock = os.path.join("/run/gpulet-e2e", "containerd.sock")
        self.admin_kubeconfig = os.path.join(work, "admin.kubeconfig")
        self.audit_log = os.path.join(work, "logs", "audit.log")

    # --- helpers the scenarios use -------------------------------------------------------

    def kubectl(self, *args, check=True, timeout=120, input_text=None):
        return run([self.bins["kubectl"], "--kubeconfig", self.admin_kubeconfig, *args],
                   check=check, timeout=timeout, input_text=input_text)

    def get_json(self, *args):
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def crictl(self, *args, check=True):
        return run([self.bins["crictl"], "--runtime-endpoint", "unix://" + self.containerd_sock,
                    *args], check=check)

    def tail(self, component, lines=40):
        path = os.path.join(self.logs, component + ".log")
        try:
            with open(path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return f"(no log at {path}: {e})"

    # --- bring-up ------------------------------------------------------------------------

    def start(self):
        if os.geteuid() != 0:
            raise ClusterError("the e2e cluster needs root (kubelet, containerd, mounts)")
        self.stop_leftovers()
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.logs)
        # systemd makes / a shared mount at boot, and the kubelet relies on it for
        # mountPropagation (the DaemonSet's host root is HostToContainer); a machine without
        # systemd has a private /, where containerd refuses: "path / is mounted on / but it is
        # not a shared or slave mount".
        run(["mount", "--make-rshared", "/"])
        self.make_bridge()
        self.pki = Pki(os.path.join(self.work, "pki"))
        self.make_kubeconfigs()
        self.start_etcd()
        self.start_apiserver()
        self.start_containerd()
        self.spawn("kube-controller-manager", self.controller_manager_args())
        self.spawn("kube-scheduler", [self.bins["kube-scheduler"], "--kubeconfig",
                                      self.kubeconfig("scheduler"), "--bind-address=127.0.0.1",
                                      "--leader-elect=false", *self.gates()])
        self.start_kube_proxy()
        self.start_kubelet()
        wait_for("the Node to be Ready", self.node_ready, timeout=180)

    def gates(self):
        return [f"--feature-gates={self.feature_gates}"] if self.feature_gates else []

    def spawn(self, name, args, env=None):
        log = open(os.path.join(self.logs, name + ".log"), "w")
        self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        return self.procs[name]

    def check_alive(self):
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise ClusterError(f"{name} exited {p.returncode}; its log ends:\n" +
                                   self.tail(name))

    def make_bridge(self):
        run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=False)
        run(["ip", "addr", "replace", f"{BRIDGE_IP}/24", "dev", BRIDGE])
        run(["ip", "link", "set", BRIDGE, "up"])
        with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
            f.write("1\n")

    def kubeconfig(self, name):
        return os.path.join(self.work, name + ".kubeconfig")

    def make_kubeconfigs(self):
        p = self.pki
        ip_sans = ["IP:127.0.0.1", f"IP:{BRIDGE_IP}", "IP:10.0.0.1", "DNS:localhost",
                   "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                   "DNS:kubernetes.default.svc.cluster.local"]
        self.apiserver_cert = p.issue("apiserver", "/CN=kube-apiserver", ip_sans)
        self.kubelet_cert = p.issue("kubelet", f"/CN={NODE}", [f"IP:{BRIDGE_IP}", "IP:127.0.0.1",
                                                                 f"DNS:{NODE}"])
        self.apiserver_kubelet_client = p.issue("apiserver-kubelet-client",
                                                "/O=system:masters/CN=kube-apiserver-kubelet")
        clients = {
            "admin": "/O=system:masters/CN=gpulet-e2e-admin",
            "controller-manager": "/CN=system:kube-controller-manager",
            "scheduler": "/CN=system:kube-scheduler",
            "kube-proxy": "/CN=system:kube-proxy",
            "kubelet": f"/O=system:nodes/CN=system:node:{NODE}",
        }
        for name, subject in clients.items():
            crt, key = p.issue(name + "-client", subject)
            doc = {
                "apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": "e2e", "cluster": {
                    "server": f"https://{BRIDGE_IP}:{API_PORT}",
                    "certificate-authority": p.ca_crt}}],
                "users": [{"name": name, "user": {"client-certificate": crt,
                                                  "client-key": key}}],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": name}}],
                "current-context": "e2e",
            }
            path = self.admin_kubeconfig if name == "admin" else self.kubeconfig(name)
            with open(path, "w") as f:
                json.dump(doc, f)
            os.chmod(path, 0o600)

    def start_etcd(self):
        self.spawn("etcd", [self.bins["etcd"], "--data-dir", os.path.join(self.work, "etcd"),
                            "--listen-client-urls", "http://127.0.0.1:23790",
                            "--advertise-client-urls", "http://127.0.0.1:23790",
                            "--listen-peer-urls", "http://127.0.0.1:23800",
                            "--initial-advertise-peer-urls", "http://127.0.0.1:23800",
                            "--initial-cluster", "default=http://127.0.0.1:23800",
                            "--listen-metrics-urls", "http://127.0.0.1:23810"])

        def healthy():
            self.check_alive()
            r = run(["curl", "-sf", "http://127.0.0.1:23810/health"], check=False)
            return r.returncode == 0 and '"true"' in r.stdout
        wait_for("etcd to be healthy", healthy, timeout=60)

    def start_apiserver(self):
        p = self.pki
        # Every request gpulet's ServiceAccount makes, for the RBAC scenario.
        policy = os.path.join(self.work, "audit-policy.json")
        with open(policy, "w") as f:
            json.dump({"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                       "omitStages": ["RequestReceived"],
                       "rules": [{"level": "Metadata", "users": [GPULET_USER]},
                                 {"level": "None"}]}, f)
        crt, key = self.apiserver_cert
        kcrt, kkey = self.apiserver_kubelet_client
        self.spawn("kube-apiserver", [
            self.bins["kube-apiserver"],
            "--etcd-servers=http://127.0.0.1:23790",
            f"--bind-address={BRIDGE_IP}", f"--advertise-address={BRIDGE_IP}",
            f"--secure-port={API_PORT}",
            f"--tls-cert-file={crt}", f"--tls-private-key-file={key}",
            f"--client-ca-file={p.ca_crt}",
            f"--kubelet-client-certificate={kcrt}", f"--kubelet-client-key={kkey}",
            f"--kubelet-certificate-authority={p.ca_crt}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--service-account-issuer=https://{BRIDGE_IP}:{API_PORT}",
            f"--service-account-key-file={p.path('sa.pub')}",
            f"--service-account-signing-key-file={p.path('sa.key')}",
            f"--cert-dir={os.path.join(self.work, 'apiserver-certs')}",
            "--profiling=false",
            f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
            *self.gates(),
        ])

        def ready():
            self.check_alive()
            r = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
            return r.returncode == 0 and r.stdout.strip() == "ok"
        wait_for("kube-apiserver /readyz", ready, timeout=120)

    def controller_manager_args(self):
        p = self.pki
        return [self.bins["kube-controller-manager"],
                "--kubeconfig", self.kubeconfig("controller-manager"),
                "--bind-address=127.0.0.1", "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={p.path('sa.key')}",
                f"--root-ca-file={p.ca_crt}",
                f"--cluster-signing-cert-file={p.ca_crt}",
                f"--cluster-signing-key-file={p.path('ca.key')}",
                # A dead node's pods are not the test's business: no eviction by the lifecycle
                # controller while the kubelet restarts.
                "--node-monitor-grace-period=120s",
                *self.gates()]

    def start_containerd(self):
        root = os.path.join(self.work, "containerd")
        os.makedirs("/run/gpulet-e2e", exist_ok=True)
        cni_conf = os.path.join(self.work, "cni")
        os.makedirs(cni_conf)
        with open(os.path.join(cni_conf, "10-gpulet-e2e.conflist"), "w") as f:
            json.dump({"cniVersion": "1.0.0", "name": "gpulet-e2e", "plugins": [
                {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "isDefaultGateway": True,
                 "ipMasq": False,
                 "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET,
                                                             "gateway": BRIDGE_IP}]],
                          "dataDir": os.path.join(self.work, "cni-ipam")}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}, f)
        config = os.path.join(self.work, "containerd.toml")
        runc = self.bins["runc"]
        with open(config, "w") as f:
            f.write(f"""version = 3
root = "{root}"
state = "/run/gpulet-e2e/containerd"
[grpc]
  address = "{self.containerd_sock}"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{PAUSE_IMAGE}"
[plugins.'io.containerd.cri.v1.runtime']
  # The test machines do not let a process lower its oom_score_adj (the kubelet asks -998
  # for sandboxes): keep each at least containerd's own.
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["{os.path.dirname(self.bins['bridge'])}"]
  conf_dir = "{cni_conf}"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "{runc}"
  SystemdCgroup = false
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
""")
        env = dict(os.environ)
        # The shim is found on PATH.
        env["PATH"] = os.path.dirname(self.bins["containerd-shim-runc-v2"]) + ":" + env["PATH"]
        self.spawn("containerd", [self.bins["containerd"], "--config", config], env=env)

        def ready():
            self.check_alive()
            return self.crictl("info", check=False).returncode == 0
        wait_for("containerd's CRI", ready, timeout=60)

    def import_image(self, archive):
        run([self.bins["ctr"], "--address", self.containerd_sock, "-n", "k8s.io", "images",
             "import", archive], timeout=300)

    def start_kube_proxy(self):
        config = os.path.join(self.work, "kube-proxy.yaml")
        with open(config, "w") as f:
            json.dump({
                "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                "kind": "KubeProxyConfiguration",
                "clientConnection": {"kubeconfig": self.kubeconfig("kube-proxy")},
                "mode": "iptables",
                "clusterCIDR": POD_SUBNET,
                "hostnameOverride": NODE,
                "bindAddress": "127.0.0.1",
                "healthzBindAddress": "127.0.0.1:10256",
                "metricsBindAddress": "127.0.0.1:10249",
                # Do not touch the host's conntrack sysctls: the sandbox may not allow it.
                "conntrack": {"maxPerCore": 0},
            }, f)
        self.spawn("kube-proxy", [self.bins["kube-proxy"], "--config", config])

    def start_kubelet(self):
        p = self.pki
        crt, key = self.kubelet_cert
        config = os.path.join(self.work, "kubelet.yaml")
        with open(config, "w") as f:
            json.dump({
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "address": BRIDGE_IP,
                "healthzBindAddress": "127.0.0.1",
                "authentication": {"x509": {"clientCAFile": p.ca_crt},
                                   "anonymous": {"enabled": False},
                                   "webhook": {"enabled": True}},
                "authorization": {"mode": "Webhook"},
                "tlsCertFile": crt, "tlsPrivateKeyFile": key,
                "cgroupDriver": "cgroupfs",
                # The test machines mount cgroup v1; 1.35+ refuses it unless told (KEP-5573).
                "failCgroupV1": False,
                "failSwapOn": False,
                "containerRuntimeEndpoint": "unix://" + self.containerd_sock,
                "clusterDNS": [], "clusterDomain": "cluster.local",
                # The machine's disk is the host's: no image GC or disk eviction in a test.
                "imageGCHighThresholdPercent": 100,
                "evictionHard": {"nodefs.available": "0%", "imagefs.available": "0%",
                                 "memory.available": "0%"},
                "resolvConf": "",
                "serializeImagePulls": False,
                # A ConfigMap edit reaches the pod's volume within a sync (default 1 min).
                "syncFrequency": "10s",
                "localStorageCapacityIsolation": False,
                "protectKernelDefaults": False,
                "makeIPTablesUtilChains": True,
            }, f)
        self.spawn("kubelet", [self.bins["kubelet"], "--config", config,
                               "--kubeconfig", self.kubeconfig("kubelet"),
                               f"--hostname-override={NODE}", f"--node-ip={BRIDGE_IP}",
                               f"--root-dir={KUBELET_DIR}", *self.gates()])

    def restart_kubelet(self):
        self.stop_one("kubelet")
        args = self.procs.pop("kubelet").args
        self.spawn("kubelet", args)

    def node_ready(self):
        self.check_alive()
        r = self.kubectl("get", "node", NODE, "-o", "json", check=False, timeout=10)
        if r.returncode != 0:
            return False
        node = json.loads(r.stdout)
        for c in node.get("status", {}).get("conditions", []):
            if c.get("type") == "Ready":
                return c.get("status") == "True"
        return False

    # --- teardown ------------------------------------------------------------------------

    def stop_one(self, name, timeout=20):
        p = self.procs.get(name)
        if p is None or p.poll() is not None:
            return
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def stop(self):
        # Pods first (through the CRI, while containerd runs), then the components in the
        # reverse order of their start.
        if "containerd" in self.procs and self.procs["containerd"].poll() is None:
            self.stop_one("kubelet")
            self.crictl("rmp", "--all", "--force", check=False)
        for name in reversed(list(self.procs)):
            self.stop_one(name)
        self.procs.clear()
        self.stop_leftovers()

    def stop_leftovers(self):
        """Removes what an earlier run (or this one) left: components, shims, mounts,
        iptables rules, the bridge."""
        for name in ("kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager",
                     "containerd", "kube-apiserver", "etcd"):
            if name in self.bins:
                # Only this suite's builds, by their full path, of any version: a cluster an
                # earlier run kept (--keep) may be of another one.
                cache = os.path.dirname(os.path.dirname(os.path.dirname(self.bins[name])))
                run(["pkill", "-KILL", "-f", f"^{cache}/[^ /]+/bin/{name} "], check=False)
        run(["pkill", "-f", "containerd-shim-runc-v2 .*-address /run/gpulet-e2e/"], check=False)
        mounts = []
        with open("/proc/self/mountinfo") as f:
            for line in f:
                point = line.split()[4]
                if point.startswith((KUBELET_DIR + "/", "/run/gpulet-e2e/", self.work + "/",
                                     "/run/netns/cni-")):
                    mounts.append(point)
        for point in sorted(mounts, key=len, reverse=True):
            run(["umount", "-l", point], check=False)
        if "kube-proxy" in self.bins and os.path.exists(self.bins["kube-proxy"]):
            run([self.bins["kube-proxy"], "--cleanup"], check=False)
        run(["ip", "link", "del", BRIDGE], check=False)
        # The CDI specs gpulet's pod wrote in the host's /var/run/cdi: left there, they would
        # answer for gpulet.dev/gpu devices on this machine after the cluster is gone.
        if os.path.isdir("/var/run/cdi"):
            for f in os.listdir("/var/run/cdi"):
                if f.startswith("gpulet"):
                    os.remove(os.path.join("/var/run/cdi", f))
        shutil.rmtree("/run/gpulet-e2e", ignore_errors=True)
        for d in ("pods", "plugins", "plugins_registry", "device-plugins", "pod-resources"):
            shutil.rmtree(os.path.join(KUBELET_DIR, d), ignore_errors=True)
