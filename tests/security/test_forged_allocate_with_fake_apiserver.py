#!/usr/bin/python3
"""Hostile tenant vs. the node agent's Allocate (issue 14, docs/isolation.md "Placements").

The real gpuvisor-node, with a placement key, over the fake NVML, the
kube-apiserver stand-in and the Python kubelet stand-in.  Pods bound to the
node carry assignments written as a tenant could (the webhook down): none
signed, one with a signature made under another key, one signed and then
patched to 0 MiB (no memory limit), one opting out of the interposer in a
namespace the admin did not list.  Each Allocate must fail with the reason,
the pod marked gpuvisor.io/allocation=failed, no devices handed out.  A
placement signed with the right key is served with its limits.
GV_SECURITY_BASELINE=1 runs an agent without the fix (no key flags): the
forged pods are served there, which is the attack.
"""
import hashlib
import hmac
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "node"))
import agent  # noqa: E402
import gvtest  # noqa: E402
from agent import GPUS, ann, envs, mounts  # noqa: E402

BASELINE = os.environ.get("GV_SECURITY_BASELINE") == "1"
KEY = b"node-e2e-key-0123456789abcdef0123456789abcdef"
LIM = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}
t = gvtest.Tap()
if not agent.have_fake_nvml():
    t.skip("forged placements against gpuvisor-node", "fake libnvidia-ml.so.1 not built in " + agent.FAKES)
    t.done()


def sign(key, uid, node, at, assignment):
    """The scheduler's signature (src/contracts/placement.c), computed independently."""
    msg = b"gpuvisor.io/placement/v1\0" + b"".join(f.encode() + b"\0" for f in (uid, node, at, assignment))
    return "v1." + hmac.new(key, msg, hashlib.sha256).hexdigest()


def signed_pod(env, name, assignment, key=KEY, ns="default", extra=None, patch=None):
    """The scheduler's order: the pod is created unbound, its placement and
    signature are written in one patch (the signature over the uid the
    stand-in gave it), then it is bound.  The agent sees the pod only once it
    is bound to its node, so it never sees it half-written."""
    env.api.create_pod(name, [("main", LIM)], None, annotations=extra, ns=ns, node="")
    p = env.api.pod(name, ns)
    now = time.time()
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%06dZ" % int((now % 1) * 1e6)
    sig = sign(key, p["metadata"]["uid"], "node1", at, assignment)
    anns = {"gpuvisor.io/assignment": assignment, "gpuvisor.io/assigned-node": "node1",
            "gpuvisor.io/assigned-at": at, "gpuvisor.io/assignment-sig": sig}
    anns.update(patch or {})
    code, _ = env.api.req("PATCH", "/api/v1/namespaces/%s/pods/%s" % (ns, name),
                          {"metadata": {"annotations": anns}}, "application/merge-patch+json")
    assert code == 200, code
    code, _ = env.api.req("POST", "/api/v1/namespaces/%s/pods/%s/binding" % (ns, name),
                          {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                           "target": {"apiVersion": "v1", "kind": "Node", "name": "node1"}})
    assert code == 201, code


def main():
    env = agent.Env()
    try:
        key_file = os.path.join(env.dir, "placement.key")
        with open(key_file, "wb") as f:
            f.write(KEY + b"\n")
        extra = [] if BASELINE else ["--placement-key-file", key_file, "--preload-opt-out-namespaces", "ml-admin"]
        env.start_agent(extra=extra)
        k = env.start_kubelet("py")
        ev = k.event("devices", timeout=10)
        ids = [d["id"] for d in ev["devices"]] if ev else []
        t.ok(len(ids) == 20, "agent up with a placement key, 20 devices", env.agent_log()[-2000:])

        cases = [
            ("unsigned", lambda: env.api.create_pod("unsigned", [("main", LIM)],
                                                    "v1;node=node1;main=%s:0:0" % GPUS[0]),
             "default", "is not signed"),
            ("other-key", lambda: signed_pod(env, "other-key", "v1;node=node1;main=%s:0:0" % GPUS[0],
                                             key=b"another-cluster-key-0123456789abcdef0123"),
             "default", "does not match"),
            ("patched", lambda: signed_pod(env, "patched", "v1;node=node1;main=%s:1000:0" % GPUS[0],
                                           patch={"gpuvisor.io/assignment": "v1;node=node1;main=%s:0:0" % GPUS[0]}),
             "default", "does not match"),
            ("optout", lambda: signed_pod(env, "optout", "v1;node=node1;main=%s:1000:0" % GPUS[0],
                                          extra={"gpuvisor.io/preload": "false"}),
             "default", "preloadOptOutNamespaces"),
        ]
        for i, (name, make, ns, why) in enumerate(cases):
            make()
            a = k.cmd("allocate", ids=[ids[i]])
            refused = a is not None and not a.get("ok")
            gvtest.wait_for(lambda: ann(env.api.pod(name, ns), "gpuvisor.io/allocation") == "failed", 5)
            p = env.api.pod(name, ns)
            t.ok(refused and why in (a.get("message") or "") and
                 ann(p, "gpuvisor.io/allocation") == "failed" and
                 why in (ann(p, "gpuvisor.io/allocation-message") or ""),
                 "%s placement: Allocate refused, pod marked failed naming why (%s)" % (name, why),
                 (a, ann(p, "gpuvisor.io/allocation-message")))
            # the next case must not be chosen behind a pod left pending
            env.api.delete_pod(name, ns)

        signed_pod(env, "good", "v1;node=node1;main=%s:1000:300" % GPUS[1])
        a = k.cmd("allocate", ids=[ids[19]])
        t.ok(a and a.get("ok") and envs(a).get("CUDA_DEVICE_MEMORY_LIMIT_0") == "1000m" and
             "/etc/ld.so.preload" in mounts(a),
             "signed placement served with its limits and the ld.so.preload mount", a)
        signed_pod(env, "admin-optout", "v1;node=node1;main=%s:1000:0" % GPUS[1], ns="ml-admin",
                   extra={"gpuvisor.io/preload": "false"})
        a = k.cmd("allocate", ids=[ids[18]])
        t.ok(a and a.get("ok") and "/etc/ld.so.preload" not in mounts(a),
             "preload opt-out served in the namespace the admin listed", a)
    finally:
        env.close()
    t.done()


main()
