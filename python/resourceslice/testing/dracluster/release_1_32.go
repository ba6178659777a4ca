//go:build k8s132

// What the Go APIs of Kubernetes 1.32 (go-1.32.mod) need here beyond release_beta.go: the
// resourceclaim controller's constructor (admin access as a bool, informers in v1beta1) and
// the handler's DeRegisterPlugin, which is not told the endpoint. 1.32 has no device taints,
// so no device-taint eviction controller.

package main

import (
	"context"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"
	"k8s.io/kubernetes/pkg/features"
)

func newClaimController(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory) (*resourceclaim.Controller, error) {
	return resourceclaim.NewController(
		klog.FromContext(ctx),
		utilfeature.DefaultFeatureGate.Enabled(features.DRAAdminAccess),
		client,
		factory.Core().V1().Pods(),
		factory.Resource().V1beta1().ResourceClaims(),
		factory.Resource().V1beta1().ResourceClaimTemplates(),
	)
}

func (h recordingHandler) DeRegisterPlugin(name string) {
	h.PluginHandler.DeRegisterPlugin(name)
	h.report("deregister", name, "", nil)
}

func runDeviceTaintEviction(context.Context, kubernetes.Interface) (bool, error) {
	return false, nil
}
