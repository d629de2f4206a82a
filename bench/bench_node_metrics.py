#!/usr/bin/python3
"""gpuvisor-node /metrics benchmark: scrape cost and memory with 110 containers.

Setup (as bench_node_agent.py): the real agent over the fake NVML (8 GPUs,
split 100) and the HTTPS fake API server; 110 pods (the kubelet's default
max-pods) created and served through Allocate, so each has its container
record; a real shared region per container (bench_mkregions, through the shm
API, 250-750 MiB charged each); 8 processes on the fake driver (one per GPU,
without the interposer, 300 MiB each) whose fake /proc/<pid>/cgroup names a
pod, so NVML per-process mapping runs too.  The backstop runs at its default
(report, every 2 s).

Figures: CPU per scrape (sum of the agent's threads' run time from
/proc/PID/task/*/schedstat over 50 back-to-back scrapes), the same as a
share of one core at one scrape per 5 s; measured CPU over 60 s of real
5-second scrapes (backstop included); exposition size; VmRSS idle after the
scrapes against the 5 MiB budget.
"""
import os
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "node"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fakes", "kubelet"))
import agent  # noqa: E402
import bench_node_agent as bna  # noqa: E402
import gvtest  # noqa: E402

PODS = 110
SCRAPES = 50
PERIOD_S = 5


def run_ns(pid):
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        return r.read()


def main():
    if not agent.have_fake_nvml():
        print("SKIP: fake libnvidia-ml.so.1 not built")
        return 0
    import kubelet_py
    import grpc
    pb, pbg = kubelet_py.pb, kubelet_py.pbg
    env = agent.Env(gpus=0, config={"deviceSplitCount": 100}, tls=True)
    probes = []
    try:
        proc_root = os.path.join(env.dir, "proc")
        os.makedirs(proc_root)
        state_file = os.path.join(env.dir, "fake.state")
        with open(env.gpu_cfg, "w") as f:
            for i, u in enumerate(bna.GPUS):
                f.write('name="NVIDIA H100 80GB HBM3" uuid=%s memory=80g pci=0:%x:0\n' % (u, 0x10 + i))
        env.start_agent(extra=["--heartbeat-seconds", "30", "--gc-seconds", "5", "--gc-grace-ms", "1000",
                               "--health-probe-ms", "10000", "--health-recover-ms", "60000",
                               "--metrics-listen", "127.0.0.1:0", "--proc-root", proc_root],
                        env_extra={"GPUVISOR_LOG_LEVEL": "info", "GV_FAKE_GPU_STATE": state_file})
        sock = os.path.join(env.plugin_dir, "gpuvisor.sock")
        gvtest.wait_for(lambda: os.path.exists(sock), 10)
        line = gvtest.wait_for(lambda: [ln for ln in env.agent_log().splitlines() if "metrics: listening" in ln], 10)
        port = int(line[0].split("(port ")[1].split(")")[0])
        pid = env.agent.p.pid
        bna.create_pods(env, 0, PODS)
        ch = grpc.insecure_channel("unix://" + sock)
        stub = pbg.DevicePluginStub(ch)
        stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
        time.sleep(2)
        bna.allocate(stub, pb, 0, PODS)
        ch.close()
        bna.wait_recorded(env, 0, PODS)
        specs, uids = [], []
        for i in range(PODS):
            _, pod = env.api.req("GET", "/api/v1/namespaces/default/pods/p%03d" % i)
            uid = pod["metadata"]["uid"]
            uids.append(uid)
            specs.append("%s/containers/%s/main/shared.cache:%s:%d:%d" % (
                env.state, uid, bna.GPUS[i % len(bna.GPUS)], 1000 << 20, (250 + (i % 3) * 250) << 20))
        subprocess.run([os.path.join(gvtest.BUILD, "bench", "bench_mkregions")] + specs, check=True)
        penv = dict(os.environ, LD_LIBRARY_PATH=agent.FAKES, GV_FAKE_GPU_CONFIG=env.gpu_cfg,
                    GV_FAKE_GPU_STATE=state_file)
        penv.pop("LD_PRELOAD", None)
        for g in range(len(bna.GPUS)):
            p = gvtest.Proc([os.path.join(gvtest.BUILD, "tests", "gv_probe"), "init", "alloc:300m:OK",
                             "sleep:600000"], env=dict(penv, CUDA_VISIBLE_DEVICES=str(g)), stdin=False)
            probes.append(p)
            d = os.path.join(proc_root, str(p.p.pid))
            os.makedirs(d)
            with open(os.path.join(d, "cgroup"), "w") as f:
                f.write("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/"
                        "cri-containerd-%064x.scope\n" % (uids[g].replace("-", "_"), g + 1))
            p.expect(lambda ln: ln.startswith("ok 2") or ln.startswith("not ok"), 20)
        body = scrape(port)
        text = body.decode()
        n_ctr = sum(1 for ln in text.splitlines()
                    if ln.startswith("gpuvisor_container_gpu_memory_used_bytes{"))
        n_nvml = sum(1 for ln in text.splitlines()
                     if ln.startswith("gpuvisor_container_gpu_memory_nvml_bytes{") and not ln.endswith(" 0"))
        print("containers_with_regions %d (series with region usage: %d; mapped by NVML: %d)"
              % (PODS, n_ctr, n_nvml))
        print("exposition_bytes %d (%d lines)" % (len(body), text.count("\n")))
        time.sleep(1)
        perf = None
        if os.environ.get("BENCH_PERF"):  # a profile of the scrapes: perf report -i <file>
            perf = subprocess.Popen(["perf", "record", "-g", "-o", os.environ["BENCH_PERF"], "-p", str(pid)])
            time.sleep(1)
        c0, t0 = run_ns(pid), time.perf_counter()
        for _ in range(SCRAPES):
            scrape(port)
        c1, t1 = run_ns(pid), time.perf_counter()
        if perf:
            perf.send_signal(2)
            perf.wait()
        per = (c1 - c0) / SCRAPES / 1e9
        print("scrape_cpu_ms %.3f (mean of %d back-to-back scrapes, all agent threads; backstop included)"
              % (per * 1000, SCRAPES))
        print("scrape_wall_ms %.3f" % ((t1 - t0) / SCRAPES * 1000))
        print("scrape_every_5s_core_percent %.3f (scrape CPU / 5 s)" % (per / PERIOD_S * 100))
        # real 5-second scrapes for a minute: everything the agent did meanwhile
        c0, t0 = run_ns(pid), time.time()
        for _ in range(12):
            scrape(port)
            time.sleep(PERIOD_S)
        c1, t1 = run_ns(pid), time.time()
        pct = (c1 - c0) / 1e9 / (t1 - t0) * 100
        print("measured_core_percent_5s_scrapes %.3f (over %.0f s: scrapes, backstop every 2 s, informer, "
              "heartbeat, GC)" % (pct, t1 - t0))
        print("cpu_target_percent 1 %s" % ("met" if pct < 1 else "MISSED"))
        with open("/proc/loadavg") as f:
            print("machine_loadavg_1min %s" % f.read().split()[0])
        time.sleep(6)  # a GC pass (malloc_trim) after the last scrape
        bna.report_memory(pid, "110_pods_regions_scraped",
                          "%d pods served with regions, scraped every 5 s, idle after a GC pass" % PODS)
    finally:
        for p in probes:
            p.stop()
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
