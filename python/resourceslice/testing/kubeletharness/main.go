// Command kubeletharness runs the parts of kubelet that talk to a DRA driver's kubelet
// plugin, taken from kubelet's own code: the plugin manager (its watcher of the
// plugin-registration directory and its reconciler, which calls GetInfo and
// NotifyRegistrationStatus), and the DRA plugin manager (the registration handler and gRPC
// client that kubelet's DRA manager calls NodePrepareResources/NodeUnprepareResources through).
//
// It speaks JSON lines (../jsonlines): commands on stdin, answers and events on stdout.
//
//	stdin:  {"id": 1, "op": "prepare"|"unprepare", "driver": "...",
//	         "claims": [{"namespace": "...", "name": "...", "uid": "..."}]}
//	stdout: {"event": "ready"}
//	        {"event": "register", "driver": ..., "endpoint": ..., "versions": [...], "error": ...}
//	        {"event": "deregister", "driver": ..., "endpoint": ...}
//	        {"event": "health", "driver": ..., "devices": [{"pool", "device", "health", ...}]}
//	        {"id": 1, "claims": {"<uid>": {"error": ..., "devices": [...]}}, "error": ...}
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"resourceslice/jsonlines"
)

// recordingHandler is kubelet's DRA handler with each registration reported on stdout, so
// that a test can wait for kubelet to have taken the plugin in (or out).
type recordingHandler struct {
	*plugin.DRAPluginManager
	out *jsonlines.Output
}

var _ cache.PluginHandler = recordingHandler{}

func (h recordingHandler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.DRAPluginManager.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	h.out.Write(map[string]any{"event": "register", "driver": name, "endpoint": endpoint, "versions": versions, "error": jsonlines.ErrorString(err)})
	return err
}

func (h recordingHandler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.DRAPluginManager.DeRegisterPlugin(ctx, name, endpoint)
	h.out.Write(map[string]any{"event": "deregister", "driver": name, "endpoint": endpoint})
}

// healthRecorder takes the place of kubelet's health-info cache: it reports every message of
// a plugin's NodeWatchResources stream.
type healthRecorder struct{ out *jsonlines.Output }

func (h healthRecorder) HandleWatchResourcesStream(ctx context.Context, stream drahealthv1.DRAResourceHealth_NodeWatchResourcesClient, driver string) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		devices := []map[string]any{}
		for _, d := range resp.GetDevices() {
			devices = append(devices, map[string]any{
				"pool":           d.GetDevice().GetPoolName(),
				"device":         d.GetDevice().GetDeviceName(),
				"health":         d.GetHealth().String(),
				"lastUpdated":    d.GetLastUpdatedTime(),
				"timeoutSeconds": d.GetHealthCheckTimeoutSeconds(),
				"message":        d.GetMessage(),
			})
		}
		h.out.Write(map[string]any{"event": "health", "driver": driver, "devices": devices})
	}
}

type command struct {
	ID     int    `json:"id"`
	Op     string `json:"op"`
	Driver string `json:"driver"`
	Claims []struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		UID       string `json:"uid"`
	} `json:"claims"`
}

type claimResult struct {
	Error   string           `json:"error"`
	Devices []map[string]any `json:"devices"`
}

// call is what kubelet's DRA manager does for a pod's claims: look the driver's plugin up in
// the plugin manager and call the chosen gRPC service version through kubelet's client.
func call(ctx context.Context, pm *plugin.DRAPluginManager, cmd command) map[string]any {
	answer := map[string]any{"id": cmd.ID}
	p, err := pm.GetPlugin(cmd.Driver)
	if err != nil {
		answer["error"] = err.Error()
		return answer
	}
	claims := make([]*drapbv1.Claim, 0, len(cmd.Claims))
	for _, c := range cmd.Claims {
		claims = append(claims, &drapbv1.Claim{Namespace: c.Namespace, Name: c.Name, Uid: c.UID})
	}
	results := map[string]claimResult{}
	switch cmd.Op {
	case "prepare":
		resp, err := p.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: claims})
		if err != nil {
			answer["error"] = err.Error()
			return answer
		}
		for uid, r := range resp.GetClaims() {
			devices := []map[string]any{}
			for _, d := range r.GetDevices() {
				device := map[string]any{
					"requestNames": d.GetRequestNames(),
					"poolName":     d.GetPoolName(),
					"deviceName":   d.GetDeviceName(),
					"cdiDeviceIDs": d.GetCdiDeviceIds(),
				}
				if d.ShareId != nil {
					device["shareID"] = d.GetShareId()
				}
				devices = append(devices, device)
			}
			results[uid] = claimResult{Error: r.GetError(), Devices: devices}
		}
	case "unprepare":
		resp, err := p.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: claims})
		if err != nil {
			answer["error"] = err.Error()
			return answer
		}
		for uid, r := range resp.GetClaims() {
			results[uid] = claimResult{Error: r.GetError()}
		}
	default:
		answer["error"] = fmt.Sprintf("unknown op %q", cmd.Op)
		return answer
	}
	answer["claims"] = results
	return answer
}

func main() {
	registryDir := flag.String("registry-dir", "/var/lib/kubelet/plugins_registry", "the plugin-registration directory kubelet watches")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &jsonlines.Output{Writer: os.Stdout}

	// No client: kubelet's wiping of the node's ResourceSlices when a driver goes away is
	// not part of what this harness checks, and it would race with the driver's publisher.
	draManager := plugin.NewDRAPluginManager(ctx, nil, nil, healthRecorder{out: out}, 30*time.Second)
	manager := pluginmanager.NewPluginManager(*registryDir, record.NewFakeRecorder(100))
	manager.AddHandler(registerapi.DRAPlugin, recordingHandler{DRAPluginManager: draManager, out: out})
	stop := make(chan struct{})
	go manager.Run(ctx, config.NewSourcesReady(func(sets.Set[string]) bool { return true }), stop)
	out.Write(map[string]any{"event": "ready"})

	// Calls run concurrently, as kubelet prepares the claims of several pods at once.
	jsonlines.Serve(os.Stdin, out, func(cmd command) any { return call(ctx, draManager, cmd) })
	// stdin closed: the test is done with us.
	close(stop)
	draManager.Stop()
}
