#!/usr/bin/python3
"""gpuvisor-node killed (SIGKILL) in the middle of concurrent Allocates
(issue 12 item 4; docs/node-agent.md "Allocate state machine").

The real agent over the fake NVML and the fake API server; the kubelet is
played twice: the Python grpcio stand-in (tests/fakes/kubelet) receives the
registrations, and this script plays the device manager's calls with grpcio
from 30 threads: GetPreferredAllocation with the devices not in use (one at a
time, as the kubelet admits pods one by one, so its view of what is free is
never stale), then Allocate with the preferred IDs, 30 at once.  Each round creates 30 pending pods,
starts their admissions, kills the agent at a random moment (sometimes again
during the retries), restarts it and retries what was interrupted the way a
kubelet would: the same Allocate again when it had the preferred IDs, the
whole admission otherwise.  Then, from the answers and the API alone:
  - every pod was answered within a bounded number of retries (none refused
    forever), each pod exactly once (the answers are the 30 assignments);
  - each answer names the GPU of the IDs the kubelet recorded;
  - the same request again gets the same answer;
  - every pod's annotations say success with the container listed.

GV_CRASH_KILLS sets how many kills to reach (default 12 for make test; the
issue's figure is 300: GV_CRASH_KILLS=300).  The figures go to stdout as a
TAP comment.
"""
import json
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import gvtest  # noqa: E402
from agent import GPUS, ann  # noqa: E402

t = gvtest.Tap()
if not agent.have_fake_nvml():
    t.skip("node agent crash test", "fake libnvidia-ml.so.1 not built in " + agent.FAKES)
    t.done()
sys.path.insert(0, os.path.join(gvtest.ROOT, "tests", "fakes", "kubelet"))
import grpc  # noqa: E402
import kubelet_py  # noqa: E402

pb, pbg = kubelet_py.pb, kubelet_py.pbg
KILLS = int(os.environ.get("GV_CRASH_KILLS", "12"))
PODS = 30
SPLIT = 40
SEED = int(os.environ.get("GV_CRASH_SEED", str(int(time.time()))))
rng = random.Random(SEED)
DEVICES = ["%s::%d" % (g, k) for g in GPUS for k in range(SPLIT)]


class Kubelet:
    """The device manager's side of admission, shared by the threads."""

    def __init__(self, sock):
        self.sock = sock
        self.lock = threading.Lock()
        self.prefer_lock = threading.Lock()  # one preference at a time, as the kubelet admits
        self.in_use = set()
        self.channel = None
        self.stub = None

    def connect(self):
        if self.channel:
            self.channel.close()
        self.channel = grpc.insecure_channel("unix://" + self.sock)
        self.stub = pbg.DevicePluginStub(self.channel)

    def available(self):
        with self.lock:
            return [d for d in DEVICES if d not in self.in_use]

    def allocate(self, ids):
        r = self.stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=15)
        return r.container_responses[0].SerializeToString(), dict(r.container_responses[0].envs)

    def admit(self, slot):
        """slot: dict; fills ids (once preferred), answer, env, or error."""
        try:
            if slot.get("ids") is None:
                # The kubelet admits one pod at a time: its available list is
                # never stale, and the IDs are taken before Allocate is sent
                # (never two live containers on one device ID).  The Allocates
                # themselves run concurrently.
                with self.prefer_lock:
                    avail = self.available()
                    r = self.stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
                        pb.ContainerPreferredAllocationRequest(available_deviceIDs=avail,
                                                               allocation_size=1)]), timeout=15)
                    ids = list(r.container_responses[0].deviceIDs)
                    with self.lock:
                        if len(ids) != 1 or ids[0] in self.in_use:
                            ids = [d for d in DEVICES if d not in self.in_use][:1]
                        self.in_use.update(ids)
                slot["ids"] = ids
            slot["answer"], slot["env"] = self.allocate(slot["ids"])
            slot.pop("error", None)
        except grpc.RpcError as e:
            slot["error"] = "%s: %s" % (e.code(), e.details())


def run_pass(k, slots, kill=False, env=None):
    """Admits every unanswered slot from its own thread.  kill: SIGKILL the
    agent once a random number of them (0..all-1) were answered, plus a
    random 0-4 ms, so the kill lands anywhere in the admissions' lifetime.
    Returns whether a kill happened while calls were still open."""
    k.connect()
    todo = [s for s in slots if "answer" not in s]
    ths = [threading.Thread(target=k.admit, args=(s,)) for s in todo]
    for th in ths:
        th.start()
    interrupted = False
    if kill:
        at = rng.randrange(len(todo))
        while sum("answer" in s for s in todo) < at and any(th.is_alive() for th in ths):
            time.sleep(0.0005)
        time.sleep(rng.uniform(0.0, 0.004))
        interrupted = any(th.is_alive() for th in ths)
        env.stop_agent(signal.SIGKILL)
    for th in ths:
        th.join()
    return interrupted


def start_agent(env, kub):
    env.start_agent()
    return kub.event("registered", timeout=15) is not None


env = agent.Env(config={"deviceSplitCount": SPLIT})
kub = env.start_kubelet("py")
k = Kubelet(os.path.join(env.plugin_dir, "gpuvisor.sock"))
kills = interrupting = rounds = retries_max = replays = 0
failures = []
try:
    t.ok(start_agent(env, kub), "agent registered with the kubelet stand-in", env.agent_log()[-2000:])
    while kills < KILLS and not failures:
        rounds += 1
        pods = {}
        for i in range(PODS):
            name = "r%d-p%d" % (rounds, i)
            mem, milli = 100 + i, rng.choice([0, 5, 333, 501, 999, 1000])
            env.api.create_pod(name, [("main", {"nvidia.com/gpu": "1"})],
                               "v1;node=node1;main=%s:%d:%d" % (GPUS[i % 2], mem, milli))
            pods["%dm" % mem] = (name, GPUS[i % 2])
        slots = [{} for _ in range(PODS)]
        # first pass: killed at a random moment of the 30 admissions
        interrupting += run_pass(k, slots, True, env)
        kills += 1
        passes = 0
        while any("answer" not in s for s in slots) and passes < 6:
            passes += 1
            if not start_agent(env, kub):
                failures.append("round %d: the agent did not register after a restart" % rounds)
                break
            again = passes == 1 and rng.random() < 0.3  # sometimes killed again mid-retry
            interrupting += run_pass(k, slots, again, env)
            kills += again
        if env.agent is None:
            start_agent(env, kub)
        retries_max = max(retries_max, passes)
        left = [s.get("error") for s in slots if "answer" not in s]
        if left:
            failures.append("round %d: %d pods never answered after %d retry passes: %s"
                            % (rounds, len(left), passes, left[:3]))
            break
        # each pod answered exactly once, on the GPU the kubelet's IDs name
        mems = sorted(s["env"].get("CUDA_DEVICE_MEMORY_LIMIT_0", "?") for s in slots)
        if mems != sorted(pods):
            failures.append("round %d: answers are not the 30 assignments: %s" % (rounds, mems))
            break
        wrong = [(s["ids"], s["env"]) for s in slots
                 if s["env"].get("NVIDIA_VISIBLE_DEVICES") != s["ids"][0].split("::")[0] or
                 s["env"]["NVIDIA_VISIBLE_DEVICES"] != pods[s["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"]][1]]
        if wrong:
            failures.append("round %d: answer on another GPU than the kubelet's IDs: %s" % (rounds, wrong[:2]))
            break
        # the same request again: the same answer
        k.connect()
        for s in rng.sample(slots, 3):
            try:
                again, _ = k.allocate(s["ids"])
            except grpc.RpcError as e:
                again = e.details()
            replays += 1
            if again != s["answer"]:
                failures.append("round %d: a repeated Allocate got another answer: %r" % (rounds, again))
        # annotations say what was answered
        names = [n for n, _ in pods.values()]
        ok = gvtest.wait_for(lambda: all(ann(env.api.pod(n), "gpuvisor.io/allocation") == "success" and
                                         ann(env.api.pod(n), "gpuvisor.io/allocated-containers") == "main"
                                         for n in names), 15)
        if not ok:
            bad = [(n, ann(env.api.pod(n), "gpuvisor.io/allocation")) for n in names
                   if ann(env.api.pod(n), "gpuvisor.io/allocation") != "success"]
            failures.append("round %d: annotations not consistent with the answers: %s" % (rounds, bad[:5]))
        for n in names:
            env.api.delete_pod(n)
        with k.lock:
            k.in_use.clear()
    mismatch = env.agent_log().count("on other GPUs than assigned")
    print("# %d kills (%d while calls were open) in %d rounds of %d concurrent admissions; "
          "at most %d retry passes; %d repeated requests; %d ID mismatches; seed %d"
          % (kills, interrupting, rounds, PODS, retries_max, replays, mismatch, SEED))
    t.ok(not failures and kills >= KILLS,
         "%d SIGKILLs during concurrent Allocates: every pod answered exactly once, on the GPU the kubelet "
         "recorded, repeats get the same answer, annotations say success" % kills,
         "\n".join(failures + ["reproduce with GV_CRASH_SEED=%d" % SEED] if failures else []))
    t.ok(mismatch == 0, "every admission used the preferred IDs of its assignment (no ID mismatch)", mismatch)
    san = [ln for ln in env.agent_log().splitlines() if "Sanitizer" in ln or "runtime error:" in ln]
    t.ok(not san, "no sanitizer report from any agent run", "\n".join(san[:10]))
    if failures or mismatch:
        keep = os.path.join(gvtest.BUILD, "test-logs", "test_node_crash.agent.log")
        with open(keep, "w") as f:
            f.write(env.agent_log())
        print("# agent log kept in " + keep)
finally:
    k.channel and k.channel.close()
    env.close()
t.done()
