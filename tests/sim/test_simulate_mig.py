#!/usr/bin/python3
"""gpuvisor simulate --from-cluster with MIG (docs/simulate.md, "Whole
devices"): nodes whose gpuvisor.io/node-gpus inventory lists MIG devices,
pods asking nvidia.com/mig-<profile>, placed by count as the scheduler's
extender does, and reported.  Under migStrategy single the node's MIG
devices are GPU entries (mode mig, exclusive): pods asking nvidia.com/gpu
are placed on them as GPU shares; that node comes from the real node agent
over the fake NVML (stand-in), as --from-cluster would read it."""
import json
import os
import subprocess
import sys
import tempfile

BIN = os.path.join(os.environ.get("BUILD", "build"), "bin", "gpuvisor")
n = 0


def ok(cond, what, detail=""):
    global n
    n += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", n, what))
    if not cond:
        for ln in str(detail).splitlines()[-30:]:
            print("# " + ln)


def inv(name, gpus, whole):
    return {"version": 1, "driverVersion": "550.54.15", "cudaVersion": "12.4",
            "gpus": [{"uuid": "GPU-%s-%d" % (name, i), "index": i, "model": "NVIDIA A100-SXM4-40GB",
                      "memoryMiB": 40960, "memoryScaling": 1.0, "cores": 100, "split": 10, "numa": 0,
                      "healthy": True, "mode": "vgpu", "mig": mig, "pciBusId": "00000000:%02X:00.0" % (0x81 + i)}
                     for i, mig in enumerate(gpus)],
            "wholeDevices": [{"kind": "mig", "resource": "nvidia.com/mig-" + p, "id": "MIG-%s-%d" % (name, k),
                              "pciBusId": "00000000:81:00.0", "iommuGroup": "", "healthy": h,
                              "gpuUuid": "GPU-%s-0" % name, "profile": p, "memoryMiB": 4864}
                             for k, (p, h) in enumerate(whole)]}


def node(name, gpus, whole):
    return {"kind": "Node", "metadata": {"name": name, "annotations": {"gpuvisor.io/node-gpus": json.dumps(inv(name, gpus, whole))}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi"}}}


def pod(name, limits, phase="Pending"):
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ml", "uid": "u-" + name},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}, "status": {"phase": phase}}


def run(items, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=os.environ.get("GV_TEST_TMP"), delete=False) as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)
    try:
        r = subprocess.run([BIN, "simulate", "--from-cluster", f.name] + list(args), capture_output=True, text=True,
                           timeout=300)
        return r.returncode, r.stdout, r.stderr
    finally:
        os.unlink(f.name)


def whole_rows(out):
    """{policy: (arrivals, placed, failed)} from the whole-device section."""
    rows, on = {}, False
    for ln in out.splitlines():
        if ln.startswith("whole devices ("):
            on = True
            continue
        if on and ln.strip() == "":
            break
        if on and not ln.startswith("policy"):
            f = ln.split()
            rows[f[0]] = tuple(float(x) for x in f[1:4])
    return rows


if not os.path.exists(BIN):
    print("1..0 # SKIP gpuvisor not built")
    sys.exit(0)

# a: GPU 0 MIG (3g.20gb + 2x 1g.5gb, one unhealthy), GPU 1 whole; b: GPU 0 MIG (2x 1g.5gb)
nodes = [node("a", [True, False], [("3g.20gb", True), ("1g.5gb", True), ("1g.5gb", False)]),
         node("b", [True], [("1g.5gb", True), ("1g.5gb", True)])]
one_g = [pod("s%d" % i, {"nvidia.com/mig-1g.5gb": "1"}) for i in range(4)]
migs_only = nodes + one_g + [pod("big", {"nvidia.com/mig-3g.20gb": "1"}), pod("huge", {"nvidia.com/mig-7g.40gb": "1"}),
                             pod("two", {"nvidia.com/mig-1g.5gb": "2"})]
rc, out, err = run(migs_only, "--seeds", "1-3")
rows = whole_rows(out)
# 3 healthy 1g.5gb: of the 1g pods (4 asking 1, one asking 2) never more than 3 devices go out;
# big fits (one 3g), huge never (no 7g anywhere)
ok(rc == 0 and "cluster dump" in out and "(2 nodes, 3 GPUs, 7 pods)" in out,
   "a MIG-only dump replays (every pod arrives once: no GPU-share workload to inflate)", out + err)
ok(set(rows) == {"binpack", "spread", "bestfit", "fgd"} and all(r[0] == 7 for r in rows.values()),
   "the report lists the whole-device pods per policy: 7 arrivals each", rows)
ok(len(rows) == 4 and all(r[1] + r[2] == 7 and 3 <= r[1] <= 4 for r in rows.values()),
   "placed by count: 1 3g.20gb + at most the 3 healthy 1g.5gb (unhealthy and absent 7g never)", rows)
ok("offline reference" not in out, "no GPU-share reference for a whole-device-only workload", out)

# mixed with a GPU-share workload: shares go to the non-MIG GPU only, MIG pods by count
shares = [pod("infer%d" % i, {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50", "nvidia.com/gpumem": "1000"},
              "Running") for i in range(2)]
rc, out, err = run(nodes + shares + one_g, "--seeds", "1-2", "--policy", "fgd")
rows = whole_rows(out)
ok(rc == 0 and "fgd" in rows and rows["fgd"][1] <= 3 and rows["fgd"][0] == rows["fgd"][1] + rows["fgd"][2]
   and rows["fgd"][0] >= 4, "with GPU shares inflating the arrivals, MIG pods never exceed the 3 healthy devices", out + err)
# the MIG-enabled GPUs are not capacity for shares: at most 100 % of GPU 1 (1 of 3 GPUs) can be allocated
alloc = [ln for ln in out.splitlines() if ln.startswith("fgd ")]
ok(alloc and float(alloc[0].split()[1]) <= 100.0 / 3 + 0.01, "slices never land on MIG-enabled GPUs", alloc)
# a pod asking slices and MIG devices: the scheduler refuses it, so the replay never places it
rc, out, err = run(nodes + [pod("mixed", {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.5gb": "1"})], "--seed", "1")
rows = whole_rows(out)
ok(rc == 0 and rows.get("fgd", (0, 0, 0))[2] >= 1 and rows["fgd"][2] == rows["fgd"][0] and rows["fgd"][1] == 0,
   "a pod asking both slices and MIG devices is reported failed", out + err)


def single_strategy_node():
    """The Node object gpuvisor-node publishes with migStrategy single over the
    fake NVML (GPU 0: 2x 3g.20gb, GPU 1: 1x 3g.20gb); None when not built."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "node"))
    import agent
    import gvtest
    if not agent.have_fake_nvml() or not os.path.exists(agent.NODE_BIN):
        return None
    env = agent.Env()
    try:
        env.start_mig_agent("0 3g.20gb,3g.20gb\n1 3g.20gb\n", {"mode": "exclusive", "migStrategy": "single"})
        env.start_kubelet("py")

        def published():
            nd = env.api.node(env.node_name)
            text = (nd["metadata"].get("annotations") or {}).get("gpuvisor.io/node-gpus")
            # the inventory once it lists every MIG device the fake shows (3), whatever its form
            i = json.loads(text) if text else {}
            return nd if len([g for g in i.get("gpus", []) if g["uuid"].startswith("MIG-")]) == 3 or \
                len(i.get("wholeDevices", [])) == 3 else None
        nd = gvtest.wait_for(published, 30) or env.api.node(env.node_name)
        nd["status"] = {"allocatable": {"cpu": "64", "memory": "512Gi"}}
        return nd
    finally:
        env.close()


single = single_strategy_node()
if single is None:
    print("ok %d - migStrategy single from the agent # SKIP fake NVML or gpuvisor-node not built" % (n + 1))
    n += 1
else:
    # 3 MIG devices; pods ask 1 or 2 of them as nvidia.com/gpu (the GPU-share workload)
    work = [single] + [pod("g%d" % i, {"nvidia.com/gpu": "1"}) for i in range(2)] + [pod("g2x", {"nvidia.com/gpu": "2"})]
    rc, out, err = run(work, "--seeds", "1-2")
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines()
            if ln.split() and ln.split()[0] in ("binpack", "spread", "bestfit", "fgd") and "+-" in ln}
    ok(rc == 0 and "(1 nodes, 3 GPUs, 3 pods)" in out and "whole devices (" not in out,
       "single (agent over the fake NVML): the node's 3 MIG devices are 3 GPUs, no whole devices", out + err)
    # columns: policy, then mean +- sd for 80 90 100 ...: allocated % at 100 % arrived is field 7
    # 1- and 2-device pods in the seed's order: at least 2 of the 3 devices go out (a 2-device pod
    # may meet a single free one), never more than there are
    ok(len(rows) == 4 and all(66.6 <= float(r[7]) <= 100.0 for r in rows.values()),
       "single: nvidia.com/gpu pods (1 and 2 devices) are placed on the MIG devices (>= 2 of 3 allocated at "
       "100 % arrived, each policy)", out + err)
print("1..%d" % n)
