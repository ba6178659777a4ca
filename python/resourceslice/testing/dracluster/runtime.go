package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// reporterPath is the image's entrypoint: the only file of every container's rootfs.
const reporterPath = "/reporter"

// startTimeout bounds a container's start: runc's create and start, and the reporter's
// first line.
const startTimeout = 30 * time.Second

// containerRuntime runs the containers of prepared pods with runc, as containerd does for
// kubelet: the OCI spec is a base spec (the Python side's base_spec, like `runc spec`'s)
// with the container's command, arguments and environment, and the CDI devices kubelet gave
// the runtime injected into it by the CDI library; the image is a rootfs holding one static
// program, the reporter, whose first line of output says what it sees. It is the node's
// runtime, not its kubelet's: its containers outlive a kubelet restart, as containerd's do.
type containerRuntime struct {
	runc     string
	reporter string
	base     []byte // the base spec, JSON
	// root is runc's --root (its state of every container of the node); bundles holds a
	// bundle directory per container.
	root, bundles string

	mutex sync.Mutex
	pods  map[types.UID]map[string]*container
}

// container is one `runc run` in the foreground: runc stays the container's parent and
// exits with it, so its exit is waited for, not polled.
type container struct {
	id, bundle string
	cmd        *exec.Cmd
	stderr     bytes.Buffer
	exited     chan struct{}
	// output is the reporter's first line; line is closed once it is read (or never will be).
	output string
	line   chan struct{}
	// pid is the container's process, as the host sees it.
	pid int
}

func newContainerRuntime(runcPath, reporter, baseSpec, dir string) (*containerRuntime, error) {
	base, err := os.ReadFile(baseSpec)
	if err != nil {
		return nil, fmt.Errorf("base OCI spec: %w", err)
	}
	if err := json.Unmarshal(base, &oci.Spec{}); err != nil {
		return nil, fmt.Errorf("base OCI spec %s: %w", baseSpec, err)
	}
	r := &containerRuntime{
		runc: runcPath, reporter: reporter, base: base,
		root: filepath.Join(dir, "state"), bundles: filepath.Join(dir, "bundles"),
		pods: map[types.UID]map[string]*container{},
	}
	for _, d := range []string{r.root, r.bundles} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// spec is the OCI spec containerd would give runc for the container: the base, the image's
// entrypoint (the reporter) or the container's command, its arguments, the pod's literal
// environment variables, then the CDI devices injected by the CDI library (last, as
// containerd's CRI plugin applies them: a variable they set wins).
func (r *containerRuntime) spec(pod *v1.Pod, ctr *v1.Container, rootfs string, registry *cdi.Cache, ids []string) (*oci.Spec, error) {
	var spec oci.Spec
	if err := json.Unmarshal(r.base, &spec); err != nil {
		return nil, err
	}
	spec.Root.Path = rootfs
	spec.Hostname = pod.Name
	args := append([]string{reporterPath}, ctr.Args...)
	if len(ctr.Command) > 0 {
		args = append(append([]string{}, ctr.Command...), ctr.Args...)
	}
	spec.Process.Args = args
	for _, env := range ctr.Env {
		if env.ValueFrom == nil {
			spec.Process.Env = append(spec.Process.Env, env.Name+"="+env.Value)
		}
	}
	if len(ids) > 0 {
		if _, err := registry.InjectDevices(&spec, ids...); err != nil {
			return nil, fmt.Errorf("CDI devices of container %s: %w", ctr.Name, err)
		}
	}
	return &spec, nil
}

// running is the pod's container of that name, when it runs.
func (r *containerRuntime) running(uid types.UID, name string) *container {
	r.mutex.Lock()
	defer r.mutex.Unlock()
	return r.pods[uid][name]
}

// start runs the container and waits for the reporter's first line; an error is runc's own
// message (as kubelet reports a runtime's CreateContainerError), and nothing is left behind.
func (r *containerRuntime) start(pod *v1.Pod, ctr *v1.Container, registry *cdi.Cache, ids []string) (*container, error) {
	c := &container{
		id:     fmt.Sprintf("%s_%s", pod.UID, ctr.Name),
		exited: make(chan struct{}),
		line:   make(chan struct{}),
	}
	c.bundle = filepath.Join(r.bundles, c.id)
	if err := r.makeBundle(pod, ctr, c.bundle, registry, ids); err != nil {
		_ = os.RemoveAll(c.bundle)
		return nil, err
	}
	c.cmd = exec.Command(r.runc, "--root", r.root, "run", "--bundle", c.bundle, c.id)
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err == nil {
		err = c.cmd.Start()
	}
	if err != nil {
		_ = os.RemoveAll(c.bundle)
		return nil, fmt.Errorf("runc run: %w", err)
	}
	go func() {
		reader := bufio.NewReader(stdout)
		if line, err := reader.ReadString('\n'); err == nil {
			c.output = strings.TrimSuffix(line, "\n")
		}
		close(c.line)
		_, _ = io.Copy(io.Discard, reader) // the process never blocks on its stdout
	}()
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	select {
	case <-c.line:
	case <-time.After(startTimeout):
	}
	if c.output == "" {
		r.kill(c, 0)
		<-c.exited
		r.remove(c)
		if said := runcMessage(c.stderr.String()); said != "" {
			return nil, fmt.Errorf("runc run: %s", said)
		}
		return nil, fmt.Errorf("runc run: no output from the container within %v: %s", startTimeout, strings.TrimSpace(c.stderr.String()))
	}
	// runc writes its state before the process starts (its pid file only after).
	if out, err := exec.Command(r.runc, "--root", r.root, "state", c.id).Output(); err == nil {
		var state struct {
			Pid int `json:"pid"`
		}
		if json.Unmarshal(out, &state) == nil {
			c.pid = state.Pid
		}
	}
	r.mutex.Lock()
	if r.pods[pod.UID] == nil {
		r.pods[pod.UID] = map[string]*container{}
	}
	r.pods[pod.UID][ctr.Name] = c
	r.mutex.Unlock()
	return c, nil
}

// process is what the prepared event and the inject answer carry of a running container:
// its runc ID, its process ID on the host and the line its process printed.
func (c *container) process() map[string]any {
	return map[string]any{"id": c.id, "pid": c.pid, "output": c.output}
}

// makeBundle writes the bundle: config.json and a rootfs of the reporter (linked, or copied
// across file systems) and the directories the base spec mounts on.
func (r *containerRuntime) makeBundle(pod *v1.Pod, ctr *v1.Container, bundle string, registry *cdi.Cache, ids []string) error {
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	image := filepath.Join(rootfs, reporterPath)
	if err := os.Link(r.reporter, image); err != nil {
		data, err := os.ReadFile(r.reporter)
		if err != nil {
			return err
		}
		if err := os.WriteFile(image, data, 0o755); err != nil {
			return err
		}
	}
	spec, err := r.spec(pod, ctr, rootfs, registry, ids)
	if err != nil {
		return err
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600)
}

// stopped says how a container ended: the last signal sent ("" when it ended by itself) and
// its exit code.
type stopped struct {
	Container string `json:"container"`
	Signal    string `json:"signal"`
	ExitCode  int    `json:"exitCode"`
}

// stopPod stops every container of the pod as kubelet's killContainer does: SIGTERM, and
// SIGKILL once grace has passed; then the container and its bundle are removed.
func (r *containerRuntime) stopPod(uid types.UID, grace time.Duration) []stopped {
	r.mutex.Lock()
	containers := r.pods[uid]
	delete(r.pods, uid)
	r.mutex.Unlock()
	var done []stopped
	for name, c := range containers {
		how := stopped{Container: name}
		select {
		case <-c.exited:
		default:
			how.Signal = "TERM"
			r.kill(c, grace)
			select {
			case <-c.exited:
			default:
				how.Signal = "KILL"
				<-c.exited
			}
		}
		how.ExitCode = c.cmd.ProcessState.ExitCode()
		r.remove(c)
		done = append(done, how)
	}
	return done
}

// kill sends SIGTERM and, if the container has not exited within grace, SIGKILL (at once
// for a grace of 0).
func (r *containerRuntime) kill(c *container, grace time.Duration) {
	if grace > 0 {
		_ = exec.Command(r.runc, "--root", r.root, "kill", c.id, "TERM").Run()
		select {
		case <-c.exited:
			return
		case <-time.After(grace):
		}
	}
	_ = exec.Command(r.runc, "--root", r.root, "kill", c.id, "KILL").Run()
}

// remove deletes runc's state of an exited container and its bundle.
func (r *containerRuntime) remove(c *container) {
	_ = exec.Command(r.runc, "--root", r.root, "delete", "--force", c.id).Run()
	_ = os.RemoveAll(c.bundle)
}

// stopAll kills every container at once: the program is ending.
func (r *containerRuntime) stopAll() {
	r.mutex.Lock()
	var uids []types.UID
	for uid := range r.pods {
		uids = append(uids, uid)
	}
	r.mutex.Unlock()
	var all sync.WaitGroup
	for _, uid := range uids {
		all.Add(1)
		go func() {
			defer all.Done()
			r.stopPod(uid, 0)
		}()
	}
	all.Wait()
}

// gracePeriod is how long the pod's containers get between SIGTERM and SIGKILL: the
// deletion's grace period, else the pod's own.
func gracePeriod(pod *v1.Pod) time.Duration {
	seconds := int64(v1.DefaultTerminationGracePeriodSeconds)
	if pod.DeletionGracePeriodSeconds != nil {
		seconds = *pod.DeletionGracePeriodSeconds
	} else if pod.Spec.TerminationGracePeriodSeconds != nil {
		seconds = *pod.Spec.TerminationGracePeriodSeconds
	}
	return time.Duration(seconds) * time.Second
}

// runcMessage is the msg of runc's last level=error log line in its stderr, unquoted.
func runcMessage(stderr string) string {
	lines := strings.Split(stderr, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		_, quoted, found := strings.Cut(lines[i], " msg=")
		if !found || !strings.Contains(lines[i], "level=error") {
			continue
		}
		if text, err := strconv.QuotedPrefix(quoted); err == nil {
			if unquoted, err := strconv.Unquote(text); err == nil {
				return unquoted
			}
		}
		return quoted
	}
	return ""
}
