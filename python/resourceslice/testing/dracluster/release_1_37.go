//go:build !k8s133 && !k8s132

// What differs by Kubernetes release, for 1.37 (go.mod): the DRA manager's constructor, the
// resourceclaim controller's (with the resource.k8s.io version its release reads: v1), and the
// plugin manager's handler methods (with a context since 1.34).

package main

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	plugincache "k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
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

// runClaimController runs kube-controller-manager's resourceclaim controller, with the
// informers it is given there.
func runClaimController(ctx context.Context, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := resourceclaim.NewController(
		klog.FromContext(ctx),
		client,
		factory.Core().V1().Pods(),
		factory.Scheduling().V1beta1().PodGroups(),
		factory.Resource().V1().ResourceClaims(),
		factory.Resource().V1().ResourceClaimTemplates(),
	)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	go controller.Run(ctx, 4)
	return nil
}

// runPluginManager runs kubelet's plugin manager on registryDir with the DRA manager's
// registration handler, each registration reported through report.
func runPluginManager(ctx context.Context, registryDir string, handler plugincache.PluginHandler, report func(event, driver, endpoint string, err error), ready config.SourcesReady) {
	plugins := pluginmanager.NewPluginManager(registryDir, record.NewFakeRecorder(100))
	plugins.AddHandler(registerapi.DRAPlugin, recordingHandler{PluginHandler: handler, report: report})
	go plugins.Run(ctx, ready, ctx.Done())
}

// recordingHandler is kubelet's DRA registration handler with each registration reported.
type recordingHandler struct {
	plugincache.PluginHandler
	report func(event, driver, endpoint string, err error)
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
