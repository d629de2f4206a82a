#!/usr/bin/python3
"""gpuvisor-node benchmark: Allocate latency with 500 pods on the node, idle
RSS and idle CPU.  Run by bench/bench_node_agent.sh (make bench).

Setup: the real agent over the fake NVML (8 GPUs x split 100) and the fake
API server; 500 pending pods, each with a gpuvisor assignment for one
container, all in the agent's informer cache.  A grpcio client plays the
kubelet and sends one Allocate per pod (one container each, like the device
manager), timing each call end to end (gRPC, pod lookup in the cache,
limits file, annotation PATCH to the API server).
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "node"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fakes", "kubelet"))
import agent  # noqa: E402
import gvtest  # noqa: E402

PODS = 500
GPUS = ["GPU-bbbbbbbb-0000-4000-8000-%012d" % i for i in range(8)]


def log(msg):
    sys.stderr.write(msg + "\n")


def rss_kib(pid, key="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith(key + ":"):
                return int(ln.split()[1])
    return -1


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])  # utime + stime (fields 14, 15)


def main():
    if not agent.have_fake_nvml():
        print("SKIP: fake libnvidia-ml.so.1 not built")
        return 0
    import kubelet_py  # compiles the proto
    import grpc
    pb, pbg = kubelet_py.pb, kubelet_py.pbg
    env = agent.Env(gpus=0, config={"deviceSplitCount": 100})
    try:
        with open(env.gpu_cfg, "w") as f:
            for i, u in enumerate(GPUS):
                f.write('name="NVIDIA H100 80GB HBM3" uuid=%s memory=80g pci=0:%x:0\n' % (u, 0x10 + i))
        # heartbeat at its default; GC every 25 s so the last figure shows memory after a pass
        env.start_agent(extra=["--heartbeat-seconds", "30", "--gc-seconds", "25", "--gc-grace-ms", "1000",
                               "--health-probe-ms", "10000", "--health-recover-ms", "60000"],
                        env_extra={"GPUVISOR_LOG_LEVEL": os.environ.get("BENCH_LOG", "warn")})
        sock = os.path.join(env.plugin_dir, "gpuvisor.sock")
        gvtest.wait_for(lambda: os.path.exists(sock), 10)
        log("creating %d pods" % PODS)
        for i in range(PODS):
            g = GPUS[i % len(GPUS)]
            env.api.create_pod("p%03d" % i, [("main", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})],
                               "v1;node=node1;main=%s:1000:100" % g)
        ch = grpc.insecure_channel("unix://" + sock)
        stub = pbg.DevicePluginStub(ch)
        stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
        time.sleep(2)  # let the informer catch up with the 500 creations
        lat = []
        for i in range(PODS):
            req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
                devices_ids=["%s::%d" % (GPUS[i % len(GPUS)], i % 100)])])
            t0 = time.perf_counter()
            r = stub.Allocate(req, timeout=10)
            lat.append((time.perf_counter() - t0) * 1000)  # includes the Python client
            if r.container_responses[0].envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m":
                raise SystemExit("wrong answer for pod %d" % i)
        ch.close()
        lat.sort()
        p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
        print("allocate_pods_on_node %d" % PODS)
        print("allocate_ms_p50 %.3f" % p(0.50))
        print("allocate_ms_p99 %.3f" % p(0.99))
        print("allocate_ms_max %.3f" % lat[-1])
        print("allocate_ms_mean %.3f" % statistics.mean(lat))
        with open("/proc/loadavg") as f:
            print("machine_loadavg_1min %s (other jobs share the cores: tail latency follows it)"
                  % f.read().split()[0])
        print("allocate_target_p99_ms 5 %s" % ("met" if p(0.99) <= 5 else "MISSED"))
        # idle: no kubelet stream, informer and heartbeat running
        pid = env.agent.p.pid
        time.sleep(3)
        t0, c0 = time.time(), cpu_ticks(pid)
        time.sleep(20)
        t1, c1 = time.time(), cpu_ticks(pid)
        hz = os.sysconf("SC_CLK_TCK")
        cpu = (c1 - c0) / hz / (t1 - t0) * 100
        rss, anon, fil = rss_kib(pid), rss_kib(pid, "RssAnon"), rss_kib(pid, "RssFile")
        print("idle_rss_kib %d (with %d pods cached): anonymous %d, file-backed (shared libraries) %d"
              % (rss, PODS, anon, fil))
        print("idle_rss_target_kib 5120 total %s, anonymous %s"
              % ("met" if rss <= 5120 else "MISSED", "met" if anon <= 5120 else "MISSED"))
        print("idle_cpu_percent %.3f (over %.0f s)" % (cpu, t1 - t0))
        # the same agent with no pods: the floor
        for i in range(PODS):
            env.api.delete_pod("p%03d" % i)
        time.sleep(27)  # a GC pass (directories, per-pod state, malloc_trim)
        print("idle_rss_kib_after_pods_deleted_and_gc %d (anonymous %d)" % (rss_kib(pid), rss_kib(pid, "RssAnon")))
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
