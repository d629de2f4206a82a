#!/usr/bin/python3
"""The web dashboard in a real browser: Debian's chromium, headless, against
gpuvisor-scheduler --dashboard-listen on the kube-apiserver stand-in seeded
with the known cluster (cluster_fixture.py).  Asserts on content: the DOM
after the page's JavaScript ran (--dump-dom under a virtual time budget, so
the page's fetch completes however loaded the machine is) and a screenshot
taken in the same way (a PNG of the requested size).  Also: the page is
self-contained (nothing fetched from elsewhere) and read-only.

GV_DASHBOARD_SCREENSHOT=path keeps the screenshot for a human to look at."""
import os
import re
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import agent_standin  # noqa: E402
import obs_stand  # noqa: E402
from obs_stand import cluster_fixture, gvtest  # noqa: E402

t = gvtest.Tap()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    t.skip("dashboard in headless chromium", "chromium not installed")
    t.done()
if not os.path.exists(obs_stand.SCHED_BIN):
    t.skip("dashboard in headless chromium", "gpuvisor-scheduler not built")
    t.done()

work = gvtest.scratch("dash")


def chromium(url, *args):
    # The hang guard only: virtual time makes the page's own timing irrelevant.
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-extensions", "--user-data-dir=" + os.path.join(work, "profile"),
            "--virtual-time-budget=4000"] + list(args) + [url]
    r = subprocess.run(argv, capture_output=True, timeout=300, cwd=work)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def text_of(dom):
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom)).replace("&amp;", "&")


# node-agent stand-ins on every node with an agent but the stale one
agents = agent_standin.start_agents(skip=("gpu-h100-1",))
stand = obs_stand.Stand(work, agents=agents)
try:
    stand.start_scheduler()
    obs_stand.drive_filters(stand)
    state = obs_stand.usage_state(stand)
    t.ok(state.get("usage", {}).get("agents") == 3, "the scheduler read the 3 node agents", state.get("usage"))
    sl = {(x["pod"], x["container"]): x for n in state.get("nodes", []) for g in n["gpus"] for x in g["slices"]
          if g["index"] == 0 and n["name"] == "gpu-a100-1"}
    b0 = sl.get(("bert-finetune-0", "trainer"), {})
    t.ok(b0.get("usedMemMiB") == int(40960 * 0.9) and b0.get("achievedShare") == 0.25,
         "api/state: a slice's live memory use and achieved share from its agent", b0)

    # self-contained: every asset comes from the scheduler, none refers elsewhere
    code, page = obs_stand.http("GET", stand.dash + "/")
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    t.ok(code == 200 and sorted(assets) == ["api/state", "app.js", "style.css"],
         "index links only its own assets (and its JSON, for readers without script)", assets)
    external = []
    for a in ("app.js", "style.css"):
        c, body = obs_stand.http("GET", stand.dash + "/" + a)
        t.ok(c == 200, "asset /%s served from the binary" % a)
        body = body.replace("http://www.w3.org/2000/svg", "")  # an XML namespace name, never fetched
        external += re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}[^\s\"')]*", body)
        external += re.findall(r"@import|import\s*\(", body)
    t.ok(not external, "no CDN, no remote import in the assets", external)

    # read-only: nothing but GET
    codes = [obs_stand.http(m, stand.dash + p, b"{}")[0] for m in ("POST", "PUT", "DELETE")
             for p in ("/", "/api/state")]
    t.ok(all(c in (404, 405) for c in codes), "writes are refused (405/404)", codes)

    rc, dom, err = chromium(stand.dash + "/", "--dump-dom")
    t.ok(rc == 0 and 'data-loaded="1"' in dom, "the page's script ran and drew the state", err[-2000:])
    txt = text_of(dom)
    for want, what in [
        ("GPUs 28", "overview: 28 GPUs"),
        ("GPU pods 13", "overview: 12 GPU pods bound + 1 reserved"),
        ("Pending 2", "overview: 2 pending pods"),
        ("gpu-a100-1 ready", "node gpu-a100-1 with a live agent"),
        ("gpu-h100-1 stale", "node whose agent stopped reporting shown stale"),
        ("cpu-1 no agent", "node without the agent shown"),
        ("ml-train/bert-finetune-0 · trainer 36 GiB of 40 GiB · 25% of 50%",
         "a slice: who, container, memory used of allocated, share achieved of target"),
        ("inference/llama-serve-7b · sidecar 1.5 GiB of 2.0 GiB · 5% of 10%", "a second container's slice on a shared GPU"),
        ("research/notebook-alice · jupyter 0.0 GiB of 8.0 GiB · 0% of any", "a slice without a compute limit"),
        ("inference/ocr · ocr 11 GiB of 12 GiB · 30% of 60%", "HAMi-named agent series read too"),
        ("util 26% · 2/10 tasks", "a GPU's live utilisation"),
        ("live usage from 3 agents", "status line names the agents read"),
        ("inference/small-infer · s (reserved) 8.0 GiB · 20%", "a reservation (filter done, bind pending)"),
        ("ml-train big-train insufficient gpu 3/5 nodes:", "pending pod with its top failure reason"),
        ("research bad-cores invalid request", "invalid request listed as pending"),
        # fgd puts the 20 % slice on gpu-a100-2's GPU 2 (80 % of its compute
        # bound): it fits as well as on gpu-a100-1's GPU 0 and keeps that
        # node's three idle GPUs together (docs/alloc.md, "Ties")
        ("memory 72 GiB / 80 GiB", "a GPU's memory bar label (64 GiB bound + 8 GiB reserved)"),
    ]:
        t.ok(want in txt, "DOM: " + what, "missing %r" % want)
    gpus_drawn = len(re.findall(r'class="gpu(?: unhealthy)?"', dom))
    t.ok(gpus_drawn == 28, "one GPU box per GPU (28)", gpus_drawn)
    segs = len(re.findall(r'class="seg(?: reserved)?"', dom))
    # memory bar + compute bar per slice; fixture slices + the reservation
    want_slices = len(cluster_fixture.expected()["vgpu"]) + 1
    t.ok(segs == 2 * want_slices, "one memory and one compute segment per slice (%d)" % want_slices, segs)
    t.ok("<polyline" in dom, "fragmentation history drawn as a chart")

    png = os.path.join(work, "dashboard.png")
    rc, out, err = chromium(stand.dash + "/", "--screenshot=" + png, "--window-size=1400,2400")
    ok = rc == 0 and os.path.exists(png)
    head = open(png, "rb").read(24) if ok else b""
    size = struct.unpack(">II", head[16:24]) if len(head) == 24 and head[:8] == b"\x89PNG\r\n\x1a\n" else None
    t.ok(size == (1400, 2400), "screenshot: a PNG of the window size", (rc, size, err[-1000:]))
    t.ok(ok and os.path.getsize(png) > 50000, "screenshot has content (not a blank page)",
         os.path.getsize(png) if ok else None)
    keep = os.environ.get("GV_DASHBOARD_SCREENSHOT")
    if keep and ok:
        shutil.copy(png, keep)
    rc, log = stand.stop_scheduler()
    t.ok(rc == 0 and "Sanitizer" not in log and "runtime error" not in log,
         "scheduler with the dashboard exits cleanly on SIGTERM (sampler joined, no sanitizer report)",
         log[-3000:])
finally:
    stand.stop()
t.done()
