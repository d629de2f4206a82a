"""Test fixture: gpuvisor-node over the fake NVML, the fake API server and a
kubelet stand-in, all in one scratch directory.  Used by
tests/node/test_node_*.py.
"""
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import gvtest

FAKES = os.environ.get("GV_FAKE_NVML_DIR") or os.path.join(gvtest.BUILD, "tests", "fakes")
NODE_BIN = os.path.join(gvtest.BUILD, "bin", "gpuvisor-node")
# The bearer token the HTTPS fake demands (Env(tls=True)).
TLS_TOKEN = "node-agent-token"
GPUS = ["GPU-11111111-2222-4333-8444-000000000000", "GPU-11111111-2222-4333-8444-000000000001"]
# uuids of GPUs 2 to 4 for Env(gpus=5) (the topology scenario)
MORE_GPUS = ["GPU-11111111-2222-4333-8444-000000000002", "GPU-11111111-2222-4333-8444-000000000003",
             "GPU-11111111-2222-4333-8444-000000000004"]


def have_fake_nvml():
    return os.path.exists(os.path.join(FAKES, "libnvidia-ml.so.1"))


class Api:
    """Minimal client for the fake API server (urllib; no gpuvisor code)."""

    def __init__(self, url, cafile=None, token=None):
        self.url = url
        self.ctx = ssl.create_default_context(cafile=cafile) if cafile else None
        self.token = token

    def _request(self, path, data=None, method="GET"):
        r = urllib.request.Request(self.url + path, data=data, method=method)
        if self.token:
            r.add_header("Authorization", "Bearer " + self.token)
        return r

    def get_raw(self, path):
        with urllib.request.urlopen(self._request(path), timeout=5, context=self.ctx) as r:
            return r.read().decode()

    def req(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        r = self._request(path, data, method)
        if data is not None:
            r.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(r, timeout=10, context=self.ctx) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def ctl(self, op):
        r = self._request("/_fake/" + op, b"", "POST")
        with urllib.request.urlopen(r, timeout=10, context=self.ctx) as resp:
            return resp.status

    def pod(self, name, ns="default"):
        return self.req("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, name))[1]

    def node(self, name):
        return self.req("GET", "/api/v1/nodes/" + name)[1]

    def create_pod(self, name, containers, assignment=None, annotations=None, node="node1",
                   ns="default", phase=None):
        """containers: list of (name, limits dict[, env dict])."""
        ann = dict(annotations or {})
        if assignment is not None:
            ann["gpuvisor.io/assignment"] = assignment
            ann["gpuvisor.io/assigned-node"] = node
            now = time.time()
            ann["gpuvisor.io/assigned-at"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + \
                ".%06dZ" % int((now % 1) * 1e6)
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "annotations": ann},
                "spec": {"nodeName": node, "containers": [
                    dict({"name": c[0], "image": "cuda", "resources": {"limits": c[1]}},
                         **({"env": [{"name": k, "value": v} for k, v in c[2].items()]} if len(c) > 2 else {}))
                    for c in containers]}}
        if phase:
            body["status"] = {"phase": phase}
        code, obj = self.req("POST", "/api/v1/namespaces/%s/pods" % ns, body)
        assert code == 201, (code, obj)
        return obj

    def delete_pod(self, name, ns="default"):
        return self.req("DELETE", "/api/v1/namespaces/%s/pods/%s" % (ns, name))[0]


def envs(ev):
    """Environment of a stand-in's allocate reply ({} when it failed)."""
    return ev["resp"]["envs"] if ev and ev.get("ok") else {}


def mounts(ev):
    """container path -> (host path, read-only) of an allocate reply."""
    return {m["container_path"]: (m["host_path"], m["read_only"]) for m in ev["resp"]["mounts"]} \
        if ev and ev.get("ok") else {}


def limits_unreachable(ev):
    """None when no writable mount of an Allocate reply reaches the host
    directory of the read-only limits file (that directory, a parent or a
    child of it: through any of them the container could replace the file);
    else what is wrong."""
    ms = ev["resp"]["mounts"] if ev and ev.get("ok") else []
    lim = [m for m in ms if m["container_path"] == "/etc/gpuvisor/limits.env"]
    if len(lim) != 1 or not lim[0]["read_only"]:
        return "limits file not mounted exactly once read-only: %r" % ms
    d = os.path.normpath(os.path.dirname(lim[0]["host_path"]))
    for m in ms:
        h = os.path.normpath(m["host_path"])
        if not m["read_only"] and (h == d or d.startswith(h + "/") or h.startswith(d + "/")):
            return "writable mount %s -> %s reaches the limits directory %s" % (h, m["container_path"], d)
    return None


def ann(obj, key):
    return (obj.get("metadata", {}).get("annotations") or {}).get(key)


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


class Env:
    """Scratch tree + fake API server; agents and stand-ins are started on demand.
    tls: the fake serves HTTPS (certificates made by gen_test_certs.sh) and the
    agent reaches it through a kubeconfig with the CA and a bearer token, as
    in a cluster."""

    def __init__(self, gpus=2, node="node1", config=None, tls=False, models=None):
        """models: per GPU (name, memory) for mixed nodes; default A100 40g."""
        self.dir = gvtest.scratch("na")
        self.node_name = node
        self.plugin_dir = os.path.join(self.dir, "dp")
        self.state = os.path.join(self.dir, "state")
        self.config = os.path.join(self.dir, "cfg", "node-config.json")
        self.faults = os.path.join(self.dir, "faults", "faults")
        for d in (self.plugin_dir, os.path.dirname(self.config), os.path.dirname(self.faults)):
            os.makedirs(d)
        write_atomic(self.faults, "")
        if config is not None:
            write_atomic(self.config, json.dumps(config))
        # the GPUs the fake NVML shows, and a /sys with their NUMA nodes
        self.gpu_cfg = os.path.join(self.dir, "gpus.conf")
        with open(self.gpu_cfg, "w") as f:
            for i in range(gpus):
                name, mem = (models or [])[i] if models and i < len(models) else ("NVIDIA A100-SXM4-40GB", "40g")
                f.write('name="%s" uuid=%s memory=%s pci=0:%x:0\n' % (name, (GPUS + MORE_GPUS)[i], mem, 0x3b + i))
                numa = os.path.join(self.dir, "sys/sys/bus/pci/devices/0000:%02x:00.0" % (0x3b + i))
                os.makedirs(numa)
                with open(os.path.join(numa, "numa_node"), "w") as g:
                    g.write("%d\n" % i)
        fake_argv = [gvtest.PY, os.path.join(gvtest.ROOT, "tests/fakes/apiserver/fake_apiserver.py"),
                     "--port", "0"]
        self.kubeconfig = None
        cafile = None
        if tls:
            certs = os.path.join(self.dir, "certs")
            subprocess.run(["sh", os.path.join(gvtest.ROOT, "tests/fakes/apiserver/gen_test_certs.sh"), certs],
                           check=True, stdout=subprocess.DEVNULL)
            cafile = os.path.join(certs, "ca.crt")
            fake_argv += ["--tls-cert", os.path.join(certs, "server.crt"),
                          "--tls-key", os.path.join(certs, "server.key"), "--token", TLS_TOKEN]
        self.api_proc = gvtest.Proc(fake_argv, log=os.path.join(self.dir, "apiserver.log"))
        ready = self.api_proc.expect(lambda l: l.startswith("READY"), 20)
        if ready is None:
            raise RuntimeError("fake apiserver did not start")
        self.api = Api(ready.split()[1], cafile, TLS_TOKEN if tls else None)
        if tls:
            self.kubeconfig = os.path.join(self.dir, "kubeconfig")
            write_atomic(self.kubeconfig, json.dumps({
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": self.api.url, "certificate-authority": cafile}}],
                "users": [{"name": "u", "user": {"token": TLS_TOKEN}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
        code, _ = self.api.req("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                         "metadata": {"name": node}})
        assert code == 201
        self.agent = None
        self.kubelet = None

    def start_agent(self, extra=(), env_extra=None):
        env = dict(os.environ, LD_LIBRARY_PATH=FAKES, GV_FAKE_GPU_CONFIG=self.gpu_cfg,
                   GV_FAKE_NVML_FAULTS=self.faults, GPUVISOR_LOG_LEVEL="debug",
                   GV_FAKE_NVML_DRIVER_VERSION="550.54.15", GV_FAKE_CUDA_DRIVER_VERSION="12040")
        env.update(env_extra or {})
        kube = ["--kubeconfig", self.kubeconfig] if self.kubeconfig else ["--kube-url", self.api.url]
        argv = [NODE_BIN, "--node-name", self.node_name] + kube + [
                "--config", self.config, "--plugin-dir", self.plugin_dir,
                "--state-dir", self.state, "--host-state-dir", "/host" + self.state,
                "--install-dir", "/usr/local/gpuvisor", "--sys-root", os.path.join(self.dir, "sys"),
                "--heartbeat-seconds", "1", "--health-probe-ms", "100", "--health-recover-ms", "300",
                "--allocate-wait-ms", "1500", "--gc-seconds", "1", "--gc-grace-ms", "200"] + list(extra)
        if os.environ.get("GV_SECURITY_BASELINE") == "1":
            pass  # tests/security runs an agent from before these flags
        elif "--placement-key-file" not in extra:
            # These tests write assignments themselves, as the scheduler would
            # (unsigned); tests/security covers signed ones.
            argv.append("--insecure-unsigned-placements")
        if "--preload-opt-out-namespaces" not in extra and os.environ.get("GV_SECURITY_BASELINE") != "1":
            # The tests' pods live in "default" and one of them opts out.
            argv += ["--preload-opt-out-namespaces", "default"]
        self.agent = gvtest.Proc(argv, env=env, stdin=False, log=os.path.join(self.dir, "agent.log"))
        return self.agent

    def start_mig_agent(self, geometry, config, extra=()):
        """The agent over the fake NVML with the MIG geometry file
        (tests/fakes/README.md "MIG") and the node config given; returns the
        geometry file's path (rewrite it with write_atomic to re-partition)."""
        mig = os.path.join(self.dir, "mig.conf")
        write_atomic(mig, geometry)
        write_atomic(self.config, json.dumps(config))
        self.start_agent(extra=extra, env_extra={"GV_FAKE_MIG_CONFIG": mig})
        return mig

    def stop_agent(self, sig=signal.SIGTERM):
        rc = self.agent.stop(sig) if self.agent else None
        self.agent = None
        return rc

    def start_kubelet(self, kind, go_bin=None):
        self.kubelet = gvtest.StandIn(kind, self.plugin_dir, go_binary=go_bin,
                                      log=os.path.join(self.dir, "kubelet-%s.log" % kind))
        return self.kubelet

    def agent_log(self):
        try:
            with open(os.path.join(self.dir, "agent.log")) as f:
                return f.read()
        except OSError:
            return ""

    def close(self):
        if self.kubelet:
            try:
                self.kubelet.send(json.dumps({"cmd": "quit"}))
            except OSError:
                pass
            self.kubelet.stop()
        if self.agent:
            self.stop_agent()
        self.api_proc.stop()


class ResourceWatch:
    """Reads every line of a kubelet stand-in serving several resources
    (registrations, each resource's newest device list), so that no devices
    event of one resource is lost while a test waits for another's."""

    def __init__(self, k):
        self.k = k
        self.registered = set()   # resource names registered so far
        self.registrations = []   # every registration, in order
        self.endpoints = {}       # resource -> plugin socket of its last registration
        self.last = {}            # resource -> its newest devices event

    def _take(self, ln):
        try:
            ev = json.loads(ln)
        except ValueError:
            return None
        if ev.get("event") == "registered":
            self.registered.add(ev["resource_name"])
            self.registrations.append(ev["resource_name"])
            self.endpoints[ev["resource_name"]] = ev["endpoint"]
        elif ev.get("event") == "devices":
            self.last[ev.get("resource")] = ev
        return ev

    def until(self, pred, timeout=15):
        """Reads lines until pred(newest event) holds; that event, or None."""
        while self.k.early:
            ev = self._take(self.k.early.pop(0))
            if ev and pred(ev):
                return ev
        end = time.time() + timeout
        while time.time() < end:
            ln = self.k.line(max(0.05, end - time.time()))
            ev = self._take(ln) if ln else None
            if ev and pred(ev):
                return ev
        return None

    def devices(self, resource, pred=lambda ev: True, timeout=15):
        """The newest devices event of resource satisfying pred (waiting for it)."""
        ev = self.last.get(resource)
        if ev and pred(ev):
            return ev
        return self.until(lambda e: e.get("event") == "devices" and e.get("resource") == resource
                          and pred(e), timeout)

    def cmd(self, name, **kw):
        self.k.send(json.dumps(dict(cmd=name, **kw)))
        return self.until(lambda e: e.get("event") == name)
