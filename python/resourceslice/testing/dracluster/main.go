// Command dracluster runs the parts of a Kubernetes cluster that bring a Pod its DRA devices,
// from Kubernetes' own code at the test apiserver's release, against that apiserver:
//
//   - kube-scheduler with its default profile (the DynamicResources plugin allocates claims
//     from the ResourceSlices drivers publish), set up and run as cmd/kube-scheduler/app does;
//   - kube-controller-manager's resourceclaim controller (claims from templates, reservedFor
//     cleanup, deallocation once no pod uses a claim);
//   - kube-controller-manager's device-taint eviction controller, in the releases that have it
//     (1.33 and newer): it deletes the pods whose claims use a device with a NoExecute taint
//     they do not tolerate, from a ResourceSlice or a DeviceTaintRule;
//   - simulated nodes: a Node object each, and for each the two parts of kubelet that talk to a
//     DRA driver — the plugin manager (registration sockets) and the DRA manager (it reads the
//     pod's claims, calls the driver's NodePrepareResources/NodeUnprepareResources and keeps
//     kubelet's checkpoint) — driven by the pods bound to that node, as kubelet's pod workers
//     drive them: prepare before the containers would start, unprepare once they are gone;
//     where the release's DRA manager reads the drivers' health streams (1.34 and newer), the
//     health of a pod's devices goes into its containers' allocatedResourcesStatus, as
//     kubelet's status manager writes it;
//   - CDI as container runtimes apply it: each container's CDI device IDs (from the DRA
//     manager's GetResources) are resolved in the node's CDI spec directory with the CDI
//     library and injected into an OCI runtime spec, whose env, mounts, device nodes and hooks
//     are reported;
//   - with --runc, a container runtime: each container of a prepared pod runs with runc, from
//     the OCI spec containerd would make (a base spec, the container's arguments and
//     environment, the CDI devices injected), as a static reporter program that prints what it
//     sees (runtime.go); a deleted pod's containers get SIGTERM, then SIGKILL after its grace
//     period, before its claims are unprepared. Without --runc, nothing runs in the containers.
//
// It speaks JSON lines (../jsonlines): commands on stdin, answers and events on stdout.
//
//	stdin:  {"id": 1, "op": "addNode", "node": "n1", "labels": {"k": "v"}}
//	        {"id": 2, "op": "inject", "node": "n1", "namespace": "default", "pod": "p"}
//	        {"id": 3, "op": "stopKubelet"|"startKubelet", "node": "n1"}
//	stdout: {"event": "ready", "maxNodes": 0, "deviceTaintEviction": true, "containers": true, "at": <Unix seconds>}
//	        (every event has "at"; maxNodes 0: no limit; deviceTaintEviction: the eviction
//	        controller runs; containers: they run, with --runc)
//	        {"id": 1, "node": "n1", "dirs": {"registry": ..., "plugins": ..., "cdi": ..., "state": ...}}
//	        {"event": "register"|"deregister", "node": ..., "driver": ..., "endpoint": ..., "error": ...}
//	        {"event": "prepared", "node": ..., "pod": {...}, "containers": {"<name>": {...}}}
//	        (a container's entry has "process": {"id": <runc's>, "pid": ..., "output": <its
//	        first line>} when it runs)
//	        {"event": "containerFailed", "node": ..., "pod": {...}, "container": ..., "reason": "CreateContainerError", "error": ...}
//	        {"event": "stopped", "node": ..., "pod": {...}, "container": ..., "signal": "TERM"|"KILL"|"", "exitCode": ...}
//	        {"event": "prepareFailed"|"unprepareFailed", "node": ..., "pod": {...}, "error": ...}
//	        {"event": "unprepared", "node": ..., "pod": {...}, "disruption": {"reason": ..., "message": ...}}
//	        (disruption: the pod's DisruptionTarget condition, when it has one)
//	        {"event": "health", "node": ..., "pod": {...}, "containers": {"<name>": [<ResourceStatus>...]}}
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/events"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	plugincache "k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"resourceslice/jsonlines"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// registrations reports on out, for node, each registration kubelet's DRA handler took in
// (or out), so that a test can wait for it.
func registrations(out *jsonlines.Output, node string) func(event, driver, endpoint string, err error) {
	return func(event, driver, endpoint string, err error) {
		line := map[string]any{"event": event, "node": node, "driver": driver, "endpoint": endpoint}
		if event == "register" {
			line["error"] = jsonlines.ErrorString(err)
		}
		out.Write(line)
	}
}

type podRef struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

func refOf(pod *v1.Pod) podRef {
	return podRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

// writeSchedulerConfig writes a KubeSchedulerConfiguration of the default profile whose
// DynamicResources plugin gives up waiting for binding conditions after bindingTimeout, so
// that a test of the timeout does not wait out the default ten minutes. Only a file sets it:
// kube-scheduler has no flag for plugin arguments.
func writeSchedulerConfig(dir, kubeconfig string, bindingTimeout time.Duration) (string, error) {
	config := map[string]any{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"clientConnection": map[string]any{"kubeconfig": kubeconfig},
		"profiles": []any{map[string]any{
			"schedulerName": v1.DefaultSchedulerName,
			"pluginConfig": []any{map[string]any{
				"name": "DynamicResources",
				"args": map[string]any{"bindingTimeout": bindingTimeout.String()},
			}},
		}},
	}
	data, err := json.Marshal(config)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kube-scheduler.json")
	return path, os.WriteFile(path, data, 0o600)
}

// runScheduler sets kube-scheduler up from its own options and flags and runs it, as
// cmd/kube-scheduler/app's command does (minus its process-wide signal handler and logging
// set-up, which are this program's).
func runScheduler(ctx context.Context, args []string) error {
	opts := scheduleroptions.NewOptions()
	flags := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, set := range opts.Flags.FlagSets {
		flags.AddFlagSet(set)
	}
	if err := flags.Parse(args); err != nil {
		return err
	}
	// What the command's PersistentPreRunE does: the feature gates take effect.
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	cc, sched, err := scheduler.Setup(ctx, opts)
	if err != nil {
		return err
	}
	go func() {
		if err := scheduler.Run(ctx, cc, sched); err != nil {
			klog.ErrorS(err, "kube-scheduler ended")
		}
	}()
	return nil
}

// cluster holds the simulated nodes.
type cluster struct {
	client      kubernetes.Interface
	dir         string
	retryPeriod time.Duration
	out         *jsonlines.Output
	recorder    record.EventRecorderLogger
	mutex       sync.Mutex
	nodes       map[string]*node
	// runtime: runc, the reporter and the base OCI spec each node's container runtime uses;
	// nil when containers do not run.
	runtime *runtimeConfig
}

type runtimeConfig struct{ runc, reporter, baseSpec string }

// podWorkers: how many of a node's pods are synced at once (kubelet has no bound; a test's
// burst of pods on a node is a few dozen at most).
const podWorkers = 8

// node is one simulated kubelet: its DRA manager and plugin manager, and a queue of the
// pods bound to it (keyed by UID) that its workers sync, each pod by one worker at a time and
// up to podWorkers pods at once, as kubelet's pod workers do (a goroutine per pod there;
// retried after retryPeriod on error, as kubelet's backoff). Stopped and started
// again, it is a kubelet restart: what it knew is gone but for its state directory (the DRA
// manager's checkpoint), as a real kubelet's memory is.
type node struct {
	*cluster
	name string
	dirs map[string]string
	// life is held for writing while the kubelet stops or starts, for reading while its
	// parts are used from outside (inject); stop is nil while it is stopped.
	life     sync.RWMutex
	stop     func()
	manager  draManager
	lister   cache.Indexer
	queue    workqueue.TypedRateLimitingInterface[types.UID]
	mutex    sync.Mutex
	lastSeen map[types.UID]*v1.Pod
	prepared map[types.UID]bool
	// unprepared: terminating pods whose claims were unprepared. kubelet unprepares a pod's
	// claims once, in SyncTerminatingPod; its removal from the API is not a second time.
	unprepared map[types.UID]bool
	// healthChanged: prepared pods whose devices' health changed since their status was written.
	healthChanged map[types.UID]bool
	// dra is held while the DRA manager prepares or unprepares a pod (see prepare).
	dra sync.Mutex
	// runtime runs the prepared pods' containers (nil when containers do not run); it is
	// the node's, not its kubelet's, and keeps running through a kubelet restart.
	runtime *containerRuntime
}

// draManager is kubelet's DRA manager as this program uses it: the same methods in every
// release, made by the release's own constructor (newDRAManager, in release_*.go).
type draManager interface {
	Start(ctx context.Context, activePods func() []*v1.Pod, getNode func(context.Context) (*v1.Node, error), sourcesReady config.SourcesReady) error
	GetWatcherHandler() plugincache.PluginHandler
	PrepareResources(ctx context.Context, pod *v1.Pod) error
	GetResources(pod *v1.Pod, container *v1.Container) (*dra.ContainerInfo, error)
	UnprepareResources(ctx context.Context, pod *v1.Pod) error
	// HealthUpdates: the UIDs of pods whose devices' health changed, as the manager's health
	// stream handler reports them to kubelet's sync loop (never, before 1.34).
	HealthUpdates() <-chan []types.UID
	// UpdateAllocatedResourcesStatus puts the health of the pod's devices into status (its
	// containers' allocatedResourcesStatus), as kubelet's status manager has it done.
	UpdateAllocatedResourcesStatus(logger klog.Logger, pod *v1.Pod, status *v1.PodStatus)
}

// runClaimController runs kube-controller-manager's resourceclaim controller, with the
// informers it is given there (newClaimController: the release's constructor).
func runClaimController(ctx context.Context, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := newClaimController(ctx, client, factory)
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
	go startPluginManager(ctx, plugins, ready)
}

// recordingHandler is kubelet's DRA registration handler with each registration reported
// (its methods are the release's: their signatures changed in 1.34).
type recordingHandler struct {
	plugincache.PluginHandler
	report func(event, driver, endpoint string, err error)
}

// createNode registers the Node object as kubelet would, ready and schedulable: a status
// with capacity for pods, the Ready condition, and without the not-ready taint the
// TaintNodesByCondition admission plugin puts on new nodes (the node lifecycle controller,
// which would lift it, is not running).
func (c *cluster) createNode(ctx context.Context, name string, labels map[string]string) (*v1.Node, error) {
	all := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
	for k, v := range labels {
		all[k] = v
	}
	created, err := c.client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	capacity := v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("64"),
		v1.ResourceMemory: resource.MustParse("256Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	created.Status = v1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Conditions: []v1.NodeCondition{{
			Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			Message: "simulated by dracluster", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}, {Type: v1.NodeHostName, Address: name}},
	}
	updated, err := c.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	var taints []v1.Taint
	for _, taint := range updated.Spec.Taints {
		if taint.Key != v1.TaintNodeNotReady {
			taints = append(taints, taint)
		}
	}
	updated.Spec.Taints = taints
	return c.client.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{})
}

func (c *cluster) addNode(ctx context.Context, name string, labels map[string]string) (*node, error) {
	c.mutex.Lock()
	defer c.mutex.Unlock()
	if _, ok := c.nodes[name]; ok {
		return nil, fmt.Errorf("node %s exists", name)
	}
	if maxNodes > 0 && len(c.nodes) >= maxNodes {
		return nil, fmt.Errorf("this release's kubelet keeps its DRA plugins in a process-wide registry: at most %d simulated node(s) per DRA cluster", maxNodes)
	}
	root := filepath.Join(c.dir, name)
	// kubelet's layout under its root directory (/var/lib/kubelet), and the CDI directory.
	dirs := map[string]string{
		"registry": filepath.Join(root, "plugins_registry"),
		"plugins":  filepath.Join(root, "plugins"),
		"state":    filepath.Join(root, "state"),
		"cdi":      filepath.Join(root, "cdi"),
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	if _, err := c.createNode(ctx, name, labels); err != nil {
		return nil, fmt.Errorf("create Node %s: %w", name, err)
	}
	n := &node{cluster: c, name: name, dirs: dirs}
	if c.runtime != nil {
		runtime, err := newContainerRuntime(c.runtime.runc, c.runtime.reporter, c.runtime.baseSpec, filepath.Join(root, "runtime"))
		if err != nil {
			return nil, err
		}
		n.runtime = runtime
	}
	n.life.Lock()
	defer n.life.Unlock()
	if err := n.startKubelet(ctx); err != nil {
		return nil, err
	}
	c.nodes[name] = n
	return n, nil
}

// startKubelet starts the node's kubelet parts: a DRA manager, which reads kubelet's
// checkpoint from the state directory, the plugin manager on the registration directory, the
// pods' informer and the pod worker. Called with life held for writing.
func (n *node) startKubelet(ctx context.Context) error {
	c, name, dirs := n.cluster, n.name, n.dirs
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "node", name)
	manager, err := newDRAManager(logger, c.client, dirs["state"], name)
	if err != nil {
		return err
	}
	n.manager = manager
	n.queue = workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](c.retryPeriod, c.retryPeriod))
	n.mutex.Lock()
	n.lastSeen = map[types.UID]*v1.Pod{}
	n.prepared = map[types.UID]bool{}
	n.unprepared = map[types.UID]bool{}
	n.healthChanged = map[types.UID]bool{}
	n.mutex.Unlock()
	nodeCtx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	// The pods bound to this node, as kubelet's API source watches them.
	factory := informers.NewSharedInformerFactoryWithOptions(c.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + name
	}))
	podInformer := factory.Core().V1().Pods().Informer()
	n.lister = podInformer.GetIndexer()
	_, err = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.seen(obj.(*v1.Pod)) },
		UpdateFunc: func(_, obj any) { n.seen(obj.(*v1.Pod)) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				n.seen(pod)
			}
		},
	})
	if err != nil {
		cancel()
		return err
	}
	getNode := func(ctx context.Context) (*v1.Node, error) {
		return c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	// kubelet's sources are ready once it has seen the API's pods: only then may the DRA
	// manager take a pod it does not know for one that is gone.
	ready := config.NewSourcesReady(func(sets.Set[string]) bool { return podInformer.HasSynced() })
	if err := manager.Start(nodeCtx, n.activePods, getNode, ready); err != nil {
		cancel()
		return err
	}
	runPluginManager(nodeCtx, dirs["registry"], manager.GetWatcherHandler(), registrations(c.out, name), ready)

	factory.Start(nodeCtx.Done())
	var workers sync.WaitGroup
	for range podWorkers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			n.run(nodeCtx)
		}()
	}
	go n.watchHealth(nodeCtx)
	n.stop = func() {
		// The pod workers end after their current syncs (whose calls the context ends), the
		// informers and the plugin manager with the context; the DRA manager waits for its
		// goroutines (1.34+).
		cancel()
		workers.Wait()
		factory.Shutdown()
		if stopper, ok := manager.(interface{ Stop() }); ok {
			stopper.Stop()
		}
	}
	return nil
}

// restart stops (start false) or starts the node's kubelet, as the stopKubelet and
// startKubelet commands ask.
func (n *node) restart(ctx context.Context, start bool) error {
	if maxNodes > 0 {
		return fmt.Errorf("this release's kubelet keeps its DRA plugins in a process-wide registry: its kubelet cannot be restarted here (1.34 and newer)")
	}
	n.life.Lock()
	defer n.life.Unlock()
	if start {
		if n.stop != nil {
			return fmt.Errorf("the kubelet of node %s runs", n.name)
		}
		return n.startKubelet(ctx)
	}
	if n.stop == nil {
		return fmt.Errorf("the kubelet of node %s is stopped", n.name)
	}
	n.stop()
	n.stop = nil
	return nil
}

func (n *node) seen(pod *v1.Pod) {
	n.mutex.Lock()
	n.lastSeen[pod.UID] = pod
	n.mutex.Unlock()
	n.queue.Add(pod.UID)
}

// watchHealth has the pods whose devices' health changed synced again, as kubelet's sync loop
// does on the container manager's updates: their status is written anew.
func (n *node) watchHealth(ctx context.Context) {
	updates := n.manager.HealthUpdates()
	for {
		select {
		case <-ctx.Done():
			return
		case uids := <-updates:
			n.mutex.Lock()
			for _, uid := range uids {
				if n.prepared[uid] {
					n.healthChanged[uid] = true
				}
			}
			n.mutex.Unlock()
			for _, uid := range uids {
				n.queue.Add(uid)
			}
		}
	}
}

// activePods is kubelet's list of pods that may still run: the DRA manager's reconcile loop
// unprepares the claims of any other pod it has prepared.
func (n *node) activePods() []*v1.Pod {
	var pods []*v1.Pod
	for _, obj := range n.lister.List() {
		pod := obj.(*v1.Pod)
		if pod.DeletionTimestamp == nil && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed {
			pods = append(pods, pod)
		}
	}
	return pods
}

func (n *node) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		n.queue.ShutDown()
	}()
	for {
		uid, shutdown := n.queue.Get()
		if shutdown {
			return
		}
		if err := n.sync(ctx, uid); err != nil {
			n.queue.AddRateLimited(uid)
		} else {
			n.queue.Forget(uid)
		}
		n.queue.Done(uid)
	}
}

// current is the pod as the informer has it now, or the last version seen when it is gone.
func (n *node) current(uid types.UID) (pod *v1.Pod, exists bool) {
	n.mutex.Lock()
	last := n.lastSeen[uid]
	n.mutex.Unlock()
	if last == nil {
		return nil, false
	}
	obj, exists, _ := n.lister.GetByKey(last.Namespace + "/" + last.Name)
	if exists && obj.(*v1.Pod).UID == uid {
		return obj.(*v1.Pod), true
	}
	return last, false
}

// sync is what kubelet's pod worker does with DRA for one pod: a pod that is to run gets its
// claims prepared (SyncPod, before the sandbox is created); a pod that is deleted, or done,
// gets them unprepared once its containers would have stopped, and only then is the pod
// removed from the API (SyncTerminatingPod, then the status manager's final delete).
func (n *node) sync(ctx context.Context, uid types.UID) error {
	pod, exists := n.current(uid)
	if pod == nil {
		return nil
	}
	terminating := !exists || pod.DeletionTimestamp != nil || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
	if terminating {
		n.mutex.Lock()
		done := n.unprepared[uid]
		n.mutex.Unlock()
		if n.runtime != nil {
			// kubelet kills the containers (SyncTerminatingPod) before it unprepares the
			// claims (SyncTerminatedPod).
			for _, how := range n.runtime.stopPod(uid, gracePeriod(pod)) {
				n.out.Write(map[string]any{"event": "stopped", "node": n.name, "pod": refOf(pod), "container": how.Container, "signal": how.Signal, "exitCode": how.ExitCode})
			}
		}
		if !done {
			n.dra.Lock()
			err := n.manager.UnprepareResources(ctx, pod)
			n.dra.Unlock()
			if err != nil {
				n.out.Write(map[string]any{"event": "unprepareFailed", "node": n.name, "pod": refOf(pod), "error": err.Error()})
				return err
			}
		}
		n.mutex.Lock()
		wasPrepared := n.prepared[uid]
		delete(n.prepared, uid)
		delete(n.healthChanged, uid)
		n.unprepared[uid] = true
		if !exists {
			delete(n.lastSeen, uid)
			delete(n.unprepared, uid)
		}
		n.mutex.Unlock()
		if wasPrepared {
			line := map[string]any{"event": "unprepared", "node": n.name, "pod": refOf(pod)}
			// Why the pod went, when something disrupted it (the device-taint eviction
			// controller sets this condition before it deletes the pod).
			for _, condition := range pod.Status.Conditions {
				if condition.Type == v1.DisruptionTarget && condition.Status == v1.ConditionTrue {
					line["disruption"] = map[string]string{"reason": condition.Reason, "message": condition.Message}
				}
			}
			n.out.Write(line)
		}
		if exists && pod.DeletionTimestamp != nil {
			zero := int64(0)
			err := n.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: &zero,
				Preconditions:      &metav1.Preconditions{UID: &uid},
			})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return err
			}
		}
		return nil
	}
	n.mutex.Lock()
	done := n.prepared[uid]
	healthChanged := n.healthChanged[uid]
	delete(n.healthChanged, uid)
	n.mutex.Unlock()
	if done {
		if healthChanged {
			return n.writeHealth(ctx, pod)
		}
		return nil
	}
	containers, err := n.prepare(ctx, pod)
	if _, failed := err.(prepareError); failed {
		// Where kubelet reports it: an event on the pod (kuberuntime's SyncPod).
		n.recorder.Eventf(pod, v1.EventTypeWarning, events.FailedPrepareDynamicResources, "Failed to prepare dynamic resources: %v", err)
		n.out.Write(map[string]any{"event": "prepareFailed", "node": n.name, "pod": refOf(pod), "error": err.Error()})
		return err
	}
	if err != nil {
		// The runtime fails to create the container: kubelet reports it and retries.
		n.recorder.Eventf(pod, v1.EventTypeWarning, events.FailedToCreateContainer, "Error: %v", err)
		n.out.Write(map[string]any{"event": "prepareFailed", "node": n.name, "pod": refOf(pod), "error": err.Error()})
		return err
	}
	if err := n.runContainers(ctx, pod, containers); err != nil {
		return err
	}
	n.mutex.Lock()
	n.prepared[uid] = true
	n.mutex.Unlock()
	if err := n.markRunning(ctx, pod, containers); err != nil {
		klog.FromContext(ctx).Error(err, "pod status not updated", "pod", klog.KObj(pod))
	}
	n.out.Write(map[string]any{"event": "prepared", "node": n.name, "pod": refOf(pod), "containers": containers})
	return nil
}

// prepareError is a failure of the DRA manager's PrepareResources (its message unchanged).
type prepareError struct{ error }

// prepare has the DRA manager prepare the pod's claims and applies each container's CDI
// devices (inject). The DRA manager is called for one pod at a time on a node, though the
// pods' syncs (and their containers' starts) run side by side: kubelet 1.33's manager, asked
// to prepare two pods sharing a claim at once, gave the second one's containers that
// claim's CDI device twice.
func (n *node) prepare(ctx context.Context, pod *v1.Pod) (map[string]any, error) {
	n.dra.Lock()
	defer n.dra.Unlock()
	if err := n.manager.PrepareResources(ctx, pod); err != nil {
		return nil, prepareError{err}
	}
	return n.inject(pod)
}

// inject applies each container's CDI devices to an OCI spec, as container runtimes do when
// kubelet gives them the CDI device IDs of the DRA manager's GetResources: the specs are read
// from the node's CDI directory with the CDI library.
func (n *node) inject(pod *v1.Pod) (map[string]any, error) {
	registry, err := n.cdiRegistry()
	if err != nil {
		return nil, err
	}
	result := map[string]any{}
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range all {
		container := &all[i]
		ids, err := n.cdiDevices(pod, container)
		if err != nil {
			return nil, err
		}
		spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
		if len(ids) > 0 {
			if _, err := registry.InjectDevices(spec, ids...); err != nil {
				return nil, fmt.Errorf("CDI devices of container %s: %w (spec errors: %v)", container.Name, err, registry.GetErrors())
			}
		}
		env := spec.Process.Env
		if env == nil {
			env = []string{}
		}
		mounts := spec.Mounts
		if mounts == nil {
			mounts = []oci.Mount{}
		}
		devices := spec.Linux.Devices
		if devices == nil {
			devices = []oci.LinuxDevice{}
		}
		result[container.Name] = map[string]any{
			"cdiDevices":  ids,
			"env":         env,
			"mounts":      mounts,
			"deviceNodes": devices,
			"hooks":       spec.Hooks,
		}
		if n.runtime != nil {
			if c := n.runtime.running(pod.UID, container.Name); c != nil {
				result[container.Name].(map[string]any)["process"] = c.process()
			}
		}
	}
	return result, nil
}

// cdiRegistry reads the node's CDI spec directory with the CDI library, as a runtime does
// when it starts a container.
func (n *node) cdiRegistry() (*cdi.Cache, error) {
	registry, err := cdi.NewCache(cdi.WithSpecDirs(n.dirs["cdi"]), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI spec directory: %w", err)
	}
	return registry, nil
}

// cdiDevices are the CDI device IDs kubelet gives the runtime for the container (from the
// DRA manager's GetResources).
func (n *node) cdiDevices(pod *v1.Pod, container *v1.Container) ([]string, error) {
	info, err := n.manager.GetResources(pod, container)
	if err != nil {
		return nil, err
	}
	ids := []string{}
	for _, device := range info.CDIDevices {
		ids = append(ids, device.Name)
	}
	return ids, nil
}

// runContainers starts each of the pod's containers that does not run yet with the node's
// runtime, and adds what its process reported to its entry of edits. A container that fails
// to start is reported as kubelet reports CreateContainerError: an event on the pod and the
// container's waiting state, and the pod is retried. Init containers are not run (the
// reporter never exits, and an init container must).
func (n *node) runContainers(ctx context.Context, pod *v1.Pod, edits map[string]any) error {
	if n.runtime == nil {
		return nil
	}
	registry, err := n.cdiRegistry()
	if err != nil {
		return err
	}
	for i := range pod.Spec.Containers {
		container := &pod.Spec.Containers[i]
		c := n.runtime.running(pod.UID, container.Name)
		if c == nil {
			ids, _ := edits[container.Name].(map[string]any)["cdiDevices"].([]string)
			c, err = n.runtime.start(pod, container, registry, ids)
			if err != nil {
				n.recorder.Eventf(pod, v1.EventTypeWarning, events.FailedToCreateContainer, "Error: %v", err)
				if err := n.markCreateFailed(ctx, pod, container.Name, err); err != nil {
					klog.FromContext(ctx).Error(err, "pod status not updated", "pod", klog.KObj(pod))
				}
				n.out.Write(map[string]any{"event": "containerFailed", "node": n.name, "pod": refOf(pod), "container": container.Name, "reason": "CreateContainerError", "error": err.Error()})
				return err
			}
		}
		edits[container.Name].(map[string]any)["process"] = c.process()
	}
	return nil
}

// markCreateFailed writes the container's waiting state as kubelet does when the runtime
// cannot create it.
func (n *node) markCreateFailed(ctx context.Context, pod *v1.Pod, name string, failure error) error {
	return n.updateStatus(ctx, pod, func(updated *v1.Pod) {
		var statuses []v1.ContainerStatus
		for _, container := range pod.Spec.Containers {
			status := v1.ContainerStatus{Name: container.Name, Image: container.Image, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
			if container.Name == name {
				status.State.Waiting = &v1.ContainerStateWaiting{Reason: "CreateContainerError", Message: failure.Error()}
			}
			statuses = append(statuses, status)
		}
		updated.Status.ContainerStatuses = statuses
	})
}

// updateStatus writes the pod's status as change makes it, from the pod as stored when the
// informer's copy is stale (a conflict), as kubelet's status manager does.
func (n *node) updateStatus(ctx context.Context, pod *v1.Pod, change func(*v1.Pod)) error {
	current := pod
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		updated := current.DeepCopy()
		change(updated)
		_, err := n.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			stored, getErr := n.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if getErr != nil {
				return getErr
			}
			if stored.UID != pod.UID {
				return nil // another pod of the name: this one is gone
			}
			current = stored
		}
		return err
	})
}

// markRunning writes the status kubelet would once the containers started: running, each
// container started and ready, and the health of its devices.
func (n *node) markRunning(ctx context.Context, pod *v1.Pod, edits map[string]any) error {
	now := metav1.Now()
	return n.updateStatus(ctx, pod, func(updated *v1.Pod) {
		updated.Status.Phase = v1.PodRunning
		updated.Status.StartTime = &now
		updated.Status.HostIP = "127.0.0.1"
		for _, kind := range []v1.PodConditionType{v1.PodInitialized, v1.ContainersReady, v1.PodReady} {
			updated.Status.Conditions = append(updated.Status.Conditions, v1.PodCondition{Type: kind, Status: v1.ConditionTrue, LastTransitionTime: now})
		}
		started := true
		updated.Status.ContainerStatuses = nil
		for _, container := range pod.Spec.Containers {
			status := v1.ContainerStatus{
				Name: container.Name, Image: container.Image, ImageID: container.Image, Ready: true, Started: &started,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
			}
			if process, ok := edits[container.Name].(map[string]any)["process"].(map[string]any); ok {
				status.ContainerID = "runc://" + process["id"].(string)
			}
			updated.Status.ContainerStatuses = append(updated.Status.ContainerStatuses, status)
		}
		n.manager.UpdateAllocatedResourcesStatus(klog.FromContext(ctx), updated, &updated.Status)
	})
}

// writeHealth writes the health of the pod's devices into its containers' statuses, as kubelet
// does when the DRA manager says it changed, and reports it.
func (n *node) writeHealth(ctx context.Context, pod *v1.Pod) error {
	updated := pod.DeepCopy()
	n.manager.UpdateAllocatedResourcesStatus(klog.FromContext(ctx), updated, &updated.Status)
	if _, err := n.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		// Written again when retried (a conflict: the informer has a newer pod by then).
		n.mutex.Lock()
		n.healthChanged[pod.UID] = true
		n.mutex.Unlock()
		return err
	}
	containers := map[string]any{}
	for _, status := range updated.Status.ContainerStatuses {
		resources := status.AllocatedResourcesStatus
		if resources == nil {
			resources = []v1.ResourceStatus{}
		}
		containers[status.Name] = resources
	}
	n.out.Write(map[string]any{"event": "health", "node": n.name, "pod": refOf(pod), "containers": containers})
	return nil
}

type command struct {
	ID        int               `json:"id"`
	Op        string            `json:"op"`
	Node      string            `json:"node"`
	Labels    map[string]string `json:"labels"`
	Namespace string            `json:"namespace"`
	Pod       string            `json:"pod"`
}

func (c *cluster) handle(ctx context.Context, cmd command) map[string]any {
	answer := map[string]any{"id": cmd.ID}
	switch cmd.Op {
	case "addNode":
		n, err := c.addNode(ctx, cmd.Node, cmd.Labels)
		if err != nil {
			answer["error"] = err.Error()
			return answer
		}
		answer["node"] = n.name
		answer["dirs"] = n.dirs
	case "stopKubelet", "startKubelet":
		c.mutex.Lock()
		n := c.nodes[cmd.Node]
		c.mutex.Unlock()
		if n == nil {
			answer["error"] = fmt.Sprintf("no node %s", cmd.Node)
			return answer
		}
		if err := n.restart(ctx, cmd.Op == "startKubelet"); err != nil {
			answer["error"] = err.Error()
		}
	case "inject":
		// A container started again: the runtime resolves its CDI devices anew.
		c.mutex.Lock()
		n := c.nodes[cmd.Node]
		c.mutex.Unlock()
		if n == nil {
			answer["error"] = fmt.Sprintf("no node %s", cmd.Node)
			return answer
		}
		n.life.RLock()
		defer n.life.RUnlock()
		if n.stop == nil {
			answer["error"] = fmt.Sprintf("the kubelet of node %s is stopped", cmd.Node)
			return answer
		}
		obj, exists, _ := n.lister.GetByKey(cmd.Namespace + "/" + cmd.Pod)
		if !exists {
			answer["error"] = fmt.Sprintf("no pod %s/%s on node %s", cmd.Namespace, cmd.Pod, cmd.Node)
			return answer
		}
		containers, err := n.inject(obj.(*v1.Pod))
		if err != nil {
			answer["error"] = err.Error()
			return answer
		}
		answer["containers"] = containers
	default:
		answer["error"] = fmt.Sprintf("unknown op %q", cmd.Op)
	}
	return answer
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the apiserver (admin)")
	dir := flag.String("dir", "", "directory for the simulated nodes' kubelet and CDI directories")
	featureGates := flag.String("feature-gates", "", "the apiserver's feature gates, for every component")
	retryPeriod := flag.Duration("retry-period", 10*time.Second, "how soon a node retries a pod whose sync failed (kubelet's pod worker: 10s)")
	bindingTimeout := flag.Duration("binding-timeout", 0, "kube-scheduler's DynamicResourcesArgs.bindingTimeout (0: its default, 10m; 1.34 and newer)")
	var runtime runtimeConfig
	flag.StringVar(&runtime.runc, "runc", "", "runc's command: the nodes run their pods' containers with it (none: nothing runs)")
	flag.StringVar(&runtime.reporter, "reporter", "", "with --runc: the static program every container runs")
	flag.StringVar(&runtime.baseSpec, "base-spec", "", "with --runc: the base OCI runtime spec (JSON) of every container")
	klog.InitFlags(nil)
	flag.Parse()
	var containers *runtimeConfig
	if runtime.runc != "" {
		if runtime.reporter == "" || runtime.baseSpec == "" {
			fmt.Fprintln(os.Stderr, "dracluster: --runc needs --reporter and --base-spec")
			os.Exit(2)
		}
		containers = &runtime
	}
	if err := run(*kubeconfig, *dir, *featureGates, *retryPeriod, *bindingTimeout, containers); err != nil {
		fmt.Fprintln(os.Stderr, "dracluster:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, dir, featureGates string, retryPeriod, bindingTimeout time.Duration, runtime *runtimeConfig) error {
	if kubeconfig == "" || dir == "" {
		return fmt.Errorf("--kubeconfig and --dir are required")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every event gets "at", the time it happened, so that a test can time the chain from a
	// pod's creation to its CDI edits.
	out := &jsonlines.Output{Writer: os.Stdout, EventTimes: true}

	// The scheduler first: its flags set the process's feature gates, which the claim
	// controller and the DRA managers read too.
	schedulerArgs := []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0"}
	if bindingTimeout > 0 {
		config, err := writeSchedulerConfig(dir, kubeconfig, bindingTimeout)
		if err != nil {
			return err
		}
		// With --config, kube-scheduler reads its kubeconfig from the file, not the flag.
		schedulerArgs = append(schedulerArgs[1:], "--config="+config)
	}
	if featureGates != "" {
		schedulerArgs = append(schedulerArgs, "--feature-gates="+featureGates)
	}
	if err := runScheduler(ctx, schedulerArgs); err != nil {
		return fmt.Errorf("kube-scheduler: %w", err)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = 100, 200
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	if err := runClaimController(ctx, client); err != nil {
		return fmt.Errorf("resourceclaim controller: %w", err)
	}
	evicting, err := runDeviceTaintEviction(ctx, client)
	if err != nil {
		return fmt.Errorf("device-taint eviction controller: %w", err)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	c := &cluster{
		client:      client,
		dir:         dir,
		retryPeriod: retryPeriod,
		out:         out,
		recorder:    broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet"}),
		nodes:       map[string]*node{},
		runtime:     runtime,
	}
	out.Write(map[string]any{"event": "ready", "maxNodes": maxNodes, "deviceTaintEviction": evicting, "containers": runtime != nil})

	jsonlines.Serve(os.Stdin, out, func(cmd command) any { return c.handle(ctx, cmd) })
	// stdin closed: the test is done with us.
	cancel()
	c.mutex.Lock()
	for _, n := range c.nodes {
		n.life.Lock()
		if n.stop != nil {
			n.stop()
			n.stop = nil
		}
		n.life.Unlock()
		if n.runtime != nil {
			n.runtime.stopAll()
		}
	}
	c.mutex.Unlock()
	return nil
}
