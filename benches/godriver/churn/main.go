// Command churn is the Go side of the health churn benchmark (benches/test_health_churn.py):
// one pool of --devices devices, published with k8s.io/dynamic-resource-allocation's
// resourceslice controller, then a taint set or cleared on a random device --rate times a
// second for --seconds, each change a full Update of the pool, which is how Go drivers
// use the controller. Go drivers split pools into slices themselves: --per-slice devices
// each (64, the API's limit for a slice holding a tainted device).
//
// Events on stdout, one JSON object a line: "published" once the first publish is done,
// "change" per change (wall time, device, tainted), "churned" at the end. A command line
// on stdin, {"id": n}, is answered with the writes made and the CPU time used since the
// churn began (the JSON-lines loop of resourceslice.testing's jsonlines). It stops when
// stdin closes.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"resourceslice/jsonlines"
)

// writeCounter counts the ResourceSlice writes that leave the client, by method.
type writeCounter struct {
	next  http.RoundTripper
	mu    sync.Mutex
	count map[string]int
}

func (w *writeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/resourceslices") {
		w.mu.Lock()
		w.count[req.Method]++
		w.mu.Unlock()
	}
	return w.next.RoundTrip(req)
}

func (w *writeCounter) reset() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.count
	w.count = map[string]int{}
	return old
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		panic(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

var out = &jsonlines.Output{Writer: os.Stdout}

func device(i int, tainted bool) resourceapi.Device {
	d := resourceapi.Device{
		Name: fmt.Sprintf("dev-%d", i),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"index": {IntValue: ptr.To(int64(i))},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("80Gi")},
		},
	}
	if tainted {
		d.Taints = []resourceapi.DeviceTaint{{Key: "link", Value: "down", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	return d
}

// resources builds the pool as a Go driver would on each change: its device list, split.
func resources(tainted []bool, perSlice int) *resourceslice.DriverResources {
	var slices []resourceslice.Slice
	for start := 0; start < len(tainted); start += perSlice {
		end := min(start+perSlice, len(tainted))
		devices := make([]resourceapi.Device, 0, end-start)
		for i := start; i < end; i++ {
			devices = append(devices, device(i, tainted[i]))
		}
		slices = append(slices, resourceslice.Slice{Devices: devices})
	}
	return &resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{"p": {AllNodes: true, Slices: slices}},
	}
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the apiserver")
	driver := flag.String("driver", "", "driver name")
	count := flag.Int("devices", 100000, "devices in the pool")
	perSlice := flag.Int("per-slice", 64, "devices per slice")
	rate := flag.Float64("rate", 50, "changes a second")
	seconds := flag.Float64("seconds", 60, "seconds of churn")
	seed := flag.Int64("seed", 22, "seed of the random device choice")
	flag.Parse()
	klog.SetOutput(os.Stderr)

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		panic(err)
	}
	config.QPS = -1 // no client-side limit: the Python controller runs without one too
	counter := &writeCounter{count: map[string]int{}}
	config.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
		counter.next = next
		return counter
	}
	client := kubernetes.NewForConfigOrDie(config)

	tainted := make([]bool, *count)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: *driver,
		KubeClient: client,
		Resources:  resources(tainted, *perSlice),
	})
	if err != nil {
		panic(err)
	}
	defer ctrl.Stop()
	slices := int64((*count + *perSlice - 1) / *perSlice)
	for ctrl.GetStats().NumCreates < slices {
		time.Sleep(50 * time.Millisecond) // polling the controller's own counter
	}
	out.Write(map[string]any{"event": "published", "slices": slices})

	counter.reset()
	cpu := cpuSeconds()
	rng := rand.New(rand.NewSource(*seed))
	started := time.Now()
	changes := int(*rate * *seconds)
	for tick := range changes {
		time.Sleep(time.Until(started.Add(time.Duration(float64(tick) / *rate * float64(time.Second)))))
		i := rng.Intn(*count)
		tainted[i] = !tainted[i]
		out.Write(map[string]any{"event": "change", "at": float64(time.Now().UnixNano()) / 1e9, "device": fmt.Sprintf("dev-%d", i), "tainted": tainted[i]})
		ctrl.Update(resources(tainted, *perSlice))
	}
	out.Write(map[string]any{"event": "churned", "changes": changes, "seconds": time.Since(started).Seconds()})

	jsonlines.Serve(os.Stdin, out, func(command map[string]any) any {
		return map[string]any{"id": command["id"], "writes": counter.reset(), "cpu_s": cpuSeconds() - cpu}
	})
}
