#!/usr/bin/python3
"""The kubelet stand-in wrapper (gvtest.StandIn) under every event order a
kubelet restart can produce.  The Go stand-in's server is up before its
command loop prints "restarted", so the plugin may re-register and its new
ListAndWatch deliver the device list first; StandIn.restart() must keep that
list for the next event() call (it once skipped it: "[go] ListAndWatch
resumes after kubelet restart" failed under load).  A scripted stand-in
prints each order; no agent, no timing.
"""
import os
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gvtest  # noqa: E402

t = gvtest.Tap()
REG = '{"event":"registered","endpoint":"gpuvisor.sock"}'
DEV = '{"event":"devices","devices":[1,2,3,4,5,6,7,8]}'
RST = '{"event":"restarted"}'
orders = {"restarted, registered, devices": [RST, REG, DEV],
          "registered, restarted, devices": [REG, RST, DEV],
          "registered, devices, restarted (the Go stand-in under load)": [REG, DEV, RST]}
d = gvtest.scratch("so")
for what, lines in orders.items():
    script = os.path.join(d, "standin-%d" % len(os.listdir(d)))
    with open(script, "w") as f:
        f.write("#!/bin/sh\necho '{\"event\":\"ready\"}'\nread cmd\n")
        for ln in lines:
            f.write("echo '%s'\n" % ln)
        f.write("read end\n")
    os.chmod(script, stat.S_IRWXU)
    k = gvtest.StandIn("go", d, go_binary=script)
    restarted, reg = k.restart(timeout=10)
    ev = k.event("devices", timeout=5)
    t.ok(restarted is not None and reg is not None and ev is not None and len(ev["devices"]) == 8,
         "restart then the device list, printed as %s" % what, (restarted, reg, ev))
    k.send("end")
    k.p.wait(10)
t.done()
