//go:build k8s133 || k8s132

// What the Go APIs of Kubernetes 1.33 and 1.32 share and 1.37 changed: the DRA manager's
// constructor and Start (getNode without a context), the plugin manager's Run and handler
// methods (no context), kubelet's process-wide registry of DRA plugins, and the absence of
// device health (the DRA manager reads no health streams before 1.34). The rest is in
// release_1_33.go and release_1_32.go.

package main

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

// maxNodes: kubelet's DRA plugins are a process-wide registry in these releases
// (pkg/kubelet/cm/dra/plugin's draPlugins): a second node's manager would call the first
// node's plugins.
const maxNodes = 1

type manager struct{ *dra.ManagerImpl }

func (m manager) Start(ctx context.Context, activePods func() []*v1.Pod, getNode func(context.Context) (*v1.Node, error), ready config.SourcesReady) error {
	return m.ManagerImpl.Start(ctx, activePods, func() (*v1.Node, error) { return getNode(ctx) }, ready)
}

// HealthUpdates: never; there is no health stream to read.
func (m manager) HealthUpdates() <-chan []types.UID { return nil }

func (m manager) UpdateAllocatedResourcesStatus(klog.Logger, *v1.Pod, *v1.PodStatus) {}

func newDRAManager(_ klog.Logger, client kubernetes.Interface, stateDir, nodeName string) (draManager, error) {
	m, err := dra.NewManagerImpl(client, stateDir, types.NodeName(nodeName))
	return manager{m}, err
}

func startPluginManager(ctx context.Context, plugins pluginmanager.PluginManager, ready config.SourcesReady) {
	plugins.Run(ready, ctx.Done())
}

func (h recordingHandler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.PluginHandler.RegisterPlugin(name, endpoint, versions, timeout)
	h.report("register", name, endpoint, err)
	return err
}
