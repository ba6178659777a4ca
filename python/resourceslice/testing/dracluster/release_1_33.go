//go:build k8s133

// What differs by Kubernetes release, for 1.33 (go-1.33.mod, built with -tags k8s133): the
// DRA manager's constructor, the resourceclaim controller's (both read resource.k8s.io
// v1beta1 in this release), and the plugin manager's handler methods (no context).

package main

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	plugincache "k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// maxNodes: kubelet's DRA plugins are a process-wide registry in this release
// (pkg/kubelet/cm/dra/plugin's draPlugins): a second node's manager would call the first
// node's plugins.
const maxNodes = 1

type manager struct{ *dra.ManagerImpl }

// Start: this release's getNode takes no context.
func (m manager) Start(ctx context.Context, activePods func() []*v1.Pod, getNode func(context.Context) (*v1.Node, error), ready config.SourcesReady) error {
	return m.ManagerImpl.Start(ctx, activePods, func() (*v1.Node, error) { return getNode(ctx) }, ready)
}

func newDRAManager(_ klog.Logger, client kubernetes.Interface, stateDir, nodeName string) (draManager, error) {
	m, err := dra.NewManagerImpl(client, stateDir, types.NodeName(nodeName))
	return manager{m}, err
}

func runClaimController(ctx context.Context, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := resourceclaim.NewController(
		klog.FromContext(ctx),
		resourceclaim.Features{
			AdminAccess:     utilfeature.DefaultFeatureGate.Enabled(features.DRAAdminAccess),
			PrioritizedList: utilfeature.DefaultFeatureGate.Enabled(features.DRAPrioritizedList),
		},
		client,
		factory.Core().V1().Pods(),
		factory.Resource().V1beta1().ResourceClaims(),
		factory.Resource().V1beta1().ResourceClaimTemplates(),
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
	go plugins.Run(ready, ctx.Done())
}

// recordingHandler is kubelet's DRA registration handler with each registration reported.
type recordingHandler struct {
	plugincache.PluginHandler
	report func(event, driver, endpoint string, err error)
}

func (h recordingHandler) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.PluginHandler.RegisterPlugin(name, endpoint, versions, timeout)
	h.report("register", name, endpoint, err)
	return err
}

func (h recordingHandler) DeRegisterPlugin(name, endpoint string) {
	h.PluginHandler.DeRegisterPlugin(name, endpoint)
	h.report("deregister", name, endpoint, nil)
}
