#!/usr/bin/python3
"""gpuvisor-node's passthrough mode end to end (docs/passthrough.md): the
real agent over a fake sysfs tree (tests/fakes/sysfs, built by
$BUILD/testbin/fake_sysfs), the fake NVML, the API-server stand-in and the
Python kubelet stand-in (one registration per resource name).

Checks: the resource names advertised, healthy and unhealthy devices (a
group with a function still on snd_hda_intel), Allocate's device specs and
KubeVirt environment, whole-group refusals, mdevs, a waiting gpuvisor pod
not taking a VM's call, hot removal -> Unhealthy, and wholeDevices in the
inventory annotation."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import gvtest  # noqa: E402
from agent import GPUS, ann, envs  # noqa: E402

t = gvtest.Tap()
FAKE_SYSFS = os.path.join(gvtest.BUILD, "testbin", "fake_sysfs")
if not agent.have_fake_nvml() or not os.path.exists(FAKE_SYSFS):
    t.skip("passthrough end to end", "fake NVML or fake_sysfs not built")
    t.done()

H100, T4, A100, A10Q = ("nvidia.com/GH100_H100_PCIE", "nvidia.com/TU104GL_TESLA_T4",
                        "nvidia.com/GA100_A100_PCIE_80GB", "nvidia.com/NVIDIA_A10-4Q")
MDEV1 = "5f3b1c2a-0b7e-4c55-9a36-1d2e3f4a5b01"
SPEC = {
    "devices": [
        {"bdf": "0000:41:00.0", "device": "2331", "driver": "vfio-pci", "group": 17, "numa": 0},
        {"bdf": "0000:43:00.0", "device": "1eb8", "driver": "vfio-pci", "group": 19},
        {"bdf": "0000:43:00.1", "device": "10f8", "class": "040300", "driver": "snd_hda_intel", "group": 19},
        {"bdf": "0000:44:00.0", "device": "20b5", "driver": "vfio-pci", "group": 20},
        {"bdf": "0000:45:00.0", "device": "20b5", "driver": "vfio-pci", "group": 20},
        {"bdf": "0000:46:00.0", "device": "20b5", "driver": "vfio-pci", "group": 21},
        {"bdf": "0000:81:00.0", "device": "2236", "driver": "nvidia", "group": 29},
        {"bdf": "0000:81:00.4", "device": "2236", "driver": "nvidia", "group": 30, "physfn": "0000:81:00.0"},
    ],
    "mdev_types": [{"parent": "0000:81:00.4", "id": "nvidia-592", "name": "NVIDIA A10-4Q", "available": 3}],
    "mdevs": [{"uuid": MDEV1, "parent": "0000:81:00.4", "type": "nvidia-592", "group": 90}],
}
PCI_IDS = os.path.join(gvtest.ROOT, "tests", "fakes", "sysfs", "pci.ids")

# a bind list without bindAtStart: the addresses are for the one-off helper, never bound at start
env = agent.Env(gpus=1, config={"passthrough": {"enabled": True, "pciIds": PCI_IDS,
                                                "bind": ["0000:46:00.0"]}})
root = os.path.join(env.dir, "sys")
spec_file = os.path.join(env.dir, "sysfs.json")
with open(spec_file, "w") as f:
    json.dump(SPEC, f)
subprocess.run([FAKE_SYSFS, "build", root, spec_file], check=True)


# every stand-in line passes through it: several plugins report concurrently
Watch = agent.ResourceWatch


def health(ev):
    return {d["id"]: d["health"] for d in (ev or {}).get("devices", [])}


try:
    w = Watch(env.start_kubelet("py"))
    env.start_agent()
    want = {"nvidia.com/gpu", H100, T4, A100, A10Q}
    w.until(lambda e: want <= w.registered, 30)
    t.ok(want == w.registered, "one registration per resource: nvidia.com/gpu and the KubeVirt names from pci.ids",
         sorted(w.registered))
    t.ok("passthrough: 0000:46:00.0" not in env.agent_log(),
         "bind list without bindAtStart: nothing bound at start", env.agent_log()[-1500:])

    def threads():
        return len(os.listdir("/proc/%d/task" % env.agent.p.pid))
    threads_at_start = threads()

    ev = w.devices(H100)
    t.ok(health(ev) == {"0000_41_00.0": "Healthy"}, "H100 on vfio-pci advertised Healthy (ID: address, ':' as '_')",
         ev)
    ev = w.devices(T4)
    t.ok(health(ev) == {"0000_43_00.0": "Unhealthy"},
         "T4 whose audio function is on snd_hda_intel: Unhealthy (group not viable)", ev)
    ev = w.devices(A10Q)
    t.ok(health(ev) == {MDEV1: "Healthy"}, "mdev advertised by its type name, ID = UUID", ev)

    # a gpuvisor pod waiting for one GPU must not take the VM's Allocate
    env.api.create_pod("sliced", [("main", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})],
                       "v1;node=node1;main=%s:1000:0" % GPUS[0])
    a = w.cmd("allocate", ids=["0000_41_00.0"], resource=H100)
    resp = (a or {}).get("resp", {})
    devs = sorted(d["host_path"] for d in resp.get("devices", []))
    t.ok(a and a["ok"] and devs == ["/dev/vfio/17", "/dev/vfio/vfio"] and
         all(d["permissions"] == "rw" and d["host_path"] == d["container_path"] for d in resp["devices"]),
         "Allocate: /dev/vfio/vfio and /dev/vfio/<group>", a)
    t.ok(envs(a) == {"PCI_RESOURCE_NVIDIA_COM_GH100_H100_PCIE": "0000:41:00.0"} and not resp.get("mounts"),
         "Allocate: KubeVirt's PCI_RESOURCE_NVIDIA_COM_<NAME>=<address>, no interposer", a)
    t.ok(ann(env.api.pod("sliced"), "gpuvisor.io/allocation") is None,
         "the waiting gpuvisor pod was not served by the VM's call", env.api.pod("sliced")["metadata"])

    avail = ["0000_46_00.0", "0000_44_00.0", "0000_45_00.0"]
    p = w.cmd("preferred", available=avail, size=2, resource=A100)
    t.ok(p and p["ok"] and sorted(p["ids"]) == ["0000_44_00.0", "0000_45_00.0"],
         "GetPreferredAllocation: two GPUs asked -> the two-GPU group, not one of each", p)
    p = w.cmd("preferred", available=avail, size=1, resource=A100)
    t.ok(p and p["ok"] and p["ids"] == ["0000_46_00.0"], "one GPU asked -> the single-GPU group", p)
    a = w.cmd("allocate", ids=["0000_44_00.0"], resource=A100)
    t.ok(a and not a["ok"] and "whole group" in a["message"] and "0000:45:00.0" in a["message"],
         "half an IOMMU group refused, naming the other member", a)
    a = w.cmd("allocate", ids=["0000_44_00.0", "0000_45_00.0"], resource=A100)
    t.ok(a and a["ok"] and sorted(d["host_path"] for d in a["resp"]["devices"]) == ["/dev/vfio/20", "/dev/vfio/vfio"]
         and envs(a) == {"PCI_RESOURCE_NVIDIA_COM_GA100_A100_PCIE_80GB": "0000:44:00.0,0000:45:00.0"},
         "the whole group: one node, both addresses", a)
    a = w.cmd("allocate", ids=["0000_43_00.0"], resource=T4)
    t.ok(a and not a["ok"] and "snd_hda_intel" in a["message"], "unhealthy group refused with the reason", a)
    a = w.cmd("allocate", ids=[MDEV1], resource=A10Q)
    t.ok(a and a["ok"] and sorted(d["host_path"] for d in a["resp"]["devices"]) == ["/dev/vfio/90", "/dev/vfio/vfio"]
         and envs(a) == {"MDEV_PCI_RESOURCE_NVIDIA_COM_NVIDIA_A10-4Q": MDEV1},
         "mdev: its group node and MDEV_PCI_RESOURCE_NVIDIA_COM_<TYPE>=<uuid>", a)

    def inventory():
        text = ann(env.api.node("node1"), "gpuvisor.io/node-gpus")
        return json.loads(text) if text else {}
    ok = gvtest.wait_for(lambda: len(inventory().get("wholeDevices", [])) == 6, 10)
    whole = {w["id"]: w for w in inventory().get("wholeDevices", [])}
    t.ok(ok and whole["0000_41_00.0"]["healthy"] and not whole["0000_43_00.0"]["healthy"] and
         whole[MDEV1]["pciBusId"] == "0000:81:00.0" and whole[MDEV1]["kind"] == "mdev",
         "inventory: wholeDevices with health and the mdev's physical GPU", whole)

    # hot removal: the device leaves the bus; the kubelet sees it Unhealthy
    subprocess.run([FAKE_SYSFS, "remove", root, "0000:41:00.0"], check=True)
    ev = w.devices(H100, lambda e: health(e).get("0000_41_00.0") == "Unhealthy", timeout=30)
    t.ok(ev is not None, "hot removal: the removed GPU turns Unhealthy (not dropped)", ev)
    # each rescan (this one included) reuses the one /dev/vfio watcher: no thread per rescan
    t.ok(gvtest.wait_for(lambda: threads() <= threads_at_start, 3),
         "rescans start no more watcher threads", (threads_at_start, threads()))
    a = w.cmd("allocate", ids=["0000_41_00.0"], resource=H100)
    t.ok(a and not a["ok"] and "removed" in a["message"], "a removed GPU is refused", a)
    ok = gvtest.wait_for(lambda: not {w["id"]: w for w in inventory().get("wholeDevices", [])}
                         .get("0000_41_00.0", {"healthy": True})["healthy"], 10)
    t.ok(ok, "inventory: the removed GPU unhealthy", inventory().get("wholeDevices"))
    rc = env.stop_agent()
    t.ok(rc == 0, "the agent stops cleanly (watcher joined; sanitizers quiet)", env.agent_log()[-1500:])

    # one-off helper runs on request; the tree's plain files take the writes, no kernel acts
    def helper(flag, bdf):
        r = subprocess.run([agent.NODE_BIN, "--sys-root", root, flag, bdf], capture_output=True,
                           env=dict(os.environ, LD_LIBRARY_PATH=agent.FAKES,
                                    GV_FAKE_GPU_CONFIG=env.gpu_cfg), timeout=30)
        return r.returncode, r.stderr.decode()

    def text(rel):
        with open(os.path.join(root, rel)) as f:
            return f.read()
    rc, err = helper("--vfio-unbind", "0000:44:00.0")
    # the whole group goes back: 44 then its group-mate 45 (the files keep the last write)
    t.ok(rc == 0 and text("sys/bus/pci/devices/0000:44:00.0/driver_override") == "\n" and
         text("sys/bus/pci/devices/0000:45:00.0/driver_override") == "\n" and
         text("sys/bus/pci/drivers/vfio-pci/unbind") == "0000:45:00.0" and
         text("sys/bus/pci/drivers_probe") == "0000:45:00.0",
         "--vfio-unbind: the group's overrides cleared, unbound from vfio-pci, probed for the host driver",
         err)
    rc, err = helper("--vfio-bind", "0000:43:00.0")
    t.ok(rc == 1 and "0000:43:00.1" in err and "vfio-pci module loaded" in err and
         text("sys/bus/pci/devices/0000:43:00.1/driver_override") == "\n",
         "--vfio-bind: the group's audio function is moved too; a probe that binds nothing is "
         "reported and rolled back", err)
    rc, err = helper("--vfio-bind", "../../../etc")
    t.ok(rc == 1 and "not a PCI address" in err, "--vfio-bind refuses what is not an address", err)
finally:
    env.close()

# ---- an NVML GPU the config marks "passthrough", with the binding helper on ----
# The tree's files are plain files: the writes land but no kernel rebinds, as on
# a host without the vfio-pci module; the helper must notice, roll back and say so.
import shutil  # noqa: E402
env = agent.Env(gpus=1, config={"passthrough": {"enabled": True, "bindAtStart": True, "pciIds": PCI_IDS},
                                "gpus": [{"index": 0, "mode": "passthrough"}]})
root = os.path.join(env.dir, "sys")
shutil.rmtree(os.path.join(root, "sys/bus/pci/devices/0000:3b:00.0"))  # Env's NUMA-only stub
with open(spec_file, "w") as f:
    json.dump({"devices": [{"bdf": "0000:3b:00.0", "device": "20b5", "driver": "nvidia", "group": 40,
                            "numa": 0}]}, f)
subprocess.run([FAKE_SYSFS, "build", root, spec_file], check=True)
try:
    w = Watch(env.start_kubelet("py"))
    env.start_agent()
    ev = w.devices("nvidia.com/gpu")
    t.ok(ev is not None and health(ev) == {}, "a GPU in mode passthrough is not sliced", ev)
    ok = gvtest.wait_for(lambda: "GPU 0 (0000:3b:00.0) not bound" in env.agent_log(), 10)
    log = env.agent_log()
    t.ok(ok and "is the vfio-pci module loaded?" in log,
         "bindAtStart: the helper ran for the GPU and reports the probe that left it unbound",
         log[-2000:])
    with open(os.path.join(root, "sys/bus/pci/devices/0000:3b:00.0/driver_override")) as f:
        override = f.read()
    t.ok(override == "\n", "rolled back: driver_override cleared for the host driver", repr(override))
    ok = gvtest.wait_for(lambda: (json.loads(ann(env.api.node("node1"), "gpuvisor.io/node-gpus") or "{}")
                                  .get("gpus") or [{}])[0].get("mode") == "passthrough", 10)
    t.ok(ok, "inventory: the GPU's mode is passthrough (the scheduler keeps slices off it)")
    # the watcher rescans every 5 s (RESCAN_MS): the GPU is discovered again, not bound again
    time.sleep(5.5)
    log = env.agent_log()
    t.ok(log.count("not bound") == 1, "the helper runs once, not at every rebuild", log.count("not bound"))
finally:
    env.close()
t.done()
