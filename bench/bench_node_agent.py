#!/usr/bin/python3
"""gpuvisor-node benchmark: Allocate latency with 500 pods on the node, idle
memory and idle CPU.  Run by bench/bench_node_agent.sh (make bench).

Setup: the real agent over the fake NVML (8 GPUs x split 100) and the fake
API server over HTTPS (verified TLS, CA and bearer token from a kubeconfig:
what the agent does in a cluster, so the TLS library's pages are counted).  Every pod on the node has a gpuvisor assignment for one
container (the most the agent caches per pod: a node running only GPU pods).

Allocate: 500 pending pods, all in the agent's informer cache.  A grpcio
client plays the kubelet and sends one Allocate per pod (one container each,
like the device manager), timing each call end to end (gRPC, pod lookup in
the cache, limits file, annotation PATCH to the API server).

Memory, at four points, each once the agent has been idle past a GC pass:
just started (no pods), 110 pods on the node and served (the kubelet's
default max-pods), the 500 pods of the Allocate run served, and after those
were deleted and GC ran.  Also, without a target (the agent is not idle
then), with the 500 pods cached before the first Allocate.  For each: VmRSS, RssAnon, RssFile
(/proc/PID/status), Pss (/proc/PID/smaps_rollup: shared library pages
divided among the processes mapping them), where the anonymous pages are
(/proc/PID/smaps), and VmRSS against the 5 MiB target.  BENCH_SMAPS=1 also
prints every mapping with anonymous pages on stderr.
"""
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "node"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fakes", "kubelet"))
import agent  # noqa: E402
import gvtest  # noqa: E402

PODS = 500
NODE_MAX_PODS = 110  # kubelet --max-pods default
GPUS = ["GPU-bbbbbbbb-0000-4000-8000-%012d" % i for i in range(8)]
RSS_TARGET_KIB = 5120
ARENA_ALIGN = 64 << 20  # glibc thread-arena heaps are aligned to HEAP_MAX_SIZE (64 MiB)


def log(msg):
    sys.stderr.write(msg + "\n")


def proc_status(pid):
    """/proc/PID/status as {key: first number}, read once so that VmRSS,
    RssAnon and RssFile come from the same instant."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            key, _, rest = ln.partition(":")
            v = rest.split()
            if v and v[0].isdigit():
                out[key] = int(v[0])
    return out


def pss_kib(pid):
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for ln in f:
            if ln.startswith("Pss:"):
                return int(ln.split()[1])
    return -1


def thread_sps(pid):
    """Stack pointers of the threads blocked in a system call."""
    sps = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/syscall" % (pid, tid)) as f:
                parts = f.read().split()
        except OSError:
            continue
        if len(parts) >= 9:
            sps.append(int(parts[7], 16))
    return sps


def anon_breakdown(pid, dump=False):
    """Anonymous KiB by kind: heap (main malloc arena), thread malloc arenas,
    thread stacks, main stack, writable data of the binary and libraries
    (relocations, .data, .bss), other anonymous mappings."""
    sps = thread_sps(pid)
    kinds = collections.Counter()
    kind = None
    with open("/proc/%d/smaps" % pid) as f:
        for ln in f:
            head = ln.split()
            if "-" in head[0] and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                name = head[5] if len(head) > 5 else ""
                if name == "[heap]":
                    kind = "heap"
                elif name == "[stack]":
                    kind = "main_stack"
                elif name.startswith("/"):
                    kind = "library_data"
                elif any(lo <= sp < hi for sp in sps):
                    kind = "thread_stacks"
                elif lo % ARENA_ALIGN == 0:
                    kind = "thread_arenas"
                else:
                    kind = "other"
                where = "%s %s" % (head[0], name)
            elif head[0] == "Anonymous:" and int(head[1]):
                kinds[kind] += int(head[1])
                if dump:
                    log("  %6s KiB %-13s %s" % (head[1], kind, where))
    return kinds


def report_memory(pid, point, what, target=True):
    st = proc_status(pid)
    rss, anon, fil = st.get("VmRSS", -1), st.get("RssAnon", -1), st.get("RssFile", -1)
    if os.environ.get("BENCH_SMAPS"):
        log("anonymous mappings at %s:" % point)
    kinds = anon_breakdown(pid, bool(os.environ.get("BENCH_SMAPS")))
    print("idle_rss_kib_%s %d (%s): anonymous %d, file-backed %d; pss %d"
          % (point, rss, what, anon, fil, pss_kib(pid)))
    print("idle_anon_kib_%s heap %d, thread_arenas %d, thread_stacks %d (%d threads), main_stack %d, "
          "library_data %d, other %d"
          % (point, kinds["heap"], kinds["thread_arenas"], kinds["thread_stacks"],
             st.get("Threads", -1), kinds["main_stack"], kinds["library_data"], kinds["other"]))
    if target:
        print("idle_rss_target_kib_%s %d total %s" % (point, RSS_TARGET_KIB,
                                                      "met" if rss <= RSS_TARGET_KIB else "MISSED"))


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])  # utime + stime (fields 14, 15)


def start(env, gc_seconds):
    with open(env.gpu_cfg, "w") as f:
        for i, u in enumerate(GPUS):
            f.write('name="NVIDIA H100 80GB HBM3" uuid=%s memory=80g pci=0:%x:0\n' % (u, 0x10 + i))
    # heartbeat at its default; GC often enough that each memory figure follows a pass
    env.start_agent(extra=["--heartbeat-seconds", "30", "--gc-seconds", str(gc_seconds), "--gc-grace-ms", "1000",
                           "--health-probe-ms", "10000", "--health-recover-ms", "60000"],
                    env_extra={"GPUVISOR_LOG_LEVEL": os.environ.get("BENCH_LOG", "warn")})
    sock = os.path.join(env.plugin_dir, "gpuvisor.sock")
    gvtest.wait_for(lambda: os.path.exists(sock), 10)
    return sock


def create_pods(env, first, count):
    for i in range(first, first + count):
        env.api.create_pod("p%03d" % i, [("main", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})],
                           "v1;node=node1;main=%s:1000:100" % GPUS[i % len(GPUS)])


def allocate(stub, pb, first, count):
    """One Allocate per pod; latencies in ms (the Python client included)."""
    lat = []
    for i in range(first, first + count):
        # a device ID no other live container holds, as the kubelet guarantees
        # (a repeated ID would be a repeated request: answered from its record)
        req = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
            devices_ids=["%s::%d" % (GPUS[i % len(GPUS)], (i // len(GPUS)) % 100)])])
        t0 = time.perf_counter()
        r = stub.Allocate(req, timeout=10)
        lat.append((time.perf_counter() - t0) * 1000)
        if r.container_responses[0].envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m":
            raise SystemExit("wrong answer for pod %d" % i)
    return lat


def wait_recorded(env, first, count):
    """Until the agent's progress annotations reached the API server."""
    def done():
        for i in range(first, first + count):
            _, pod = env.api.req("GET", "/api/v1/namespaces/default/pods/p%03d" % i)
            if pod["metadata"].get("annotations", {}).get("gpuvisor.io/allocation") != "success":
                return False
        return True
    gvtest.wait_for(done, 30)


def small_node(kubelet_py, grpc):
    """Memory just after start and with a full node of 110 served pods."""
    pb, pbg = kubelet_py.pb, kubelet_py.pbg
    env = agent.Env(gpus=0, config={"deviceSplitCount": 100}, tls=True)
    try:
        sock = start(env, 5)
        pid = env.agent.p.pid
        time.sleep(6)
        report_memory(pid, "start", "just started, no pods")
        create_pods(env, 0, NODE_MAX_PODS)
        ch = grpc.insecure_channel("unix://" + sock)
        stub = pbg.DevicePluginStub(ch)
        stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
        allocate(stub, pb, 0, NODE_MAX_PODS)
        ch.close()
        wait_recorded(env, 0, NODE_MAX_PODS)
        time.sleep(6)
        report_memory(pid, "%d_pods" % NODE_MAX_PODS, "%d pods cached and served" % NODE_MAX_PODS)
    finally:
        env.close()


def main():
    if not agent.have_fake_nvml():
        print("SKIP: fake libnvidia-ml.so.1 not built")
        return 0
    import kubelet_py  # compiles the proto
    import grpc
    pb, pbg = kubelet_py.pb, kubelet_py.pbg
    small_node(kubelet_py, grpc)
    env = agent.Env(gpus=0, config={"deviceSplitCount": 100}, tls=True)
    try:
        sock = start(env, 25)
        log("creating %d pods" % PODS)
        create_pods(env, 0, PODS)
        ch = grpc.insecure_channel("unix://" + sock)
        stub = pbg.DevicePluginStub(ch)
        stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
        time.sleep(2)  # let the informer catch up with the 500 creations
        # Not idle (500 pods wait for admission at once), so no target: what
        # the cache costs while every pod is still in its pending form.
        report_memory(env.agent.p.pid, "%d_pods_pending" % PODS,
                      "%d pods cached, none served yet: not idle, no target" % PODS, target=False)
        lat = allocate(stub, pb, 0, PODS)
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
        print("idle_cpu_percent %.3f (over %.0f s, %d pods cached)" % (cpu, t1 - t0, PODS))
        # 23 s after the Allocate run: a GC pass (25 s period) has run since the agent started
        report_memory(pid, "%d_pods" % PODS, "%d pods cached and served" % PODS)
        for i in range(PODS):
            env.api.delete_pod("p%03d" % i)
        time.sleep(27)  # a GC pass (directories, per-pod state, malloc_trim)
        report_memory(pid, "after_pods_deleted_and_gc", "the %d pods deleted, a GC pass since" % PODS)
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
