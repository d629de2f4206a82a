// Kubelet device-manager stand-in written with grpc-go, the library the
// kubelet itself uses.  Same behaviour and same JSON-lines protocol as
// ../kubelet_py.py (see there): it serves Registration on <dir>/kubelet.sock,
// dials the plugin back on Register, calls GetDevicePluginOptions, keeps a
// ListAndWatch stream open and sends Allocate one container at a time.
//
// Several resources, as the kubelet's device manager keeps them: one
// connection, ListAndWatch stream and device list per registered resource
// name (a plugin registers each name with its own socket); a re-registration
// of a name replaces that name's connection only, and the stream of the
// replaced connection no longer updates the name's devices.  Every command
// may name "resource"; without it, the resource registered last.  "devices"
// events name their resource.
//
// Built at test time in GOPATH mode (GO111MODULE=off) against Debian's
// golang-google-grpc-dev; the protobuf code is generated then too.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "gvkubelet/v1beta1"
)

var outMu sync.Mutex

func emit(v map[string]interface{}) {
	outMu.Lock()
	defer outMu.Unlock()
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// plugin: one registered resource, as the kubelet's endpoint for it.
type plugin struct {
	conn    *grpc.ClientConn
	client  pb.DevicePluginClient
	healthy []string // device IDs of its last ListAndWatch, in its order
}

type kubelet struct {
	dir     string
	server  *grpc.Server
	mu      sync.Mutex
	plugins map[string]*plugin // by resource name
	last    string             // the resource registered last (commands without "resource")
	inUse   map[string]bool    // IDs handed to containers
	refuse  int                // Register calls still to refuse
}

// plugin for a command: the named resource, or the one registered last. Caller holds mu.
func (k *kubelet) pick(resource *string) *plugin {
	if resource == nil {
		return k.plugins[k.last]
	}
	return k.plugins[*resource]
}

func (k *kubelet) start() error {
	sock := filepath.Join(k.dir, "kubelet.sock")
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	k.server = grpc.NewServer()
	pb.RegisterRegistrationServer(k.server, k)
	go k.server.Serve(l)
	return nil
}

func (k *kubelet) stop() {
	if k.server != nil {
		k.server.Stop()
		k.server = nil
	}
	k.mu.Lock()
	for _, p := range k.plugins {
		p.conn.Close()
	}
	k.plugins = map[string]*plugin{}
	k.last = ""
	k.mu.Unlock()
}

func (k *kubelet) Register(ctx context.Context, r *pb.RegisterRequest) (*pb.Empty, error) {
	k.mu.Lock()
	refuse := k.refuse > 0
	if refuse {
		k.refuse--
	}
	k.mu.Unlock()
	if refuse {
		emit(map[string]interface{}{"event": "register_refused", "resource_name": r.ResourceName})
		return nil, status.Error(codes.InvalidArgument, "registration refused by the test")
	}
	if r.Version != "v1beta1" {
		return nil, fmt.Errorf("unsupported version %q", r.Version)
	}
	emit(map[string]interface{}{"event": "registered", "version": r.Version,
		"endpoint": r.Endpoint, "resource_name": r.ResourceName,
		"options": map[string]bool{
			"pre_start_required":                 r.Options.GetPreStartRequired(),
			"get_preferred_allocation_available": r.Options.GetGetPreferredAllocationAvailable()}})
	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(dctx, filepath.Join(k.dir, r.Endpoint), grpc.WithInsecure(),
		grpc.WithBlock(), grpc.WithDialer(func(addr string, t time.Duration) (net.Conn, error) {
			return net.DialTimeout("unix", addr, t)
		}))
	if err != nil {
		return nil, err
	}
	client := pb.NewDevicePluginClient(conn)
	if _, err := client.GetDevicePluginOptions(dctx, &pb.Empty{}); err != nil {
		conn.Close()
		return nil, err
	}
	p := &plugin{conn: conn, client: client}
	k.mu.Lock()
	// a re-registration replaces that resource's connection only
	if old := k.plugins[r.ResourceName]; old != nil {
		old.conn.Close()
	}
	k.plugins[r.ResourceName] = p
	k.last = r.ResourceName
	k.mu.Unlock()
	go k.watch(p, r.ResourceName)
	return &pb.Empty{}, nil
}

func (k *kubelet) watch(p *plugin, resource string) {
	client := p.client
	stream, err := client.ListAndWatch(context.Background(), &pb.Empty{})
	for err == nil {
		var msg *pb.ListAndWatchResponse
		msg, err = stream.Recv()
		if err != nil {
			break
		}
		devs := []map[string]interface{}{}
		healthy := []string{}
		for _, d := range msg.Devices {
			if d.Health == "Healthy" {
				healthy = append(healthy, d.ID)
			}
			numa := []int64{}
			if d.Topology != nil {
				for _, n := range d.Topology.Nodes {
					numa = append(numa, n.ID)
				}
			}
			devs = append(devs, map[string]interface{}{"id": d.ID, "health": d.Health, "numa": numa})
		}
		k.mu.Lock()
		p.healthy = healthy // the replaced connection's plugin is no longer in k.plugins
		k.mu.Unlock()
		emit(map[string]interface{}{"event": "devices", "resource": resource, "devices": devs,
			"size": msg.XXX_Size()})
	}
	st := status.Convert(err)
	emit(map[string]interface{}{"event": "stream_end", "code": int(st.Code()), "message": st.Message()})
}

func (k *kubelet) call(name string, resource *string, fn func(pb.DevicePluginClient, context.Context) (map[string]interface{}, error)) {
	k.mu.Lock()
	var client pb.DevicePluginClient
	if p := k.pick(resource); p != nil {
		client = p.client
	}
	k.mu.Unlock()
	if client == nil {
		emit(map[string]interface{}{"event": name, "ok": false, "code": -1, "message": "plugin not registered"})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := fn(client, ctx)
	if err != nil {
		st := status.Convert(err)
		emit(map[string]interface{}{"event": name, "ok": false, "code": int(st.Code()), "message": st.Message()})
		return
	}
	res["event"] = name
	res["ok"] = true
	emit(res)
}

func respJSON(r *pb.ContainerAllocateResponse) map[string]interface{} {
	mounts := []map[string]interface{}{}
	for _, m := range r.Mounts {
		mounts = append(mounts, map[string]interface{}{"container_path": m.ContainerPath,
			"host_path": m.HostPath, "read_only": m.ReadOnly})
	}
	devs := []map[string]interface{}{}
	for _, d := range r.Devices {
		devs = append(devs, map[string]interface{}{"container_path": d.ContainerPath,
			"host_path": d.HostPath, "permissions": d.Permissions})
	}
	cdi := []string{}
	for _, c := range r.CdiDevices {
		cdi = append(cdi, c.Name)
	}
	envs, ann := r.Envs, r.Annotations
	if envs == nil {
		envs = map[string]string{}
	}
	if ann == nil {
		ann = map[string]string{}
	}
	return map[string]interface{}{"envs": envs, "annotations": ann, "mounts": mounts,
		"devices": devs, "cdi_devices": cdi}
}

// admit: what the kubelet's device manager does for one container (see
// kubelet_py.py): GetPreferredAllocation when there is a choice, then
// Allocate with the preferred IDs (ignore: none asked, the first N taken).
func (k *kubelet) admit(size int32, ignore bool, resource *string) {
	k.mu.Lock()
	avail := []string{}
	var healthy []string
	if p := k.pick(resource); p != nil {
		healthy = p.healthy
	}
	for _, id := range healthy {
		if !k.inUse[id] {
			avail = append(avail, id)
		}
	}
	k.mu.Unlock()
	if int(size) > len(avail) {
		emit(map[string]interface{}{"event": "admit", "ok": false, "code": -1,
			"message": fmt.Sprintf("only %d devices available", len(avail))})
		return
	}
	k.call("admit", resource, func(cl pb.DevicePluginClient, ctx context.Context) (map[string]interface{}, error) {
		preferred := []string{}
		ids := append([]string{}, avail[:size]...)
		if int(size) < len(avail) && !ignore {
			r, err := cl.GetPreferredAllocation(ctx, &pb.PreferredAllocationRequest{
				ContainerRequests: []*pb.ContainerPreferredAllocationRequest{{
					AvailableDeviceIDs: avail, AllocationSize: size}}})
			if err != nil {
				return nil, err
			}
			preferred = append(preferred, r.ContainerResponses[0].DeviceIDs...)
			valid := len(preferred) == int(size)
			for _, p := range preferred {
				found := false
				for _, a := range avail {
					found = found || a == p
				}
				valid = valid && found
			}
			if valid {
				ids = preferred
			}
		}
		r, err := cl.Allocate(ctx, &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: ids}}})
		if err != nil {
			return nil, err
		}
		k.mu.Lock()
		for _, id := range ids {
			k.inUse[id] = true
		}
		k.mu.Unlock()
		return map[string]interface{}{"preferred": preferred, "ids": ids,
			"resp": respJSON(r.ContainerResponses[0])}, nil
	})
}

type command struct {
	Ignore    bool     `json:"ignore_preference"`
	Cmd       string   `json:"cmd"`
	IDs       []string `json:"ids"`
	Available []string `json:"available"`
	Must      []string `json:"must"`
	Size      int32    `json:"size"`
	Count     int      `json:"count"`
	Resource  *string  `json:"resource"`
}

func main() {
	k := &kubelet{dir: os.Args[1], inUse: map[string]bool{}, plugins: map[string]*plugin{}}
	if err := k.start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	emit(map[string]interface{}{"event": "ready"})
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			emit(map[string]interface{}{"event": "error", "message": err.Error()})
			continue
		}
		switch c.Cmd {
		case "quit":
			k.stop()
			return
		case "allocate":
			k.call("allocate", c.Resource, func(cl pb.DevicePluginClient, ctx context.Context) (map[string]interface{}, error) {
				r, err := cl.Allocate(ctx, &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: c.IDs}}})
				if err != nil {
					return nil, err
				}
				return map[string]interface{}{"resp": respJSON(r.ContainerResponses[0])}, nil
			})
		case "preferred":
			k.call("preferred", c.Resource, func(cl pb.DevicePluginClient, ctx context.Context) (map[string]interface{}, error) {
				r, err := cl.GetPreferredAllocation(ctx, &pb.PreferredAllocationRequest{
					ContainerRequests: []*pb.ContainerPreferredAllocationRequest{{
						AvailableDeviceIDs: c.Available, MustIncludeDeviceIDs: c.Must, AllocationSize: c.Size}}})
				if err != nil {
					return nil, err
				}
				ids := r.ContainerResponses[0].DeviceIDs
				if ids == nil {
					ids = []string{}
				}
				return map[string]interface{}{"ids": ids}, nil
			})
		case "admit":
			k.admit(c.Size, c.Ignore, c.Resource)
		case "release":
			k.mu.Lock()
			for _, id := range c.IDs {
				delete(k.inUse, id)
			}
			k.mu.Unlock()
		case "options":
			k.call("options", c.Resource, func(cl pb.DevicePluginClient, ctx context.Context) (map[string]interface{}, error) {
				o, err := cl.GetDevicePluginOptions(ctx, &pb.Empty{})
				if err != nil {
					return nil, err
				}
				return map[string]interface{}{"pre_start_required": o.PreStartRequired,
					"get_preferred_allocation_available": o.GetPreferredAllocationAvailable}, nil
			})
		case "prestart":
			k.call("prestart", c.Resource, func(cl pb.DevicePluginClient, ctx context.Context) (map[string]interface{}, error) {
				_, err := cl.PreStartContainer(ctx, &pb.PreStartContainerRequest{DevicesIds: c.IDs})
				return map[string]interface{}{}, err
			})
		case "refuse":
			k.mu.Lock()
			k.refuse = c.Count
			k.mu.Unlock()
			emit(map[string]interface{}{"event": "refuse"})
		case "restart":
			k.stop()
			matches, _ := filepath.Glob(filepath.Join(k.dir, "*"))
			for _, m := range matches {
				os.Remove(m)
			}
			if err := k.start(); err != nil {
				emit(map[string]interface{}{"event": "error", "message": err.Error()})
				continue
			}
			emit(map[string]interface{}{"event": "restarted"})
		default:
			emit(map[string]interface{}{"event": "error", "message": "unknown command " + c.Cmd})
		}
	}
	k.stop()
}
