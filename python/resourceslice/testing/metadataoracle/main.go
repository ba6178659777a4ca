// Command metadataoracle answers with Go's own code about DRA device metadata (KEP-5304), the
// oracle resourceslice.kubeletplugin's metadata files are tested against
// (resourceslice.testing.devicemetadata): k8s.io/dynamic-resource-allocation v0.37.2's
// devicemetadata decoder, and its kubeletplugin helper writing the files for a claim.
//
// One JSON request on stdin, one JSON answer on stdout.
//
//	{"op": "decode", "path": P}
//	  -> {"decodedFrom": "<group/version read>", "validationError": "...",
//	      "object": <the object as metadata.resource.k8s.io/v1beta1 JSON>}
//	     (devicemetadata.DecodeMetadataFromStream into the internal type, validation on)
//
//	{"op": "prepare" | "update" | "unprepare", "driver": D, "pluginDataDir": P, "cdiDir": C,
//	 "versions": ["metadata.resource.k8s.io/v1beta1", ...], ...}
//	  runs Go's helper (kubeletplugin.Start with EnableDeviceMetadata and CDIDirectory, its
//	  claims read from a fake clientset holding "claim"):
//	  prepare:   "claim": <v1 ResourceClaim>, "devices": [Device...]: NodePrepareResources
//	             (v1) of the claim, the plugin answering with "devices"
//	             -> {"devices": [{"requestNames", "poolName", "deviceName", "cdiDeviceIds"}]}
//	  update:    "namespace", "name", "uid", "request", "devices": Helper.UpdateRequestMetadata
//	  unprepare: "claim": NodeUnprepareResources (v1) of the claim, the plugin succeeding
//	  each -> {"error": "..."} when Go's code failed.
//
// A Device is {"requests": [...], "poolName", "deviceName", "cdiDeviceIDs": [...],
// "metadata": {"attributes": {name: DeviceAttribute}, "networkData": {...}} | null}.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/api/metadata/install"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

type deviceMetadata struct {
	Attributes  map[string]resourceapi.DeviceAttribute `json:"attributes"`
	NetworkData *resourceapi.NetworkDeviceData         `json:"networkData"`
}

type device struct {
	Requests     []string        `json:"requests"`
	PoolName     string          `json:"poolName"`
	DeviceName   string          `json:"deviceName"`
	CDIDeviceIDs []string        `json:"cdiDeviceIDs"`
	Metadata     *deviceMetadata `json:"metadata"`
}

type request struct {
	Op            string                     `json:"op"`
	Path          string                     `json:"path"`
	Driver        string                     `json:"driver"`
	PluginDataDir string                     `json:"pluginDataDir"`
	CDIDir        string                     `json:"cdiDir"`
	Versions      []string                   `json:"versions"`
	Claim         *resourceapi.ResourceClaim `json:"claim"`
	Devices       []device                   `json:"devices"`
	Namespace     string                     `json:"namespace"`
	Name          string                     `json:"name"`
	UID           string                     `json:"uid"`
	Request       string                     `json:"request"`
}

func (d device) helperDevice() kubeletplugin.Device {
	out := kubeletplugin.Device{
		Requests:     d.Requests,
		PoolName:     d.PoolName,
		DeviceName:   d.DeviceName,
		CDIDeviceIDs: d.CDIDeviceIDs,
	}
	if d.Metadata != nil {
		out.Metadata = &kubeletplugin.DeviceMetadata{
			Attributes:  d.Metadata.Attributes,
			NetworkData: d.Metadata.NetworkData,
		}
	}
	return out
}

func helperDevices(devices []device) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(devices))
	for _, d := range devices {
		out = append(out, d.helperDevice())
	}
	return out
}

// plugin answers prepare with the request's devices and unprepare with success.
type plugin struct {
	devices []kubeletplugin.Device
}

func (p *plugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	result := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		result[claim.UID] = kubeletplugin.PrepareResult{Devices: p.devices}
	}
	return result, nil
}

func (p *plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	result := map[types.UID]error{}
	for _, claim := range claims {
		result[claim.UID] = nil
	}
	return result, nil
}

func (p *plugin) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "metadataoracle: %s: %v\n", msg, err)
}

func (p *plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func decode(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var decoded metadata.DeviceMetadata
	var validation error
	var gvk schema.GroupVersionKind
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(bytes.NewReader(data)), &decoded,
		devicemetadata.DecodeMetadataWithValidationResult(&validation),
		devicemetadata.DecodeMetadataStoreGVKResult(&gvk)); err != nil {
		return nil, err
	}
	var out metadatav1beta1.DeviceMetadata
	if err := install.NewScheme().Convert(&decoded, &out, nil); err != nil {
		return nil, fmt.Errorf("convert for printing: %w", err)
	}
	out.SetGroupVersionKind(metadatav1beta1.SchemeGroupVersion.WithKind("DeviceMetadata"))
	validationText := ""
	if validation != nil {
		validationText = validation.Error()
	}
	return map[string]any{
		"decodedFrom":     gvk.GroupVersion().String(),
		"validationError": validationText,
		"object":          out,
	}, nil
}

func runHelper(req request) (map[string]any, error) {
	var versions []schema.GroupVersion
	for _, v := range req.Versions {
		gv, err := schema.ParseGroupVersion(v)
		if err != nil {
			return nil, err
		}
		versions = append(versions, gv)
	}
	client := fake.NewClientset()
	if req.Claim != nil {
		client = fake.NewClientset(req.Claim)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	defer cancel()
	listener := bufconn.Listen(1 << 20)
	p := &plugin{devices: helperDevices(req.Devices)}
	helper, err := kubeletplugin.Start(ctx, p,
		kubeletplugin.DriverName(req.Driver),
		kubeletplugin.NodeName("node"),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrationService(false),
		kubeletplugin.HealthService(false),
		kubeletplugin.NodeV1beta1(false),
		kubeletplugin.PluginDataDirectoryPath(req.PluginDataDir),
		kubeletplugin.PluginListener(func(context.Context, string) (net.Listener, error) { return listener, nil }),
		kubeletplugin.EnableDeviceMetadata(true, versions),
		kubeletplugin.CDIDirectory(req.CDIDir),
	)
	if err != nil {
		return nil, err
	}
	defer helper.Stop()

	if req.Op == "update" {
		if err := helper.UpdateRequestMetadata(ctx, req.Namespace, req.Name, types.UID(req.UID), req.Request, helperDevices(req.Devices)); err != nil {
			return map[string]any{"error": err.Error()}, nil
		}
		return map[string]any{}, nil
	}

	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return listener.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	dra := drapbv1.NewDRAPluginClient(conn)
	claim := &drapbv1.Claim{Namespace: req.Claim.Namespace, Name: req.Claim.Name, Uid: string(req.Claim.UID)}
	switch req.Op {
	case "prepare":
		resp, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{claim}})
		if err != nil {
			return map[string]any{"error": err.Error()}, nil
		}
		answer := resp.Claims[claim.Uid]
		if answer.GetError() != "" {
			return map[string]any{"error": answer.GetError()}, nil
		}
		devices := []map[string]any{}
		for _, d := range answer.GetDevices() {
			devices = append(devices, map[string]any{
				"requestNames": append([]string{}, d.GetRequestNames()...),
				"poolName":     d.GetPoolName(),
				"deviceName":   d.GetDeviceName(),
				"cdiDeviceIds": append([]string{}, d.GetCdiDeviceIds()...),
			})
		}
		return map[string]any{"devices": devices}, nil
	case "unprepare":
		resp, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{claim}})
		if err != nil {
			return map[string]any{"error": err.Error()}, nil
		}
		if text := resp.Claims[claim.Uid].GetError(); text != "" {
			return map[string]any{"error": text}, nil
		}
		return map[string]any{}, nil
	}
	return nil, fmt.Errorf("unknown op %q", req.Op)
}

func main() {
	var req request
	decoder := json.NewDecoder(os.Stdin)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "metadataoracle: reading the request: %v\n", err)
		os.Exit(2)
	}
	var answer map[string]any
	var err error
	if req.Op == "decode" {
		answer, err = decode(req.Path)
		if err != nil {
			answer, err = map[string]any{"error": err.Error()}, nil
		}
	} else {
		answer, err = runHelper(req)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "metadataoracle: %v\n", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(answer); err != nil {
		fmt.Fprintf(os.Stderr, "metadataoracle: writing the answer: %v\n", err)
		os.Exit(1)
	}
}
