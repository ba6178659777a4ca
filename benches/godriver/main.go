// Command godriver is examples/kubelet_driver.py written in Go, for the chain benchmark: the
// same devices (demo-<i>, attribute index) published and prepared the same way (a CDI spec
// per claim, DEMO_DEVICE_<i>=1 per device), on k8s.io/dynamic-resource-allocation's
// kubeletplugin helper and resourceslice controller — what a Go DRA driver is built on. One process serves every simulated node, as the Python
// side does. It prints "ready" once each node's plugin is started and its pool published,
// and stops when stdin closes (the JSON-lines protocol of resourceslice.testing's jsonlines;
// it takes no commands).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"resourceslice/jsonlines"
)

type nodeDirs struct {
	Name     string `json:"name"`
	Registry string `json:"registry"`
	Plugins  string `json:"plugins"`
	CDI      string `json:"cdi"`
}

// driver prepares every device of its driver a claim was allocated: a CDI spec per claim
// whose devices each set DEMO_DEVICE_<i>=1.
type driver struct {
	name   string
	cdiDir string
}

type cdiDevice struct {
	Name           string         `json:"name"`
	ContainerEdits map[string]any `json:"containerEdits"`
}

func (d *driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, fmt.Sprintf("%s-%s.json", d.name, uid))
}

func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		var devices []cdiDevice
		var prepared []kubeletplugin.Device
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != d.name {
				continue
			}
			cdiName := fmt.Sprintf("%s-%s", claim.UID, r.Device)
			env := fmt.Sprintf("DEMO_DEVICE_%s=1", strings.TrimPrefix(r.Device, "demo-"))
			devices = append(devices, cdiDevice{Name: cdiName, ContainerEdits: map[string]any{"env": []string{env}}})
			prepared = append(prepared, kubeletplugin.Device{
				Requests:     []string{r.Request},
				PoolName:     r.Pool,
				DeviceName:   r.Device,
				CDIDeviceIDs: []string{fmt.Sprintf("%s/device=%s", d.name, cdiName)},
			})
		}
		spec, err := json.Marshal(map[string]any{"cdiVersion": "0.6.0", "kind": d.name + "/device", "devices": devices})
		if err == nil {
			err = writeAtomically(d.specPath(claim.UID), spec)
		}
		if err != nil {
			results[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: prepared}
	}
	return results, nil
}

func writeAtomically(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	results := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		err := os.Remove(d.specPath(claim.UID))
		if os.IsNotExist(err) {
			err = nil
		}
		results[claim.UID] = err
	}
	return results, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

func (d *driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the apiserver")
	driverName := flag.String("driver", "", "driver name")
	nodesJSON := flag.String("nodes", "[]", `the nodes, [{"name", "registry", "plugins", "cdi"}]`)
	count := flag.Int("devices", 8, "devices per node")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*kubeconfig, *driverName, *nodesJSON, *count); err != nil {
		fmt.Fprintln(os.Stderr, "godriver:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, driverName, nodesJSON string, count int) error {
	var nodes []nodeDirs
	if err := json.Unmarshal([]byte(nodesJSON), &nodes); err != nil {
		return fmt.Errorf("--nodes: %w", err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var helpers []*kubeletplugin.Helper
	defer func() {
		for _, helper := range helpers {
			helper.Stop()
		}
	}()
	for _, node := range nodes {
		// A client per node (client-go's defaults: 5 requests/s, burst 10), as each node's
		// driver pod has its own.
		client, err := kubernetes.NewForConfig(config)
		if err != nil {
			return err
		}
		// Go's helper expects the plugin's directory to exist (a DaemonSet's hostPath
		// volume makes it).
		dataDir := filepath.Join(node.Plugins, driverName)
		if err := os.MkdirAll(dataDir, 0o750); err != nil {
			return err
		}
		helper, err := kubeletplugin.Start(ctx, &driver{name: driverName, cdiDir: node.CDI},
			kubeletplugin.KubeClient(client),
			kubeletplugin.NodeName(node.Name),
			kubeletplugin.DriverName(driverName),
			kubeletplugin.RegistrarDirectoryPath(node.Registry),
			kubeletplugin.PluginDataDirectoryPath(dataDir),
		)
		if err != nil {
			return fmt.Errorf("node %s: %w", node.Name, err)
		}
		helpers = append(helpers, helper)
		devices := make([]resourceapi.Device, count)
		for i := range devices {
			index := int64(i)
			devices[i].Name = fmt.Sprintf("demo-%d", i)
			devices[i].Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: &index}}
		}
		// A Go driver splits its pool into slices itself: at most 128 devices each (the API's
		// limit); this library packs them.
		var slices []resourceslice.Slice
		for start := 0; start < len(devices); start += 128 {
			slices = append(slices, resourceslice.Slice{Devices: devices[start:min(start+128, len(devices))]})
		}
		resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
			node.Name: {Slices: slices},
		}}
		if err := helper.PublishResources(ctx, resources); err != nil {
			return fmt.Errorf("node %s: %w", node.Name, err)
		}
	}
	out := &jsonlines.Output{Writer: os.Stdout}
	out.Write(map[string]any{"event": "ready"})
	// Until stdin closes: the benchmark is done with us.
	jsonlines.Serve[struct{}](os.Stdin, out, nil)
	return nil
}
