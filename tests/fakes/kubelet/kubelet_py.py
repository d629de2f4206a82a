#!/usr/bin/python3
"""Kubelet device-manager stand-in written with Python grpcio.

A real kubelet cannot run here, so this plays its device-plugin half with a
real gRPC peer: it serves Registration on <dir>/kubelet.sock, and on each
Register it dials the plugin back, calls GetDevicePluginOptions and keeps a
ListAndWatch stream open, as the kubelet's device manager does.  Allocate is
sent one container per request, with no pod identity in it.

Driven by JSON lines on stdin; reports JSON lines on stdout (the protocol is
shared with the grpc-go stand-in, kubelet_go, so one test drives both):
  {"cmd":"allocate","ids":[...]}         -> {"event":"allocate",...}
  {"cmd":"admit","size":N[,"ignore_preference":true]} -> {"event":"admit","preferred":[...],"ids":[...],...}
      what the kubelet's device manager does for one container: available =
      healthy devices of the last ListAndWatch minus those in use; when there
      is a choice, GetPreferredAllocation, then Allocate with the preferred IDs
      (ignore_preference: no preference asked, the first N available taken, as
      a kubelet whose TopologyManager decides); the IDs are in use on success
  {"cmd":"release","ids":[...]}           the container's pod is gone: IDs free again
  {"cmd":"preferred","available":[...],"must":[...],"size":N}
  {"cmd":"options"} {"cmd":"prestart","ids":[...]}
  {"cmd":"restart"}   kubelet restart: sockets deleted, kubelet.sock recreated
  {"cmd":"refuse","count":N}  the next N Register calls fail (INVALID_ARGUMENT,
      as a kubelet refuses a registration it rejects), each reported as
      {"event":"register_refused"}; answers {"event":"refuse"}
  {"cmd":"quit"}
Every command may name "resource": the plugin registered for that resource
(a plugin may register several, one socket each, as the kubelet allows);
without it, the one registered last.  "devices" events name their resource.
Events: registered, devices (each ListAndWatch message), stream_end,
allocate/preferred/options/prestart replies, restarted, error.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent import futures

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "..", "proto", "deviceplugin", "v1beta1", "api.proto")

_out_lock = threading.Lock()


def emit(obj):
    with _out_lock:
        sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
        sys.stdout.flush()


def load_proto():
    """Compiles api.proto at run time: generated code stays out of git."""
    gen = tempfile.mkdtemp(prefix="kubelet-py-")
    src = os.path.join(gen, "deviceplugin.proto")
    with open(PROTO) as f, open(src, "w") as g:
        g.write(f.read())
    subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc", "-I", gen,
                           "--python_out", gen, "--grpc_python_out", gen, src])
    sys.path.insert(0, gen)
    try:
        import deviceplugin_pb2 as pb
        import deviceplugin_pb2_grpc as pbg
    finally:
        # The modules are loaded: the generated tree is not read again, so it
        # does not outlive the run (one per stand-in start, thousands a suite).
        sys.path.remove(gen)
        shutil.rmtree(gen, ignore_errors=True)
    return pb, pbg


pb, pbg = load_proto()


def resp_to_json(r):
    return {
        "envs": dict(r.envs),
        "annotations": dict(r.annotations),
        "mounts": [{"container_path": m.container_path, "host_path": m.host_path,
                    "read_only": m.read_only} for m in r.mounts],
        "devices": [{"container_path": d.container_path, "host_path": d.host_path,
                     "permissions": d.permissions} for d in r.devices],
        "cdi_devices": [c.name for c in r.cdi_devices],
    }


class Kubelet(pbg.RegistrationServicer):
    def __init__(self, directory):
        self.dir = directory
        self.server = None
        self.channel = None
        self.stub = None
        self.lock = threading.Lock()
        self.healthy = []   # device IDs of the last ListAndWatch, in its order
        self.in_use = set()
        # per resource name: (channel, stub) and its healthy devices, as the kubelet keeps them
        self.plugins = {}
        self.healthy_by = {}
        self.refuse = 0     # Register calls still to refuse

    def start(self):
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pbg.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port("unix://" + os.path.join(self.dir, "kubelet.sock"))
        self.server.start()

    def stop(self):
        if self.server:
            self.server.stop(0).wait()
            self.server = None
        with self.lock:
            for ch, _ in self.plugins.values():
                ch.close()
            if self.channel:
                self.channel.close()
            self.plugins = {}
            self.channel = self.stub = None

    def Register(self, request, context):
        with self.lock:
            refuse = self.refuse > 0
            if refuse:
                self.refuse -= 1
        if refuse:
            emit({"event": "register_refused", "resource_name": request.resource_name})
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "registration refused by the test")
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "unsupported version %r" % request.version)
        emit({"event": "registered", "version": request.version,
              "endpoint": request.endpoint, "resource_name": request.resource_name,
              "options": {"pre_start_required": request.options.pre_start_required,
                          "get_preferred_allocation_available":
                              request.options.get_preferred_allocation_available}})
        channel = grpc.insecure_channel("unix://" + os.path.join(self.dir, request.endpoint))
        stub = pbg.DevicePluginStub(channel)
        # Like the kubelet: the plugin must answer before Register returns.
        stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
        with self.lock:
            # a re-registration replaces that resource's connection only: the
            # kubelet keeps one per resource name
            old = self.plugins.get(request.resource_name)
            if old:
                old[0].close()
            elif self.channel and self.channel not in [c for c, _ in self.plugins.values()]:
                self.channel.close()
            self.channel, self.stub = channel, stub
            self.plugins[request.resource_name] = (channel, stub)
        threading.Thread(target=self.watch, args=(stub, request.resource_name), daemon=True).start()
        return pb.Empty()

    def watch(self, stub, resource=""):
        try:
            for msg in stub.ListAndWatch(pb.Empty()):
                with self.lock:
                    self.healthy = [d.ID for d in msg.devices if d.health == "Healthy"]
                    self.healthy_by[resource] = list(self.healthy)
                emit({"event": "devices", "resource": resource, "devices": [
                    {"id": d.ID, "health": d.health,
                     "numa": [n.ID for n in d.topology.nodes]} for d in msg.devices],
                    "size": msg.ByteSize()})
            emit({"event": "stream_end", "code": 0, "message": ""})
        except grpc.RpcError as e:
            emit({"event": "stream_end", "code": e.code().value[0], "message": e.details()})

    def call(self, name, fn, resource=None):
        stub = self.stub
        if resource is not None:
            with self.lock:
                stub = self.plugins.get(resource, (None, None))[1]
        if stub is None:
            emit({"event": name, "ok": False, "code": -1, "message": "plugin not registered"})
            return
        try:
            emit(dict({"event": name, "ok": True}, **fn(stub)))
        except grpc.RpcError as e:
            emit({"event": name, "ok": False, "code": e.code().value[0], "message": e.details()})

    def admit(self, size, ignore_preference, resource=None):
        with self.lock:
            healthy = self.healthy if resource is None else self.healthy_by.get(resource, [])
            avail = [d for d in healthy if d not in self.in_use]

        def run(s):
            if len(avail) < size:
                raise RuntimeError("only %d devices available" % len(avail))
            preferred = []
            ids = avail[:size]
            if size < len(avail) and not ignore_preference:
                r = s.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
                    pb.ContainerPreferredAllocationRequest(available_deviceIDs=avail, allocation_size=size)]),
                    timeout=10)
                preferred = list(r.container_responses[0].deviceIDs)
                if len(preferred) == size and all(i in avail for i in preferred):
                    ids = preferred
            r = s.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=10)
            with self.lock:
                self.in_use.update(ids)
            return {"preferred": preferred, "ids": ids, "resp": resp_to_json(r.container_responses[0])}
        try:
            self.call("admit", run, resource)
        except RuntimeError as e:
            emit({"event": "admit", "ok": False, "code": -1, "message": str(e)})

    def restart(self):
        """What a kubelet restart looks like to a plugin."""
        self.stop()
        for path in glob.glob(os.path.join(self.dir, "*")):
            try:
                os.unlink(path)
            except OSError:
                pass
        self.start()
        emit({"event": "restarted"})


def main():
    k = Kubelet(sys.argv[1])
    k.start()
    emit({"event": "ready"})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        c = json.loads(line)
        cmd = c["cmd"]
        if cmd == "quit":
            break
        elif cmd == "allocate":
            req = pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=c["ids"])])
            k.call("allocate", lambda s: {"resp": resp_to_json(
                s.Allocate(req, timeout=c.get("timeout", 10)).container_responses[0])},
                c.get("resource"))
        elif cmd == "preferred":
            req = pb.PreferredAllocationRequest(container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=c["available"], must_include_deviceIDs=c.get("must", []),
                    allocation_size=c["size"])])
            k.call("preferred", lambda s: {"ids": list(
                s.GetPreferredAllocation(req, timeout=10).container_responses[0].deviceIDs)})
        elif cmd == "admit":
            k.admit(c["size"], c.get("ignore_preference", False), c.get("resource"))
        elif cmd == "release":
            with k.lock:
                k.in_use.difference_update(c["ids"])
        elif cmd == "options":
            def opts(s):
                o = s.GetDevicePluginOptions(pb.Empty(), timeout=10)
                return {"pre_start_required": o.pre_start_required,
                        "get_preferred_allocation_available": o.get_preferred_allocation_available}
            k.call("options", opts)
        elif cmd == "prestart":
            k.call("prestart", lambda s: (s.PreStartContainer(
                pb.PreStartContainerRequest(devices_ids=c["ids"]), timeout=10), {})[1])
        elif cmd == "restart":
            k.restart()
        elif cmd == "refuse":
            with k.lock:
                k.refuse = int(c["count"])
            emit({"event": "refuse"})
        else:
            emit({"event": "error", "message": "unknown command %r" % cmd})
    k.stop()


if __name__ == "__main__":
    main()
