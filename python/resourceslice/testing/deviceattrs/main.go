// Command deviceattrs prints what k8s.io/dynamic-resource-allocation/deviceattribute (Go's
// standard device attributes, read from sysfs) answers for a sysfs tree: the oracle that
// resourceslice.deviceattribute is tested against (resourceslice.testing.sysfs).
//
// One JSON request on stdin, one JSON answer on stdout:
//
//	stdin:  {"sysfs": "<root>", "pci": ["0000:00:01.0", ...], "numaNodes": [0, ...], "cpus": [0, ...]}
//	stdout: {"pci": [{"pciBusID": R, "pcieRoot": R, "numaNode": R, "numaNodeList": R}, ...],
//	         "numaNodes": [{"scalar": R, "list": R}, ...],
//	         "cpus": [{"node": 0} | {"error": "..."}, ...]}
//
// in the order asked, where R is {"attribute": {"<name>": <DeviceAttribute as REST JSON>}} or
// {"error": "<the error's text>"}. An empty "sysfs" uses the package's default (/sys).
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

type request struct {
	Sysfs     string   `json:"sysfs"`
	PCI       []string `json:"pci"`
	NUMANodes []int    `json:"numaNodes"`
	CPUs      []int    `json:"cpus"`
}

type result struct {
	Attribute map[string]any `json:"attribute,omitempty"`
	Error     *string        `json:"error,omitempty"`
}

func answer(attr deviceattribute.DeviceAttribute, err error) result {
	if err != nil {
		text := err.Error()
		return result{Error: &text}
	}
	return result{Attribute: map[string]any{string(attr.Name): attr.Value}}
}

type pciAnswer struct {
	PCIBusID     result `json:"pciBusID"`
	PCIeRoot     result `json:"pcieRoot"`
	NUMANode     result `json:"numaNode"`
	NUMANodeList result `json:"numaNodeList"`
}

type numaAnswer struct {
	Scalar result `json:"scalar"`
	List   result `json:"list"`
}

type cpuAnswer struct {
	Node  *int    `json:"node,omitempty"`
	Error *string `json:"error,omitempty"`
}

type response struct {
	PCI       []pciAnswer  `json:"pci"`
	NUMANodes []numaAnswer `json:"numaNodes"`
	CPUs      []cpuAnswer  `json:"cpus"`
}

func main() {
	var req request
	decoder := json.NewDecoder(os.Stdin)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "deviceattrs: reading the request: %v\n", err)
		os.Exit(2)
	}
	var mods []deviceattribute.MachineModifier
	if req.Sysfs != "" {
		mods = append(mods, deviceattribute.WithFSFromRoot(req.Sysfs))
	}
	resp := response{PCI: []pciAnswer{}, NUMANodes: []numaAnswer{}, CPUs: []cpuAnswer{}}
	for _, address := range req.PCI {
		resp.PCI = append(resp.PCI, pciAnswer{
			PCIBusID: answer(deviceattribute.GetPCIBusIDAttribute(address)),
			PCIeRoot: answer(deviceattribute.GetPCIeRootAttributeByPCIBusID(address, mods...)),
			NUMANode: answer(deviceattribute.GetNUMANodeAttributeByPCIBusID(
				address, deviceattribute.ScalarAttribute, mods...)),
			NUMANodeList: answer(deviceattribute.GetNUMANodeAttributeByPCIBusID(
				address, deviceattribute.ListAttribute, mods...)),
		})
	}
	for _, node := range req.NUMANodes {
		resp.NUMANodes = append(resp.NUMANodes, numaAnswer{
			Scalar: answer(deviceattribute.GetNUMANodeAttribute(
				node, deviceattribute.ScalarAttribute, mods...)),
			List: answer(deviceattribute.GetNUMANodeAttribute(
				node, deviceattribute.ListAttribute, mods...)),
		})
	}
	for _, cpu := range req.CPUs {
		node, err := deviceattribute.GetNUMANodeForCPU(cpu, mods...)
		if err != nil {
			text := err.Error()
			resp.CPUs = append(resp.CPUs, cpuAnswer{Error: &text})
		} else {
			resp.CPUs = append(resp.CPUs, cpuAnswer{Node: &node})
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(resp); err != nil {
		fmt.Fprintf(os.Stderr, "deviceattrs: writing the answer: %v\n", err)
		os.Exit(1)
	}
}
