// Command allocview prints the scheduler's view of one pool after every change to its
// ResourceSlices: the oracle of the controller's write ordering (docs/core.md §5).
//
// It lists the driver's slices, then watches them from that resourceVersion, applying each
// event to its own copy (not an informer's store, which may already hold later events when a
// handler runs), and after each event asks the allocator of
// k8s.io/dynamic-resource-allocation/structured for every device of the driver on the node
// (allocationMode All). The allocator answers with the devices it would use, or refuses
// because a pool is incomplete ("being updated") or invalid. One JSON line per view on
// stdout: {"slice", "rv", "deleted", "state": "complete"|"incomplete"|"invalid"|"none"|"error",
// "devices", "reason"}: the event's slice and resourceVersion, then the allocator's answer.
// A line {"ready": true} follows the first view, so the caller knows the watch is open.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

const className = "allocview"

// classes serves the one DeviceClass the claim asks for: every device of the driver.
type classes struct{ class *resourceapi.DeviceClass }

func (c classes) List() ([]*resourceapi.DeviceClass, error) {
	return []*resourceapi.DeviceClass{c.class}, nil
}

func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if name != className {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return c.class, nil
}

type view struct {
	// The event's slice, its resourceVersion, and whether it was deleted.
	Slice   string   `json:"slice,omitempty"`
	RV      string   `json:"rv"`
	Deleted bool     `json:"deleted,omitempty"`
	State   string   `json:"state"`
	Devices []string `json:"devices"`
	Reason  string   `json:"reason,omitempty"`
}

// allocate asks the allocator for all devices of the driver on the node, given slices.
func allocate(ctx context.Context, lister classes, node *v1.Node, claim *resourceapi.ResourceClaim, slices map[string]*resourceapi.ResourceSlice) view {
	list := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, s := range slices {
		list = append(list, s)
	}
	allocator, err := structured.NewAllocator(ctx, structured.Features{}, structured.AllocatedState{}, lister, list, cel.NewCache(10, cel.Features{}))
	if err != nil {
		return view{State: "error", Reason: err.Error()}
	}
	results, err := allocator.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
	switch {
	case err != nil && strings.Contains(err.Error(), "is currently being updated"):
		return view{State: "incomplete", Reason: err.Error()}
	case err != nil && strings.Contains(err.Error(), "is currently invalid"):
		return view{State: "invalid", Reason: err.Error()}
	case err != nil:
		return view{State: "error", Reason: err.Error()}
	case len(results) == 0:
		return view{State: "none"}
	}
	devices := []string{}
	for _, r := range results[0].Devices.Results {
		devices = append(devices, r.Device)
	}
	sort.Strings(devices)
	return view{State: "complete", Devices: devices}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	driver := flag.String("driver", "", "the driver whose devices are asked for")
	nodeName := flag.String("node", "", "the node the claim is allocated on")
	flag.Parse()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx := context.Background()
	selector := fmt.Sprintf(`device.driver == %q`, *driver)
	lister := classes{&resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: className},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: selector}},
		}},
	}}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "all", Namespace: "default", UID: "allocview"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{
				Name: "all",
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: className,
					AllocationMode:  resourceapi.DeviceAllocationModeAll,
				},
			}},
		}},
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: *nodeName}}

	field := "spec.driver=" + *driver
	slices := map[string]*resourceapi.ResourceSlice{}
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: field})
	if err != nil {
		return err
	}
	for i := range list.Items {
		slices[list.Items[i].Name] = &list.Items[i]
	}
	out := json.NewEncoder(os.Stdout)
	emit := func(name, rv string, deleted bool) error {
		v := allocate(ctx, lister, node, claim, slices)
		v.Slice, v.RV, v.Deleted = name, rv, deleted
		return out.Encode(v)
	}
	if err := emit("", list.ResourceVersion, false); err != nil {
		return err
	}
	w, err := client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{
		FieldSelector:   field,
		ResourceVersion: list.ResourceVersion,
	})
	if err != nil {
		return err
	}
	if err := out.Encode(map[string]bool{"ready": true}); err != nil {
		return err
	}
	for event := range w.ResultChan() {
		slice, ok := event.Object.(*resourceapi.ResourceSlice)
		if !ok {
			return fmt.Errorf("watch: %v %v", event.Type, event.Object)
		}
		switch event.Type {
		case watch.Added, watch.Modified:
			slices[slice.Name] = slice
		case watch.Deleted:
			delete(slices, slice.Name)
		default:
			return fmt.Errorf("watch: unexpected %v", event.Type)
		}
		if err := emit(slice.Name, slice.ResourceVersion, event.Type == watch.Deleted); err != nil {
			return err
		}
	}
	return fmt.Errorf("watch closed")
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "allocview:", err)
		os.Exit(1)
	}
}
