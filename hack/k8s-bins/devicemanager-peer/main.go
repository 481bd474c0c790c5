// Command devicemanager-peer plays the kubelet's side of the device plugin API
// with the kubelet's own device-manager code, so fluence's device plugin is
// checked against the real registration server and endpoint client rather than
// against a re-implementation of them.
//
// It serves kubelet.sock in -dir (removing stale sockets there first, as a
// starting kubelet does), accepts registrations, connects back to each plugin,
// follows its ListAndWatch stream, and prints one JSON object per line on
// stdout:
//
//	{"event":"connected","resource":"...","pre_start_required":false,"get_preferred_allocation_available":true}
//	{"event":"devices","resource":"...","count":1000,"healthy":1000}
//	{"event":"allocated","resource":"...","devices":["..."],"envs":{...}}
//	{"event":"done","resources":3}
//
// It exits 0 once -expect resources have each reported a healthy device list
// (and, with -allocate, answered an Allocate call). When -timeout passes
// first it prints a "timeout" event and exits 1 if -expect was set (0 if it
// was only watching). Build it from this module:
//
//	cd hack/k8s-bins && CGO_ENABLED=0 go build -o /tmp/devicemanager-peer ./devicemanager-peer
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

// peer records what the plugins told it and decides when it has seen enough.
type peer struct {
	mu       sync.Mutex
	out      *json.Encoder
	expect   int
	allocate bool
	plugins  map[string]plugin.DevicePlugin
	ready    map[string]bool
	done     chan struct{}
	closed   bool
}

func (p *peer) emit(v map[string]any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.out.Encode(v)
}

// CleanupPluginDirectory removes the sockets a previous kubelet left behind,
// keeping directories and regular files (the kubelet keeps its checkpoint).
func (p *peer) CleanupPluginDirectory(_ klog.Logger, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		info, err := os.Stat(path)
		if err != nil || info.IsDir() || info.Mode()&os.ModeSocket == 0 {
			continue
		}
		if err := os.Remove(path); err != nil {
			return err
		}
	}
	return nil
}

func (p *peer) PluginConnected(ctx context.Context, resource string, dp plugin.DevicePlugin) error {
	opts, err := dp.API().GetDevicePluginOptions(ctx, &api.Empty{})
	if err != nil {
		return fmt.Errorf("GetDevicePluginOptions for %s: %w", resource, err)
	}
	p.mu.Lock()
	p.plugins[resource] = dp
	p.mu.Unlock()
	p.emit(map[string]any{
		"event":                              "connected",
		"resource":                           resource,
		"pre_start_required":                 opts.PreStartRequired,
		"get_preferred_allocation_available": opts.GetPreferredAllocationAvailable,
	})
	return nil
}

func (p *peer) PluginDisconnected(_ klog.Logger, resource string, socket string) {
	p.emit(map[string]any{"event": "disconnected", "resource": resource, "socket": socket})
}

func (p *peer) PluginListAndWatchReceiver(_ klog.Logger, resource string, resp *api.ListAndWatchResponse) {
	healthy := 0
	for _, d := range resp.Devices {
		if d.Health == api.Healthy {
			healthy++
		}
	}
	p.emit(map[string]any{
		"event":    "devices",
		"resource": resource,
		"count":    len(resp.Devices),
		"healthy":  healthy,
	})
	if healthy == 0 {
		return
	}
	if !p.allocate {
		p.markReady(resource)
		return
	}
	first := resp.Devices[0].ID
	go p.tryAllocate(resource, first)
}

func (p *peer) tryAllocate(resource, deviceID string) {
	p.mu.Lock()
	dp := p.plugins[resource]
	p.mu.Unlock()
	if dp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := dp.API().Allocate(ctx, &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{deviceID}}},
	})
	if err != nil {
		p.emit(map[string]any{"event": "allocate_failed", "resource": resource, "error": err.Error()})
		return
	}
	envs := map[string]string{}
	if len(resp.ContainerResponses) > 0 {
		envs = resp.ContainerResponses[0].Envs
	}
	p.emit(map[string]any{
		"event":      "allocated",
		"resource":   resource,
		"devices":    []string{deviceID},
		"containers": len(resp.ContainerResponses),
		"envs":       envs,
	})
	p.markReady(resource)
}

func (p *peer) markReady(resource string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready[resource] = true
	if !p.closed && p.expect > 0 && len(p.ready) >= p.expect {
		p.closed = true
		close(p.done)
	}
}

func main() {
	dir := flag.String("dir", "", "directory to serve kubelet.sock in (absolute path; required)")
	expect := flag.Int("expect", 0, "exit 0 after this many resources reported healthy devices (0: run until -timeout)")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	allocate := flag.Bool("allocate", false, "call Allocate with one device of every resource before counting it as seen")
	flag.Parse()
	if *dir == "" || !filepath.IsAbs(*dir) {
		fmt.Fprintln(os.Stderr, "devicemanager-peer: -dir must be an absolute directory path")
		os.Exit(2)
	}

	p := &peer{
		out:      json.NewEncoder(os.Stdout),
		expect:   *expect,
		allocate: *allocate,
		plugins:  map[string]plugin.DevicePlugin{},
		ready:    map[string]bool{},
		done:     make(chan struct{}),
	}
	logger := klog.Background()
	srv, err := plugin.NewServer(logger, filepath.Join(*dir, api.KubeletSocket[len(api.DevicePluginPath):]), p, p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "devicemanager-peer: cannot create the registration server: %v\n", err)
		os.Exit(2)
	}
	if err := srv.Start(logger); err != nil {
		fmt.Fprintf(os.Stderr, "devicemanager-peer: cannot start the registration server: %v\n", err)
		os.Exit(2)
	}
	p.emit(map[string]any{"event": "serving", "socket": srv.SocketPath()})

	code := 0
	select {
	case <-p.done:
		p.mu.Lock()
		n := len(p.ready)
		p.mu.Unlock()
		p.emit(map[string]any{"event": "done", "resources": n})
	case <-time.After(*timeout):
		p.emit(map[string]any{"event": "timeout"})
		if *expect > 0 {
			code = 1
		}
	}
	_ = srv.Stop(logger)
	os.Exit(code)
}
