//go:build k8s133

// What the Go APIs of Kubernetes 1.33 (go-1.33.mod) need here beyond release_beta.go: the
// resourceclaim controller's constructor (features as a struct, informers in v1beta1), the
// device-taint eviction controller's (new in 1.33, alpha: DeviceTaintRules in v1alpha3) and
// the handler's DeRegisterPlugin.

package main

import (
	"context"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/devicetainteviction"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/features"
)

func newClaimController(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (*resourceclaim.Controller, error) {
	return resourceclaim.NewController(
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
}

func (h recordingHandler) DeRegisterPlugin(name, endpoint string) {
	h.PluginHandler.DeRegisterPlugin(name, endpoint)
	h.report("deregister", name, endpoint, nil)
}

// runDeviceTaintEviction runs the device-taint eviction controller as kube-controller-manager
// does where its feature gates are on (the test apiserver's are: DRADeviceTaints).
func runDeviceTaintEviction(ctx context.Context, client kubernetes.Interface) (bool, error) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaints) {
		return false, nil
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	controller := devicetainteviction.New(client, factory.Core().V1().Pods(),
		factory.Resource().V1beta1().ResourceClaims(), factory.Resource().V1beta1().ResourceSlices(),
		factory.Resource().V1alpha3().DeviceTaintRules(), factory.Resource().V1beta1().DeviceClasses(),
		"device-taint-eviction-controller")
	factory.Start(ctx.Done())
	go func() {
		if err := controller.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "device-taint eviction controller ended")
		}
	}()
	return true, nil
}
