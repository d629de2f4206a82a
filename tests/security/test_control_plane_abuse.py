#!/usr/bin/env python3
"""The scheduler's listeners under abuse (issue 14, docs/isolation.md "Control plane").

The real gpuvisor-scheduler (webhook over HTTPS, health listener, extender) on
loopback, against the kube-apiserver stand-in:
  - slow loris: hundreds of connections that never finish their request,
    from one address and from many (127.0.0.x sources);
  - stalled large bodies: requests whose body stops short of its
    Content-Length, over and under the webhook's body limit;
  - old TLS: `openssl s_client` with TLS 1.0 / 1.1 and a non-AEAD suite.
Health probes must stay green, a legitimate review from another address must
still be answered, and the scheduler's memory must stay bounded (VmRSS is
printed before and under attack).  Every wait is a bounded loop.
GV_SECURITY_BASELINE=1 runs the same attacks against a build without the
fixes (health then sits on the webhook port, as it did).
"""
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(BUILD, "bin", "gpuvisor-scheduler")
BASELINE = os.environ.get("GV_SECURITY_BASELINE") == "1"
n = 0
fails = 0


def ok(cond, name, diag=""):
    global n, fails
    n += 1
    if cond:
        print("ok %d - %s" % (n, name))
    else:
        fails += 1
        print("not ok %d - %s" % (n, name))
        if diag:
            for line in str(diag).splitlines()[-8:]:
                print("# " + line)
    sys.stdout.flush()


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def http_code(url, timeout=3, ctx=None):
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:  # refused, reset, timed out
        return 0


def connect_from(src, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def main():
    global n
    if not os.path.exists(BIN) or shutil.which("openssl") is None:
        print("1..1\nok 1 # SKIP gpuvisor-scheduler or openssl missing")
        return 0
    tmp = tempfile.mkdtemp(prefix="abuse.", dir=os.environ.get("GV_TEST_TMP"))
    procs = []
    held = []
    try:
        cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=webhook", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], capture_output=True, check=True)
        with open(os.path.join(tmp, "placement.key"), "w") as f:
            f.write(os.urandom(32).hex())
        fa = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests/fakes/apiserver/fake_apiserver.py"),
                               "--port", "0"], stdout=subprocess.PIPE, text=True)
        procs.append(fa)
        ready, url = fa.stdout.readline().split()[:2]
        ports_file = os.path.join(tmp, "ports")
        argv = [BIN, "--master", url, "--extender-listen", "127.0.0.1:0",
                "--webhook-listen", "127.0.0.1:0", "--tls-cert-file", cert, "--tls-key-file", key,
                "--port-file", ports_file, "--log-level", "error"]
        if not BASELINE:
            argv += ["--health-listen", "127.0.0.1:0",
                     "--placement-key-file", os.path.join(tmp, "placement.key")]
        log = open(os.path.join(tmp, "sched.log"), "w")
        sched = subprocess.Popen(argv, stderr=log)
        procs.append(sched)
        for _ in range(100):
            if os.path.exists(ports_file) and os.path.getsize(ports_file) > 0:
                break
            time.sleep(0.1)
        ports = dict(l.split("=") for l in open(ports_file).read().split())
        wport = int(ports["webhook"])
        ctx = ssl.create_default_context(cafile=cert)
        if BASELINE:
            health = "https://127.0.0.1:%d/healthz" % wport
            hctx = ctx
        else:
            health = "http://127.0.0.1:%s/healthz" % ports["health"]
            hctx = None
        for _ in range(100):
            if http_code(health, ctx=hctx) == 200:
                break
            time.sleep(0.1)
        ok(http_code(health, ctx=hctx) == 200, "scheduler up, health probe green")
        rss0 = rss_kib(sched.pid)

        def legit_review():
            body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                               "request": {"uid": "r", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                           "operation": "CREATE", "namespace": "default",
                                           "object": {"metadata": {"name": "p"},
                                                      "spec": {"containers": [{"name": "c"}]}}}}).encode()
            req = urllib.request.Request("https://127.0.0.1:%d/mutate" % wport, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                    return json.loads(r.read())["response"]["allowed"]
            except Exception as e:
                return repr(e)

        # ---- kube-scheduler's burst on the extender --------------------------
        # kube-scheduler binds every pod in its own goroutine and Go keeps 2
        # idle connections per host: a burst of N pods opens up to N + 1
        # connections to the extender from one address, all with a request
        # in flight.  Every one must be answered (a closed one is a
        # "connection reset by peer" scheduling error in kube-scheduler).
        if not BASELINE:
            eport = int(ports["extender"])
            burst = []
            try:
                for _ in range(300):
                    burst.append(connect_from("127.0.0.1", eport))
                for s in burst:  # all 300 open before any request is sent
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                answered = 0
                for s in burst:
                    try:
                        answered += s.recv(64).startswith(b"HTTP/1.1 200")
                    except OSError:
                        pass
            finally:
                for s in burst:
                    s.close()
            print("# extender: %d connections from one address at once, %d answered 200"
                  % (len(burst), answered))
            ok(answered == 300, "extender: 300 concurrent connections from one address all answered",
               "answered %d of %d" % (answered, len(burst)))

        # ---- slow loris from one address -----------------------------------
        # Each connection sends half a TLS record and stalls.
        opened = 0
        for _ in range(300):
            try:
                s = connect_from("127.0.0.2", wport)
                s.send(b"\x16\x03\x01\x02\x00\x01")
                held.append(s)
                opened += 1
            except OSError:
                break
        # The server closes what is over its cap as it accepts: count until
        # it has (bounded: 50 rounds), not after a fixed sleep.
        for s in held:
            s.setblocking(False)
        for _ in range(50):
            alive = 0
            for s in held:
                try:
                    alive += s.recv(1) != b""
                except BlockingIOError:
                    alive += 1  # still open, nothing sent
                except OSError:
                    pass
            if alive <= 32:
                break
            time.sleep(0.2)
        print("# slow loris, one address: %d connections opened, %d still held by the server" % (opened, alive))
        ok(alive <= 32, "slow loris from one address: the server holds at most 32 of its connections",
           "held %d" % alive)
        ok(http_code(health, ctx=hctx) == 200, "health probe green during the one-address slow loris")
        ok(legit_review() is True, "a review from another address is answered during it")
        for s in held:
            s.close()
        held.clear()

        # ---- slow loris from many addresses (past the global cap) -----------
        for i in range(20):
            for _ in range(40):
                try:
                    s = connect_from("127.0.0.%d" % (10 + i), wport)
                    s.send(b"\x16\x03\x01\x02\x00\x01")
                    held.append(s)
                except OSError:
                    break
        time.sleep(0.5)
        green = sum(http_code(health, ctx=hctx) == 200 for _ in range(5))
        threads = len(os.listdir("/proc/%d/task" % sched.pid))
        print("# slow loris, 20 addresses: %d connections, scheduler threads %d, health %d/5 green"
              % (len(held), threads, green))
        ok(green == 5, "health probes stay green with %d slow-loris connections from 20 addresses" % len(held),
           "green %d/5" % green)
        ok(threads < 200, "scheduler threads stay bounded (%d)" % threads)
        for s in held:
            s.close()
        held.clear()

        # The server notices the closed slow-loris connections on its own
        # time: wait (bounded) until a fresh connection is served again.
        for _ in range(100):
            if legit_review() is True:
                break
            time.sleep(0.1)

        # ---- stalled large bodies -------------------------------------------
        def stalled(src, declared, send):
            raw = connect_from(src, wport)
            t = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            t.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % declared)
            chunk = b" " * 65536
            sent = 0
            try:
                while sent < send:
                    t.sendall(chunk[:min(len(chunk), send - sent)])
                    sent += min(len(chunk), send - sent)
            except OSError:
                pass
            return t, sent

        # Declared 8 MiB (over the webhook's 4 MiB): refused before buffering.
        t, _ = stalled("127.0.0.3", 8 << 20, 0)
        t.settimeout(5)
        try:
            first = t.recv(64)
        except OSError as e:
            first = repr(e).encode()
        ok(first.startswith(b"HTTP/1.1 413"), "declared oversize body refused with 413 before its bytes",
           first)
        t.close()
        rss_before = rss_kib(sched.pid)
        # Just under each build's body limit (8 MiB before, 4 MiB now), then stalled.
        big = (8 << 20 if BASELINE else 4 << 20) - 1024
        sent_total = 0
        for i in range(40):
            try:
                t, sent = stalled("127.0.0.%d" % (40 + i % 10), big + 512, big)
                held.append(t)
                sent_total += sent
            except OSError as e:
                print("# stalled body %d: %r" % (i, e))
        time.sleep(0.5)
        rss_attack = rss_kib(sched.pid)
        closed = 0
        for t in held:
            t.settimeout(0.2)
            try:
                closed += t.recv(64) == b""
            except socket.timeout:
                pass  # still open: its body is buffered, waiting
            except (OSError, ssl.SSLError):
                closed += 1
        print("# stalled bodies: %d connections, %d MiB sent, %d closed by the server (body budget full)"
              % (len(held), sent_total >> 20, closed))
        print("# scheduler VmRSS: idle %d KiB; before bodies %d KiB; 40 stalled %d MiB bodies %d KiB (+%d KiB)"
              % (rss0, rss_before, big >> 20, rss_attack, rss_attack - rss_before))
        # Whatever the timing, the server holds at most budget / body of them
        # open (16 MiB / ~4 MiB): the others were closed, or timed out.
        ok(len(held) - closed <= 4,
           "stalled bodies: at most 4 held at once (the 16 MiB body budget), %d of %d closed"
           % (closed, len(held)))
        with open("/proc/%d/maps" % sched.pid) as f:
            sanitized = "libasan" in f.read()
        if sanitized:
            # ASan keeps freed memory in quarantine: RSS says nothing here.
            n += 1
            print("ok %d # SKIP scheduler memory under attack: AddressSanitizer build" % n)
        else:
            ok(rss_attack - rss_before < 64 * 1024,
               "40 stalled large bodies: scheduler memory grows < 64 MiB (+%d KiB)" % (rss_attack - rss_before))
        ok(http_code(health, ctx=hctx) == 200, "health probe green with the bodies stalled")
        for s in held:
            s.close()
        held.clear()

        # ---- TLS versions and suites ----------------------------------------
        def s_client(*args):
            r = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % wport] + list(args),
                               input=b"", capture_output=True, timeout=20)
            out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
            return r.returncode == 0 and "Cipher is (NONE)" not in out and "New, " in out, out
        for ver in ("-tls1", "-tls1_1"):
            hs, out = s_client(ver, "-cipher", "DEFAULT:@SECLEVEL=0")
            ok(not hs, "TLS %s refused by the webhook" % ver, out)
        hs, out = s_client("-tls1_2", "-cipher", "AES128-SHA:@SECLEVEL=0")
        ok(not hs, "TLS 1.2 with a non-AEAD, non-forward-secret suite (AES128-SHA) refused", out)
        hs, out = s_client("-tls1_2")
        ok(hs, "TLS 1.2 with a modern suite accepted", out)
        hs, out = s_client("-tls1_3")
        ok(hs, "TLS 1.3 accepted", out)
        ok(sched.poll() is None, "scheduler still running after all of it")
    finally:
        for s in held:
            s.close()
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print("1..%d" % n)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
