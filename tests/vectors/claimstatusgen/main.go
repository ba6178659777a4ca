// Command claimstatusvectors writes ResourceClaim device-status validation vectors as JSON:
// one entry of status.devices each, in the shape resourceslice's DeviceStatusWriter applies
// it, and the verdict the apiserver's own code gives on a status update that adds it, with
// the field path of each error.
//
// Each case is an entry of an allocated claim: the claim is allocated the device the entry
// names (its driver, pool, device and shareID), so every error is the entry's own. The new
// claim is the old one with the entry as status.devices; both go through what the apiserver
// does with an update of the status subresource: decoding of the v1 JSON (strict, as
// server-side apply refuses a field its schema lacks), the status strategy's
// PrepareForUpdate (which drops fields of disabled features), then rest.ValidateUpdate: the
// hand-written ResourceClaim status validation, including the granular authorization
// (here by an authorizer that allows all), and the declarative validation, merged as the
// server merges them. The entry's data is first re-encoded as server-side apply re-encodes
// it (numbers as int64 where they fit, else float64; then encoding/json, HTML-escaped), as
// its size is measured after that.
//
// The cases are the device-status cases of TestValidateClaimStatusUpdate
// (pkg/apis/resource/validation/validation_resourceclaim_test.go) re-expressed as data, and
// each rule of the entry at its boundaries.
//
// Moving to the next Kubernetes release: bump the versions in go.mod (the pins of the test
// apiserver's module), then regenerate (tests/vectors/README.md):
//
//	cd tests/vectors/claimstatusgen && GOFLAGS=-mod=mod go run . > ../claimstatus.json
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	_ "k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/registry/resource/resourceclaim"
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

type fieldError struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Detail string `json:"detail"`
}

type vector struct {
	Name  string `json:"name"`
	Entry M      `json:"entry"`
	Valid bool   `json:"valid"`
	// DecodeError: the server refuses the entry before validation (a field of the wrong
	// type, one its schema lacks); Errors is empty then.
	DecodeError string       `json:"decodeError,omitempty"`
	Errors      []fieldError `json:"errors"`
}

type kase struct {
	name  string
	entry M
}

const (
	namespace = "default"
	claimName = "claim"
)

// allowAll stands for the authorizer: the vectors are about validation, not permissions.
type allowAll struct{}

func (allowAll) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionAllow, "", nil
}

// result is the allocation result of the device the entry names (the same key).
func result(entry M) M {
	r := M{"request": "req"}
	for _, k := range []string{"driver", "pool", "device", "shareID"} {
		if v, ok := entry[k]; ok {
			r[k] = v
		}
	}
	return r
}

func claim(entry M, withStatus bool) M {
	status := M{"allocation": M{"devices": M{"results": L{result(entry)}}}}
	if withStatus {
		status["devices"] = L{entry}
	}
	return M{
		"apiVersion": "resource.k8s.io/v1",
		"kind":       "ResourceClaim",
		"metadata":   M{"name": claimName, "namespace": namespace, "uid": "0b9e5c4e-2f1a-4c1b-9d7e-1b0a4c3d2e1f", "resourceVersion": "1"},
		"spec": M{"devices": M{"requests": L{
			M{"name": "req", "exactly": M{"deviceClassName": "class", "allocationMode": "ExactCount", "count": 1}},
		}}},
		"status": status,
	}
}

// applied is the entry as server-side apply hands it on: its data re-encoded.
func applied(entry M) M {
	out := with(entry)
	if data, ok := entry["data"]; ok && data != nil {
		out["data"] = json.RawMessage(encoded(data))
	}
	return out
}

// encoded is a data value as the apiserver stores it (and measures it). The apply patch is
// YAML: its numbers become int64 where they fit, else float64, are encoded as JSON and
// decoded again with numbers as int64 where the text allows (so -0.0 is 0), then
// encoding/json encodes the value into the RawExtension, HTML-escaped.
func encoded(data any) []byte {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	for range 2 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			panic(err)
		}
		if raw, err = json.Marshal(numbers(v)); err != nil {
			panic(err)
		}
	}
	return raw
}

// numbers turns json.Numbers into int64 where they fit, else float64, as the apiserver's
// JSON decoding of an apply patch does.
func numbers(v any) any {
	switch v := v.(type) {
	case M:
		for k, x := range v {
			v[k] = numbers(x)
		}
		return v
	case L:
		for i, x := range v {
			v[i] = numbers(x)
		}
		return v
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(v), 64)
		return f
	default:
		return v
	}
}

var strict = serializer.NewCodecFactory(legacyscheme.Scheme, serializer.EnableStrict).UniversalDecoder()

func decode(obj M) (*resource.ResourceClaim, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	decoded, _, err := strict.Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	c, ok := decoded.(*resource.ResourceClaim)
	if !ok {
		return nil, fmt.Errorf("decoded %T", decoded)
	}
	return c, nil
}

func run(ctx context.Context, strategy rest.RESTUpdateStrategy, c kase) (vector, error) {
	v := vector{Name: c.name, Entry: c.entry, Errors: []fieldError{}}
	sent := applied(c.entry)
	old, err := decode(claim(c.entry, false))
	if err != nil {
		// An entry whose key fields are not strings has no allocation to go with.
		v.DecodeError = err.Error()
		return v, nil
	}
	updated, err := decode(claim(sent, true))
	if err != nil {
		v.DecodeError = err.Error()
		return v, nil
	}
	var obj, oldObj runtime.Object = updated, old
	strategy.PrepareForUpdate(ctx, obj, oldObj)
	for _, e := range rest.ValidateUpdate(ctx, obj, oldObj, strategy) {
		v.Errors = append(v.Errors, fieldError{Path: e.Field, Type: string(e.Type), Detail: e.Detail})
	}
	sort.SliceStable(v.Errors, func(i, j int) bool {
		a, b := v.Errors[i], v.Errors[j]
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
	klog.SetLogger(logr.Discard())
	gates := map[string]bool{}
	for _, g := range featureGates {
		gates[g] = true
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := genericapirequest.WithNamespace(genericapirequest.NewContext(), namespace)
	ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: "driver"})
	ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "patch", APIGroup: "resource.k8s.io", APIVersion: "v1",
		Resource: "resourceclaims", Subresource: "status", Namespace: namespace, Name: claimName,
		Parts: []string{"resourceclaims", claimName, "status"},
	})
	strategy := resourceclaim.NewStatusStrategy(resourceclaim.NewStrategy(nil, allowAll{}))
	out := []vector{}
	seen := map[string]bool{}
	for _, c := range generate() {
		if seen[c.name] {
			fmt.Fprintln(os.Stderr, "duplicate case name", c.name)
			os.Exit(1)
		}
		seen[c.name] = true
		v, err := run(ctx, strategy, c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		out = append(out, v)
	}
	if err := write(os.Stdout, kubernetesVersion(), featureGates, out); err != nil {
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
