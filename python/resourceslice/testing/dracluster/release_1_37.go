//go:build !k8s133 && !k8s132

// What the Go APIs of Kubernetes 1.37 (go.mod) need here: the DRA manager's constructor and
// its health updates (since 1.34), the resourceclaim controller's and the device-taint eviction
// controller's constructors (their informers in resource.k8s.io v1), and the plugin manager's
// handler methods and Run, which take a context since 1.34.

package main

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/devicetainteviction"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

// maxNodes: none; each DRA manager has a plugin registry of its own since 1.34.
const maxNodes = 0

type manager struct {
	*dra.Manager
	healthUpdates chan []types.UID
}

func (m manager) Start(ctx context.Context, activePods func() []*v1.Pod, getNode func(context.Context) (*v1.Node, error), ready config.SourcesReady) error {
	return m.Manager.Start(ctx, activePods, getNode, ready)
}

func newDRAManager(logger klog.Logger, client kubernetes.Interface, stateDir, _ string) (draManager, error) {
	m, err := dra.NewManager(logger, client, stateDir)
	if err != nil {
		return nil, err
	}
	updates := make(chan []types.UID, 100)
	go func() {
		for update := range m.Updates() {
			uids := make([]types.UID, 0, len(update.PodUIDs))
			for _, uid := range update.PodUIDs {
				uids = append(uids, types.UID(uid))
			}
			updates <- uids
		}
	}()
	return manager{Manager: m, healthUpdates: updates}, nil
}

func (m manager) HealthUpdates() <-chan []types.UID { return m.healthUpdates }

// runDeviceTaintEviction runs the device-taint eviction controller as kube-controller-manager
// does where its feature gates are on, with its default of 8 workers.
func runDeviceTaintEviction(ctx context.Context, client kubernetes.Interface) (bool, error) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaints) {
		return false, nil
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	resource := factory.Resource().V1()
	controller := devicetainteviction.New(client, factory.Core().V1().Pods(), resource.ResourceClaims(),
		resource.ResourceSlices(), resource.DeviceTaintRules(), resource.DeviceClasses(),
		"device-taint-eviction-controller")
	factory.Start(ctx.Done())
	go func() {
		if err := controller.Run(ctx, 8); err != nil {
			klog.FromContext(ctx).Error(err, "device-taint eviction controller ended")
		}
	}()
	return true, nil
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
