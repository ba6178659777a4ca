// Command slicevectors writes ResourceSlice validation vectors as JSON: generated pools in
// the plain shape resourceslice's cores take, and the verdict the apiserver's own code gives
// on every ResourceSlice they publish as, with the field path of each error.
//
// A case is one pool with explicit slices (our input), plus the driver and the node name a
// Node owner gives. Each slice is rendered as the object the controller would create
// (spec.pool from the pool, the pool's node selection, the slice's fields) and put through
// what the apiserver does with a create: decode the v1 JSON with the legacy scheme
// (defaulting, conversion to the internal type), the registry strategy's PrepareForCreate
// (which drops fields of disabled features), then rest.ValidateCreate: the hand-written
// ResourceSlice validation and the declarative validation, merged as the server merges them.
// The feature gates are those the test apiserver switches on (sliceFeatureGates in
// python/resourceslice/testing/apiserver/main.go; tests/core/test_slice_vectors.py checks the
// two lists agree).
//
// Every field of the v1 ResourceSliceSpec (read from the Go types) must be set by some case,
// or the generation fails (coverage.go).
//
// Moving to the next Kubernetes release: bump the versions in go.mod (the same pins as the
// test apiserver's module, so the module and build caches are shared), then regenerate
// (tests/vectors/README.md):
//
//	cd tests/vectors/slicegen && GOFLAGS=-mod=mod go run . > ../slices.json
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	_ "k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/registry/resource/resourceslice"
)

// featureGates: the test apiserver's sliceFeatureGates.
var featureGates = []string{
	"DRADeviceTaints",
	"DRAPartitionableDevices",
	"DRAPartitionableDevicesType",
	"DRAResourcePoolStatus",
	"DRAConsumableCapacity",
	"DRADeviceBindingConditions",
	"DRAListTypeAttributes",
	"DRAOptionalNodeOperations",
	"DRADeviceCompatibilityGroups",
	"DRAFractionalCapacityRange",
	"DRANodeAllocatableResources",
}

type (
	M = map[string]any
	L = []any
)

// fieldError is one error of the server, on the slice at index Slice of the pool.
type fieldError struct {
	Slice  int    `json:"slice"`
	Path   string `json:"path"`
	Type   string `json:"type"`
	Detail string `json:"detail"`
}

type vector struct {
	Name   string       `json:"name"`
	Driver string       `json:"driver"`
	Pools  map[string]M `json:"pools"`
	Valid  bool         `json:"valid"`
	Errors []fieldError `json:"errors"`
}

// kase is one generated input: a driver and one pool in our plain shape.
type kase struct {
	name   string
	driver string
	pool   string
	plain  M
}

const (
	driver = "gpu.example.com"
	node   = "node-1"
)

// pool is a pool of explicit slices published on all nodes; options override its members.
func pool(slices ...M) M {
	l := L{}
	for _, s := range slices {
		l = append(l, s)
	}
	return M{"devices": nil, "slices": l, "nodeSelector": nil, "allNodes": true, "generation": 0, "nodeName": nil}
}

// slice is an explicit slice with these devices.
func slice(devices ...any) M {
	return M{"devices": L(devices), "sharedCounters": nil, "perDeviceNodeSelection": nil, "partitionTypeAttribute": nil, "skipNodeOperations": nil}
}

func with(m M, kv ...any) M {
	out := M{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// dev is a device named name with the given members.
func dev(name string, kv ...any) M {
	return with(M{"name": name}, kv...)
}

func devices(n int, kv ...any) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = dev(fmt.Sprintf("dev-%d", i), kv...)
	}
	return out
}

// render is the ResourceSlice the controller publishes for slice i of p (see plan_pool):
// the pool's node selection, the slice's own fields; empty slice-level lists are not sent.
func render(drv, poolName string, p M, i int) M {
	slices := p["slices"].(L)
	s := slices[i].(M)
	spec := M{
		"driver": drv,
		"pool":   M{"name": poolName, "generation": p["generation"], "resourceSliceCount": len(slices)},
	}
	if v := p["nodeName"]; v != nil {
		spec["nodeName"] = v
	}
	if v := p["nodeSelector"]; v != nil {
		spec["nodeSelector"] = v
	}
	if p["allNodes"] == true {
		spec["allNodes"] = true
	}
	if s["perDeviceNodeSelection"] == true {
		spec["perDeviceNodeSelection"] = true
	}
	for _, k := range []string{"devices", "sharedCounters", "skipNodeOperations"} {
		if l, ok := s[k].(L); ok && len(l) > 0 {
			spec[k] = l
		}
	}
	if v := s["partitionTypeAttribute"]; v != nil {
		spec["partitionTypeAttribute"] = v
	}
	spec = deepCopy(spec).(M)
	canonicalQuantities(spec)
	return M{
		"apiVersion": "resource.k8s.io/v1",
		"kind":       "ResourceSlice",
		"metadata":   M{"name": fmt.Sprintf("slice-%d", i)},
		"spec":       spec,
	}
}

// canonicalQuantities rewrites every quantity of a spec the way the cores do before they
// publish (Go's Quantity.String()), leaving strings that do not parse as they are.
func canonicalQuantities(spec M) {
	for _, d := range list(spec["devices"]) {
		device, _ := d.(M)
		for _, c := range mapValues(device["capacity"]) {
			canonical(c, "value")
			policy, _ := c["requestPolicy"].(M)
			canonical(policy, "default")
			if values, ok := policy["validValues"].(L); ok {
				for i, v := range values {
					if q, ok := v.(string); ok {
						if parsed, err := apiresource.ParseQuantity(q); err == nil {
							values[i] = parsed.String()
						}
					}
				}
			}
			valid, _ := policy["validRange"].(M)
			for _, k := range []string{"min", "max", "step"} {
				canonical(valid, k)
			}
		}
		for _, c := range list(device["consumesCounters"]) {
			consumption, _ := c.(M)
			for _, counter := range mapValues(consumption["counters"]) {
				canonical(counter, "value")
			}
		}
		for _, r := range mapValues(device["nodeAllocatableResources"]) {
			mapping, _ := r["mapping"].(M)
			canonical(mapping, "capacityMultiplier")
			canonical(mapping, "deviceMultiplier")
			overhead, _ := r["overhead"].(M)
			canonical(overhead, "perPod")
			canonical(overhead, "perContainer")
		}
	}
	for _, c := range list(spec["sharedCounters"]) {
		set, _ := c.(M)
		for _, counter := range mapValues(set["counters"]) {
			canonical(counter, "value")
		}
	}
}

// deepCopy keeps the case's own data (the vector's input) out of canonicalQuantities' way.
func deepCopy(v any) any {
	switch v := v.(type) {
	case M:
		out := M{}
		for k, x := range v {
			out[k] = deepCopy(x)
		}
		return out
	case L:
		out := L{}
		for _, x := range v {
			out = append(out, deepCopy(x))
		}
		return out
	default:
		return v
	}
}

func canonical(m M, key string) {
	if q, ok := m[key].(string); ok {
		if parsed, err := apiresource.ParseQuantity(q); err == nil {
			m[key] = parsed.String()
		}
	}
}

func list(v any) L {
	l, _ := v.(L)
	return l
}

func mapValues(v any) []M {
	m, _ := v.(M)
	var out []M
	for _, k := range sortedKeys(m) {
		if inner, ok := m[k].(M); ok {
			out = append(out, inner)
		}
	}
	return out
}

// validate runs the apiserver's create path on one object.
func validate(ctx context.Context, obj M) (field.ErrorList, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	decoded, _, err := legacyscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	slice, ok := decoded.(*resource.ResourceSlice)
	if !ok {
		return nil, fmt.Errorf("decoded %T", decoded)
	}
	var o runtime.Object = slice
	resourceslice.Strategy.PrepareForCreate(ctx, o)
	return rest.ValidateCreate(ctx, o, resourceslice.Strategy), nil
}

func run(ctx context.Context, c kase) (vector, error) {
	v := vector{Name: c.name, Driver: c.driver, Pools: map[string]M{c.pool: c.plain}, Errors: []fieldError{}}
	for i := range c.plain["slices"].(L) {
		errs, err := validate(ctx, render(c.driver, c.pool, c.plain, i))
		if err != nil {
			return v, fmt.Errorf("%s: slice %d: %w", c.name, i, err)
		}
		for _, e := range errs {
			v.Errors = append(v.Errors, fieldError{Slice: i, Path: e.Field, Type: string(e.Type), Detail: e.Detail})
		}
	}
	// Map members are validated in Go's random map order: sort, so a regeneration is stable.
	sort.SliceStable(v.Errors, func(i, j int) bool {
		a, b := v.Errors[i], v.Errors[j]
		if a.Slice != b.Slice {
			return a.Slice < b.Slice
		}
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		return a.Detail < b.Detail
	})
	v.Valid = len(v.Errors) == 0
	return v, nil
}

func main() {
	// The server logs where hand-written and declarative validation differ: not ours to see.
	klog.SetLogger(logr.Discard())
	gates := map[string]bool{}
	for _, g := range featureGates {
		gates[g] = true
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := genericapirequest.WithRequestInfo(genericapirequest.NewContext(), &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "create", APIGroup: "resource.k8s.io", APIVersion: "v1", Resource: "resourceslices",
	})
	cases := generate()
	seen := map[string]bool{}
	used := map[string]bool{}
	out := struct {
		Kubernetes   string   `json:"kubernetes"`
		FeatureGates []string `json:"featureGates"`
		Vectors      []vector `json:"vectors"`
	}{Kubernetes: kubernetesVersion(), FeatureGates: featureGates}
	for _, c := range cases {
		if seen[c.name] {
			fmt.Fprintln(os.Stderr, "duplicate case name", c.name)
			os.Exit(1)
		}
		seen[c.name] = true
		v, err := run(ctx, c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		out.Vectors = append(out.Vectors, v)
		for i := range c.plain["slices"].(L) {
			usedFields(render(c.driver, c.pool, c.plain, i)["spec"], "", used)
		}
	}
	// Every field of the v1 types must be set by some case: a field a new release adds
	// fails the generation until cases cover it.
	if missing := missingFields(used); len(missing) > 0 {
		fmt.Fprintln(os.Stderr, "no case sets these ResourceSliceSpec fields:", strings.Join(missing, ", "))
		os.Exit(1)
	}
	if err := write(os.Stdout, out.Kubernetes, out.FeatureGates, out.Vectors); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// write prints the file with one vector a line: diffs after a regeneration stay readable.
func write(w io.Writer, kubernetes string, gates []string, vectors []vector) error {
	enc := func(v any) (string, error) {
		var b strings.Builder
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(false)
		err := e.Encode(v)
		return strings.TrimSuffix(b.String(), "\n"), err
	}
	head, err := enc(M{"kubernetes": kubernetes, "featureGates": gates})
	if err != nil {
		return err
	}
	lines := []string{}
	for _, v := range vectors {
		line, err := enc(v)
		if err != nil {
			return err
		}
		lines = append(lines, line)
	}
	_, err = fmt.Fprintf(w, "%s,\n\"vectors\": [\n%s\n]}\n", strings.TrimSuffix(head, "}"), strings.Join(lines, ",\n"))
	return err
}

// kubernetesVersion is the k8s.io/kubernetes module version this was built with.
func kubernetesVersion() string {
	data, err := os.ReadFile("go.mod")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "k8s.io/kubernetes" {
			return f[1]
		}
	}
	return "unknown"
}

// sortedKeys is for deterministic case order over maps.
func sortedKeys[T any](m map[string]T) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
