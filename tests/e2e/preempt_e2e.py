"""make e2e's preemption checks (issue #26; docs/scheduler.md, "Preemption"):
GPU-aware preemption through the real kube-scheduler 1.20 (its preemptVerb,
as deploy/ configures it) and the real kubelet on node vm (two fake 16 GiB
GPUs).  Called by run_e2e.py with the suite's helpers (module `e`); each
check prints one PASS/FAIL line with its figure.

  a. low-priority pods fill the node's GPUs, a quarter of a GPU each; a
     high-priority pod asking a whole GPU evicts exactly the pods of one
     GPU (none of the other) and then runs on that GPU;
  b. a burst of mixed-priority pods on a node full of low-priority pods
     (and more waiting): no over-commit at any sampled moment (terminating
     victims counted: their processes still hold the GPU), every
     high-priority pod running, and no low-priority pod scheduled while a
     high-priority one is pending;
  c. the Events on preemptor and victims name the GPU and what was freed,
     and the extender's and kube-scheduler's preemption metrics count what
     happened (kube-scheduler really calls the preempt verb).

Victims get terminationGracePeriodSeconds 2 and run `sleep`, which ignores
SIGTERM as pid 1: every victim stays terminating for 2 s, so the
preemptor is filtered again while its victims still hold the GPU.
"""
import json
import re
import threading
import time
import urllib.request

LOW, HIGH = 100, 1000
NSP = "e2e-preempt"
GRACE = 2


def priority_classes(api):
    for name, value in (("gv-e2e-low", LOW), ("gv-e2e-high", HIGH)):
        st, out = api.call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses",
                           {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                            "metadata": {"name": name}, "value": value,
                            "description": "make e2e preemption checks"})
        if st >= 300 and st != 409:
            raise RuntimeError("PriorityClass %s: %d %s" % (name, st, str(out)[:200]))


def pod(e, name, prio, limits):
    """A pod on the agent's node (the real kubelet) with a PriorityClass."""
    p = e.gpu_pod(name, NSP, 1)
    c = p["spec"]["containers"][0]
    c["resources"]["limits"] = dict({"nvidia.com/gpu": "1"}, **limits)
    p["spec"]["priorityClassName"] = "gv-e2e-high" if prio == HIGH else "gv-e2e-low"
    p["spec"]["terminationGracePeriodSeconds"] = GRACE
    p["spec"]["nodeSelector"] = {"kubernetes.io/hostname": e.NODE}
    return p


def gpu_of(p):
    """The GPUs a pod's assignment names."""
    a = (p["metadata"].get("annotations") or {}).get("gpuvisor.io/assignment", "")
    return sorted(set(re.findall(r"(GPU-[A-Za-z0-9._-]+):\d+", a)))


def pods(api, prefix=""):
    return [p for p in api.ok("GET", "/api/v1/namespaces/%s/pods" % NSP)["items"]
            if p["metadata"]["name"].startswith(prefix)]


def running(p):
    return p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")


def clear(api, e):
    for p in pods(api):
        api.call("DELETE", "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0"
                 % (NSP, p["metadata"]["name"]))
    e.wait("preempt pods gone", lambda: not pods(api), 120, 0.5)


def create(api, bodies):
    """Creates the pods at once; each POST's return time (the clock the API
    server's and kube-scheduler's timestamps use: same machine)."""
    out = {}

    def one(b):
        api.ok("POST", "/api/v1/namespaces/%s/pods" % NSP, b)
        out[b["metadata"]["name"]] = time.time()
    api.parallel(one, bodies)
    return out


class Sampler:
    """Per-GPU MiB of every pod bound to the node, terminating ones too
    (their containers may still hold the GPU), sampled every 0.3 s: the
    worst sample over the run."""

    def __init__(self, api, cap):
        self.api, self.cap, self.worst, self.samples = api, cap, (0, None), 0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.wait(0.3):
            try:
                use = {}
                for p in pods(self.api):
                    a = (p["metadata"].get("annotations") or {}).get("gpuvisor.io/assignment", "")
                    if not p["spec"].get("nodeName") or p["status"].get("phase") in (
                            "Succeeded", "Failed"):
                        continue
                    for uuid, mib in re.findall(r"(GPU-[A-Za-z0-9._-]+):(\d+)", a):
                        use[uuid] = use.get(uuid, 0) + int(mib)
                self.samples += 1
                for u, m in use.items():
                    if m > self.worst[0]:
                        self.worst = (m, u)
            except Exception:
                pass

    def done(self):
        self.stop.set()
        self.t.join()
        return self.worst


def events(api):
    """Core v1 Events of the namespace (the extender's; kube-scheduler's
    events.k8s.io ones are listed there too)."""
    return api.ok("GET", "/api/v1/namespaces/%s/events" % NSP)["items"]


def sched_times(api):
    """pod name -> kube-scheduler's Scheduled event time (events.k8s.io
    eventTime, microseconds), as epoch seconds."""
    out = {}
    for ev in api.ok("GET", "/apis/events.k8s.io/v1/namespaces/%s/events" % NSP)["items"]:
        if ev.get("reason") != "Scheduled" or not ev.get("eventTime"):
            continue
        t = ev["eventTime"]  # 2026-11-28T11:50:01.123456Z
        m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", t)
        if not m:
            continue
        sec = time.mktime(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) - time.timezone
        name = (ev.get("regarding") or {}).get("name", "")
        out[name] = min(out.get(name, 1e18), sec + float(m.group(2) or 0))
    return out


def metrics(url, log):
    """Prometheus text -> {"name{labels}": value}; {} when unreachable (the
    check then fails with its figures)."""
    out = {}
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
    except Exception as ex:
        log("metrics %s: %r" % (url, ex))
        return out
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def scheduler_metrics(api, e):
    """(extender's /metrics on the health listener, kube-scheduler's
    /metrics on its 1.20 insecure port), read from the host over the pod
    network."""
    sp = [p for p in api.ok("GET", "/api/v1/namespaces/%s/pods?labelSelector=app.kubernetes.io"
                                   "%%2Fname%%3Dgpuvisor-scheduler" % e.NS)["items"]
          if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    ip = sp[0]["status"]["podIP"]
    return (metrics("http://%s:8081/metrics" % ip, e.k8s.log),
            metrics("http://%s:10251/metrics" % ip, e.k8s.log))


def counter(m, name, **labels):
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    return sum(v for k, v in m.items()
               if k.split("{")[0] == name and (not want or want in k.replace(", ", ",")))


def run(api, e):
    """The checks; an exception fails them (one line) without ending the
    suite, and the namespace and PriorityClasses go in any case."""
    try:
        checks(api, e)
    except Exception as ex:
        e.check("preemption checks", False, "aborted: %s" % str(ex)[:600])
    finally:
        try:
            clear(api, e)
        except Exception:
            pass
        api.call("DELETE", "/api/v1/namespaces/" + NSP)
        for name in ("gv-e2e-low", "gv-e2e-high"):
            api.call("DELETE", "/apis/scheduling.k8s.io/v1/priorityclasses/" + name)


def checks(api, e):
    inv = json.loads((api.ok("GET", "/api/v1/nodes/" + e.NODE)["metadata"].get("annotations")
                      or {}).get("gpuvisor.io/node-gpus", "{}"))
    gpus = {g["uuid"]: g["memoryMiB"] for g in inv.get("gpus", [])}
    cap = min(gpus.values()) if gpus else 0
    quarter = cap // 4
    priority_classes(api)
    api.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": NSP}})
    e.k8s.wait_sa(api, NSP)
    m0 = scheduler_metrics(api, e)

    # -- a. one whole-GPU high-priority pod evicts exactly one GPU's pods
    lows = ["low-%d" % i for i in range(4 * len(gpus))]
    create(api, [pod(e, n, LOW, {"nvidia.com/gpumem": str(quarter)}) for n in lows])
    e.wait("low pods running", lambda: sum(running(p) for p in pods(api, "low-")) == len(lows),
           120, 0.5)
    before = {p["metadata"]["name"]: (p["metadata"]["uid"], gpu_of(p)) for p in pods(api, "low-")}
    create(api, [pod(e, "whole", HIGH, {"nvidia.com/gpumem-percentage": "100",
                                        "nvidia.com/gpucores": "100"})])
    hp, t_run = e.wait("whole-GPU pod running", lambda: [
        p for p in pods(api, "whole") if running(p)], 180, 0.5)
    hp = hp[0] if hp else api.ok("GET", "/api/v1/namespaces/%s/pods/whole" % NSP)
    time.sleep(GRACE + 1)  # anything more evicted would show now
    after = {p["metadata"]["name"]: p for p in pods(api, "low-")}
    gone = sorted(n for n in before if n not in after or after[n]["metadata"]["uid"] !=
                  before[n][0] or after[n]["metadata"].get("deletionTimestamp"))
    kept = sorted(n for n in before if n not in gone)
    hgpu = gpu_of(hp)
    on_h = sorted(n for n in before if before[n][1] == hgpu)
    e.check("preemption: a whole-GPU high-priority pod evicts exactly one GPU's low pods and runs "
            "there", running(hp) and len(hgpu) == 1 and gone == on_h and len(gone) == 4 and
            all(running(after[n]) for n in kept),
            "%d low pods of %d MiB on %d GPUs; evicted %d (%s), all of GPU %s: %s; %d kept "
            "running; high pod %s on %s %.1f s after its creation"
            % (len(lows), quarter, len(gpus), len(gone), ",".join(gone),
               hgpu[0][-12:] if hgpu else "-", gone == on_h, len(kept),
               hp["status"].get("phase"), ",".join(hgpu) or "-", t_run))

    # -- c (part 1). the Events of that preemption
    def ours():
        evs = [x for x in events(api) if x.get("reason") in ("GPUPreemption", "GPUPreempted")]
        n_pre = sum(x["reason"] == "GPUPreemption" for x in evs)
        return evs if n_pre and len(evs) - n_pre >= len(gone) else None
    evs = e.wait("preemption events", ours, 30, 1)[0] or []
    pre = [x for x in evs if x["reason"] == "GPUPreemption"]
    vic = {x["involvedObject"]["name"]: x["message"] for x in evs if x["reason"] == "GPUPreempted"}
    ks = {x["involvedObject"]["name"] for x in events(api) if x.get("reason") == "Preempted"}
    msg = pre[0]["message"] if pre else ""
    freed = re.search(r"free (\d+) MiB", msg)
    # kube-scheduler posts its own Preempted event when it evicts, i.e. when
    # it called the verb (1.20.0-1.20.9 never do: the extender evicts)
    verb = counter(scheduler_metrics(api, e)[0], "gpuvisor_scheduler_preempt_verb_called") > 0
    ok = (len(pre) == 1 and hgpu and hgpu[0] in msg and freed and
          int(freed.group(1)) == quarter * len(gone) and sorted(vic) == gone and
          all(hgpu[0] in vic[n] and "whole" in vic[n] for n in vic) and
          (sorted(ks) == gone if verb else not ks))
    e.check("preemption: Events on the preemptor and each victim name the GPU and what was freed",
            ok, "preemptor: %r; %d victims with GPUPreempted naming %s, %d with kube-scheduler's "
            "Preempted (verb called by kube-scheduler: %s)"
            % (msg[:220], len(vic), hgpu[0][-12:] if hgpu else "-", len(ks), verb))
    n_pre_a, n_vic_a = 1, len(gone)

    # -- b. a mixed burst on a full node
    clear(api, e)
    fill = ["fill-%d" % i for i in range(4 * len(gpus) + 4)]  # 8 fit, 4 wait
    create(api, [pod(e, n, LOW, {"nvidia.com/gpumem": str(quarter)}) for n in fill])
    e.wait("node full of low pods", lambda: sum(
        running(p) for p in pods(api, "fill-")) == 4 * len(gpus), 120, 0.5)
    time.sleep(2)  # the 4 left over have been tried (FailedScheduling) and wait
    sampler = Sampler(api, cap)
    # the burst, interleaved: 5 high pods and 4 more low ones, a quarter each
    burst = []
    for i in range(5):
        burst.append(pod(e, "hi-%d" % i, HIGH, {"nvidia.com/gpumem": str(quarter)}))
        if i < 4:
            burst.append(pod(e, "lo-%d" % i, LOW, {"nvidia.com/gpumem": str(quarter)}))
    highs = [b["metadata"]["name"] for b in burst if b["metadata"]["name"].startswith("hi-")]
    t_burst = time.time()
    create(api, burst)
    done, t_b = e.wait("every high pod running", lambda: len(pods(api, "hi-")) == len(highs) and all(
        running(p) for p in pods(api, "hi-")), 300, 0.5)
    time.sleep(GRACE + 2)  # anything more evicted or scheduled would show now
    worst, worst_gpu = sampler.done()
    final = pods(api)
    use = e.assignment_usage([p for p in final if p["status"].get("phase") not in
                              ("Succeeded", "Failed")])
    over = {u: m for u, m in use.items() if m > gpus.get(u, 0)}
    st = sched_times(api)
    last_high = max(st.get(h, 1e18) for h in highs)
    # "before": kube-scheduler's Scheduled event of each pod (events.k8s.io
    # eventTime, microseconds; the same machine's clock as t_burst).  Every
    # low pod was bound, or had failed to fit, before the burst began and
    # the GPUs are full: a low pod scheduled after the burst began and
    # before the last high pod's Scheduled event took room while a
    # high-priority pod was pending.
    inverted = sorted(n for n, t in st.items() if not n.startswith("hi-") and
                      t_burst < t < last_high)
    low_run = sum(running(p) for p in final if not p["metadata"]["name"].startswith("hi-"))
    high_run = sum(running(p) for p in final if p["metadata"]["name"].startswith("hi-"))
    slots = 4 * len(gpus)
    e.check("preemption: a mixed-priority burst on a full node: no over-commit, every "
            "high-priority pod running, no low-priority pod scheduled while one waits",
            done and high_run == len(highs) and low_run == slots - len(highs) and not over and
            worst <= cap and last_high < 1e18 and not inverted,
            "%d high + %d low running (%d slots: %d low evicted beyond need); worst per-GPU sum "
            "%d of %d MiB over %d samples (terminating pods counted), over-committed GPUs %s; "
            "low pods scheduled between the burst and the last high pod's Scheduled event "
            "(%s): %s; all high pods running %.1f s after the burst"
            % (high_run, low_run, slots, slots - len(highs) - low_run, worst, cap,
               sampler.samples, over or "none",
               "%.2f s after the burst" % (last_high - t_burst) if last_high < 1e18 else
               "no Scheduled events found", inverted or "none", t_b))

    # -- c (part 2). the metrics count what happened
    evicted_b = slots - low_run  # running before the burst, not after
    m1 = scheduler_metrics(api, e)
    ext0, ks0 = m0
    ext1, ks1 = m1
    d = lambda m_a, m_b, name, **lb: counter(m_b, name, **lb) - counter(m_a, name, **lb)  # noqa
    calls = sum(d(ext0, ext1, "gpuvisor_scheduler_preemptions_total", result=r)
                for r in ("victims", "none", "skipped"))
    pre_v = d(ext0, ext1, "gpuvisor_scheduler_preemptions_total", result="victims")
    vic_low = d(ext0, ext1, "gpuvisor_scheduler_preemption_victims_total", priority=str(LOW))
    ks_vic = d(ks0, ks1, "scheduler_preemption_victims_sum")
    ks_att = d(ks0, ks1, "scheduler_preemption_attempts_total")
    verb = counter(ext1, "gpuvisor_scheduler_preempt_verb_called") > 0
    own = d(ext0, ext1, "gpuvisor_scheduler_preemptions_without_verb_total")
    own_ev = d(ext0, ext1, "gpuvisor_scheduler_preemption_evictions_total")
    want_v = n_vic_a + evicted_b
    # kube-scheduler evicts what the verb names when it calls it; when it
    # never does (1.20.0-1.20.9) its own preemption evicts nobody and the
    # extender evicts (docs/scheduler.md, "Preemption")
    who_ok = (ks_vic == want_v and own == 0) if verb else (ks_vic == 0 and own_ev == want_v)
    e.check("preemption: the preemption metrics count what happened",
            calls > 0 and vic_low == want_v and who_ok and pre_v >= n_pre_a + 1,
            "kube-scheduler called the preempt verb: %s; extender: %d preempt decisions (%d "
            "run by itself), %d with victims, %d victims of priority %d, %d evicted by itself; "
            "kube-scheduler: %d attempts, %d victims; pods evicted: %d"
            % ("yes" if verb else "no", calls, own, pre_v, vic_low, LOW, own_ev, ks_att, ks_vic,
               want_v))
