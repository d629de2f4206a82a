#!/usr/bin/python3
"""Several resources at once through the grpc-go kubelet stand-in (the
kubelet's own gRPC library; tests/fakes/kubelet/go): the real agent serves
vGPU slices of an NVML GPU (fake NVML) under nvidia.com/gpu, a GPU on
vfio-pci (passthrough) and a mediated device (mdev) from a fake sysfs tree
under their KubeVirt names, one plugin socket and registration each
(docs/node-agent.md "Sharing modes", docs/passthrough.md).  The stand-in
keeps one connection, ListAndWatch stream and device list per resource name,
as the kubelet's device manager does.

Checks: every resource registered on its own socket, each stream's devices
reported under its resource, Allocate routed per resource (vGPU limits and
interposer; /dev/vfio nodes and KubeVirt env), health on one resource not
leaking into another, and a kubelet restart re-registering all three."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import gvtest  # noqa: E402
from agent import GPUS, envs, mounts  # noqa: E402

t = gvtest.Tap()
FAKE_SYSFS = os.path.join(gvtest.BUILD, "testbin", "fake_sysfs")
if not agent.have_fake_nvml() or not os.path.exists(FAKE_SYSFS):
    t.skip("several resources with the grpc-go stand-in", "fake NVML or fake_sysfs not built")
    t.done()
go_bin = gvtest.build_go_standin().report(t, "several resources with the grpc-go stand-in")
if not go_bin:
    t.done()

H100, A10Q, GPU = "nvidia.com/GH100_H100_PCIE", "nvidia.com/NVIDIA_A10-4Q", "nvidia.com/gpu"
MDEV = "5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b01"
SPEC = {
    "devices": [
        {"bdf": "0000:41:00.0", "device": "2331", "driver": "vfio-pci", "group": 17, "numa": 0},
        {"bdf": "0000:81:00.0", "device": "2236", "driver": "nvidia", "group": 29},
        {"bdf": "0000:81:00.4", "device": "2236", "driver": "nvidia", "group": 30, "physfn": "0000:81:00.0"},
    ],
    "mdev_types": [{"parent": "0000:81:00.4", "id": "nvidia-592", "name": "NVIDIA A10-4Q", "available": 3}],
    "mdevs": [{"uuid": MDEV, "parent": "0000:81:00.4", "type": "nvidia-592", "group": 90}],
}
PCI_IDS = os.path.join(gvtest.ROOT, "tests", "fakes", "sysfs", "pci.ids")


def devices(w, resource, pred=lambda ds: True, timeout=20):
    """{id: health} of resource's newest list satisfying pred, or None."""
    ev = w.devices(resource, lambda e: pred(health(e)), timeout)
    return health(ev) if ev else None


def health(ev):
    return {d["id"]: d["health"] for d in (ev or {}).get("devices", [])}


env = agent.Env(gpus=1, config={"deviceSplitCount": 4, "passthrough": {"enabled": True, "pciIds": PCI_IDS}})
root = os.path.join(env.dir, "sys")
spec_file = os.path.join(env.dir, "sysfs.json")
with open(spec_file, "w") as f:
    json.dump(SPEC, f)
subprocess.run([FAKE_SYSFS, "build", root, spec_file], check=True)
try:
    w = agent.ResourceWatch(env.start_kubelet("go", go_bin))
    env.start_agent()
    want = {GPU, H100, A10Q}
    w.until(lambda e: want <= w.registered, 30)
    eps = w.endpoints
    t.ok(w.registered == want and len(set(eps.values())) == 3,
         "[go stand-in] vgpu, passthrough and mdev resources each registered with its own socket", eps)
    g = devices(w, GPU, lambda ds: len(ds) == 4)
    h = devices(w, H100, lambda ds: len(ds) == 1)
    m = devices(w, A10Q, lambda ds: len(ds) == 1)
    t.ok(g == {"%s::%d" % (GPUS[0], i): "Healthy" for i in range(4)} and
         h == {"0000_41_00.0": "Healthy"} and m == {MDEV: "Healthy"},
         "[go stand-in] each ListAndWatch stream's devices reported under its own resource", (g, h, m))

    # a vGPU pod, admitted through nvidia.com/gpu's connection (GetPreferredAllocation + Allocate)
    env.api.create_pod("sliced", [("main", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})],
                       "v1;node=node1;main=%s:1000:300" % GPUS[0])
    a = w.cmd("admit", size=1, resource=GPU)
    e = envs(a)
    t.ok(a and a["ok"] and e.get("NVIDIA_VISIBLE_DEVICES") == GPUS[0] and
         e.get("CUDA_DEVICE_MEMORY_LIMIT_0") == "1000m" and "/etc/ld.so.preload" in mounts(a) and
         all(i.startswith(GPUS[0] + "::") for i in a.get("ids", [])),
         "[go stand-in] vgpu admit on nvidia.com/gpu: the slice's limits and the interposer", a)
    a = w.cmd("allocate", ids=["0000_41_00.0"], resource=H100)
    resp = (a or {}).get("resp", {})
    t.ok(a and a["ok"] and sorted(d["host_path"] for d in resp.get("devices", [])) ==
         ["/dev/vfio/17", "/dev/vfio/vfio"] and
         envs(a) == {"PCI_RESOURCE_NVIDIA_COM_GH100_H100_PCIE": "0000:41:00.0"},
         "[go stand-in] passthrough Allocate on its resource: /dev/vfio nodes, KubeVirt env", a)
    a = w.cmd("allocate", ids=[MDEV], resource=A10Q)
    resp = (a or {}).get("resp", {})
    t.ok(a and a["ok"] and sorted(d["host_path"] for d in resp.get("devices", [])) ==
         ["/dev/vfio/90", "/dev/vfio/vfio"] and envs(a) == {"MDEV_PCI_RESOURCE_NVIDIA_COM_NVIDIA_A10-4Q": MDEV},
         "[go stand-in] mdev Allocate on its resource: its group node, MDEV_PCI_RESOURCE env", a)
    a = w.cmd("allocate", ids=[MDEV], resource="nvidia.com/none")
    t.ok(a and not a["ok"] and "not registered" in a.get("message", ""),
         "[go stand-in] a resource nobody registered has no connection", a)

    # health of one resource does not leak into another's list
    subprocess.run([FAKE_SYSFS, "remove", root, "0000:41:00.0"], check=True)
    h = devices(w, H100, lambda ds: ds.get("0000_41_00.0") == "Unhealthy", 30)
    g = health(w.last.get(GPU))
    t.ok(h is not None and g == {"%s::%d" % (GPUS[0], i): "Healthy" for i in range(4)} and
         health(w.last.get(A10Q)) == {MDEV: "Healthy"},
         "[go stand-in] hot-removed passthrough GPU Unhealthy on its resource only", (h, w.last))

    # kubelet restart: sockets deleted, every resource re-registered and streamed again
    n_before = len(w.registrations)
    w.last = {}
    w.k.send(json.dumps({"cmd": "restart"}))
    w.until(lambda e: len(w.registrations) >= n_before + 3 and want <= set(w.last), 30)
    t.ok(set(w.registrations[n_before:]) == want and want <= set(w.last) and
         len(health(w.last.get(GPU))) == 4,
         "[go stand-in] kubelet restart: all three resources re-registered, each stream reopened",
         (w.registrations[n_before:], list(w.last)))
finally:
    env.close()
t.done()
