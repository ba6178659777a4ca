//go:build !k8s133 && !k8s132

// What the Go APIs of Kubernetes 1.37 (go.mod) need here: the DRA manager's constructor, the
// resourceclaim controller's (its informers in resource.k8s.io v1), and the plugin manager's
// handler methods and Run, which take a context since 1.34.

package main

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

// maxNodes: none; each DRA manager has a plugin registry of its own since 1.34.
const maxNodes = 0

type manager struct{ *dra.Manager }

func (m manager) Start(ctx context.Context, activePods func() []*v1.Pod, getNode func(context.Context) (*v1.Node, error), ready config.SourcesReady) error {
	return m.Manager.Start(ctx, activePods, getNode, ready)
}

func newDRAManager(logger klog.Logger, client kubernetes.Interface, stateDir, _ string) (draManager, error) {
	m, err := dra.NewManager(logger, client, stateDir)
	return manager{m}, err
}

func newClaimController(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (*resourceclaim.Controller, error) {
	return resourceclaim.NewController(
		klog.FromContext(ctx),
		client,
		factory.Core().V1().Pods(),
		factory.Scheduling().V1beta1().PodGroups(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates(),
	)
}

func startPluginManager(ctx context.Context, plugins pluginmanager.PluginManager, ready config.SourcesReady) {
	plugins.Run(ctx, ready, ctx.Done())
}

func (h recordingHandler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.PluginHandler.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	h.report("register", name, endpoint, err)
	return err
}

func (h recordingHandler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.PluginHandler.DeRegisterPlugin(ctx, name, endpoint)
	h.report("deregister", name, endpoint, nil)
}
