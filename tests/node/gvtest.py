"""Shared helpers for the node agent's Python test scripts.

TAP output, scratch directories, and process wrappers for the programs the
tests drive: the kubelet stand-ins (Python grpcio and grpc-go, speaking the
same JSON-lines protocol), the gRPC harness and gpuvisor-node.  Every
process started here is killed at exit, so a failing test leaves nothing
running.

GV_FAIL_FAST=1 (set by tests/mutants/run.sh for every kill command) makes
the first failed check end the script with status 1: a mutant is killed by
any failure, and the checks after it (often waiting out timeouts the mutant
caused) would only cost time.  From a thread other than the main one the
exit only ends that thread; the failure still counts, so done() fails.
"""
import atexit
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
PY = "/usr/bin/python3"

_procs = []


def _cleanup():
    for p in _procs:
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(_cleanup)


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=None):
        self.n += 1
        if cond:
            print("ok %d - %s" % (self.n, name))
        else:
            self.failed += 1
            print("not ok %d - %s" % (self.n, name))
            if diag is not None:
                for line in str(diag).splitlines()[:30]:
                    print("# " + line)
            if os.environ.get("GV_FAIL_FAST") == "1":
                print("# GV_FAIL_FAST=1: stopping at the first failure")
                sys.stdout.flush()
                raise SystemExit(1)
        sys.stdout.flush()
        return cond

    def skip(self, name, why):
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, name, why))
        sys.stdout.flush()

    def done(self):
        print("1..%d" % self.n)
        sys.exit(1 if self.failed else 0)


def scratch(prefix):
    base = os.environ.get("GV_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    # unix socket paths are limited to 107 bytes: keep this short
    d = tempfile.mkdtemp(prefix=prefix, dir=base if len(base) < 40 else "/tmp")
    atexit.register(shutil.rmtree, d, True)
    return d


class Proc:
    """A child process with stdout lines collected by a thread."""

    def __init__(self, argv, env=None, stdin=True, log=None):
        self.argv = argv
        self.log = open(log, "ab") if log else subprocess.DEVNULL
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=self.log, env=env,
                                  cwd=ROOT)
        _procs.append(self.p)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.p.stdout:
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))
        self.lines.put(None)

    def send(self, line):
        self.p.stdin.write((line + "\n").encode())
        self.p.stdin.flush()

    def line(self, timeout=10):
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def expect(self, pred, timeout=10):
        """Next line satisfying pred; lines skipped are kept in self.seen."""
        end = time.time() + timeout
        while True:
            left = end - time.time()
            if left <= 0:
                return None
            ln = self.line(left)
            if ln is None:
                return None
            self.seen.append(ln)
            if pred(ln):
                return ln

    def stop(self, sig=None, timeout=10):
        if self.p.poll() is None:
            if sig is None:
                self.p.terminate()
            else:
                self.p.send_signal(sig)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


class StandIn(Proc):
    """A kubelet stand-in ("py" or "go"); see tests/fakes/kubelet/."""

    def __init__(self, kind, directory, go_binary=None, log=None):
        if kind == "py":
            argv = [PY, os.path.join(ROOT, "tests/fakes/kubelet/kubelet_py.py"), directory]
        else:
            argv = [go_binary, directory]
        super().__init__(argv, log=log)
        self.kind = kind
        self.early = []
        ev = self.event("ready", timeout=60)
        if ev is None:
            raise RuntimeError("kubelet stand-in %s did not start" % kind)
        # The stand-in listens before it says "ready", so an agent already
        # running can register (and open ListAndWatch) first: those events
        # must not be lost to the wait for "ready".
        self.early = self.seen[:]

    def event(self, name, pred=None, timeout=10):
        def match(ln):
            try:
                ev = json.loads(ln)
            except ValueError:
                return False
            return ev.get("event") == name and (pred is None or pred(ev))
        for i, ln in enumerate(self.early):
            if match(ln):
                del self.early[:i + 1]
                return json.loads(ln)
        ln = self.expect(match, timeout)
        return json.loads(ln) if ln else None

    def restart(self, timeout=10):
        """Kubelet restart; returns (restarted, registered) events, in whichever
        order they come (the plugin may re-register before the stand-in reports).
        What the new registration brings before "restarted" is printed (the
        new ListAndWatch's first device list: the Go stand-in's server is up,
        and the plugin may register and be watched, before its command loop
        says "restarted") stays for the next event() call instead of being
        skipped: a caller waiting for that list would otherwise wait for a
        second one that never comes (flaky under load)."""
        self.send(json.dumps({"cmd": "restart"}))
        got, after = {}, []

        def match(ln):
            try:
                ev = json.loads(ln)
            except ValueError:
                return False
            if ev.get("event") in ("restarted", "registered") and ev["event"] not in got:
                got[ev["event"]] = ev
            elif "registered" in got:
                after.append(ln)
            return len(got) == 2
        self.expect(match, timeout)
        self.early.extend(after)
        return got.get("restarted"), got.get("registered")

    def cmd(self, name, timeout=15, **kw):
        self.send(json.dumps(dict(cmd=name, **kw)))
        return self.event(name, timeout=timeout)


class GoBuild:
    """Result of building the grpc-go stand-in: binary (None unless built),
    missing (Go or its gRPC packages absent: a skip), error (the compiler's
    message: a failure, never a silent fallback)."""

    def __init__(self, binary=None, missing=None, error=None):
        self.binary, self.missing, self.error = binary, missing, error

    def report(self, t, what):
        """TAP line for the build; returns the binary or None."""
        if self.missing:
            t.skip(what, self.missing)
        elif self.error is not None:
            t.ok(False, "%s: the grpc-go kubelet stand-in builds" % what, self.error)
        return self.binary


def build_go_standin():
    """Builds the grpc-go stand-in once per test run (a GoBuild)."""
    out = os.path.join(BUILD, "testbin", "kubelet_go")
    src = [os.path.join(ROOT, "tests/fakes/kubelet/go/main.go"),
           os.path.join(ROOT, "proto/deviceplugin/v1beta1/api.proto")]
    if os.path.exists(out) and all(os.path.getmtime(s) < os.path.getmtime(out) for s in src):
        return GoBuild(out)
    d = scratch("gogo")
    env = dict(os.environ, GOCACHE=os.path.join(BUILD, "gocache"))
    r = subprocess.run([os.path.join(ROOT, "tests/fakes/kubelet/build-kubelet-go.sh"), out, d],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode == 3:
        return GoBuild(missing="Go toolchain, protoc-gen-go or golang-google-grpc-dev missing")
    if r.returncode != 0:
        return GoBuild(error="build-kubelet-go.sh exit %d:\n%s" % (r.returncode, r.stdout.decode(errors="replace")))
    return GoBuild(out)


def wait_for(pred, timeout=5.0, step=0.02):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()
