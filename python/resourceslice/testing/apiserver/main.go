// Command testcluster runs a real kube-apiserver backed by an embedded etcd in one
// process, on 127.0.0.1, for resourceslice's integration tests and demo.
//
// Everything it needs (certificates, service-account key, static tokens, etcd data,
// kubeconfigs) lives in --dir. Started again on the same --dir it reuses all of it,
// including the ports, so a test can kill the server and bring it back on the same
// data while clients keep their kubeconfig.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
)

// user is one identity of the static token file.
type user struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups"`
	Token  string   `json:"token"`
}

// state is what survives a restart on the same --dir, and what clients read.
type state struct {
	Server      string            `json:"server"`
	APIPort     int               `json:"apiPort"`
	EtcdClient  string            `json:"etcdClient"`
	EtcdPeer    string            `json:"etcdPeer"`
	CAFile      string            `json:"caFile"`
	Kubeconfigs map[string]string `json:"kubeconfigs"`
	Users       []user            `json:"users"`
	FeatureGate string            `json:"featureGates"`
}

type userFlags []string

func (u *userFlags) String() string     { return strings.Join(*u, " ") }
func (u *userFlags) Set(v string) error { *u = append(*u, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testcluster:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", "", "state directory (created if missing; reused on restart)")
	var users userFlags
	flag.Var(&users, "user", "extra user as name[=group,group...]; admin and driver always exist")
	flag.Parse()
	if *dir == "" {
		return errors.New("--dir is required")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	st, err := prepare(*dir, users)
	if err != nil {
		return err
	}

	etcd, err := startEtcd(*dir, st)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer func() {
		etcd.Close()
		<-etcd.Server.StopNotify()
	}()

	// The file a launcher waits for: written once etcd serves, before the apiserver
	// starts, so a failing apiserver start is reported by its own log, not a timeout.
	if err := writeJSON(filepath.Join(*dir, "cluster.json"), st); err != nil {
		return err
	}

	cmd := app.NewAPIServerCommand()
	cmd.SetArgs(apiserverArgs(*dir, st, flag.Args()))
	// On SIGTERM the command's context is cancelled, the apiserver shuts down and
	// Execute returns; the deferred etcd close then ends the process cleanly.
	return cmd.Execute()
}

// prepare creates (or reloads) certificates, keys, tokens, ports and kubeconfigs.
func prepare(dir string, extra []string) (*state, error) {
	statePath := filepath.Join(dir, "cluster.json")
	var st state
	if data, err := os.ReadFile(statePath); err == nil {
		if err := json.Unmarshal(data, &st); err != nil {
			return nil, fmt.Errorf("%s: %w", statePath, err)
		}
		return &st, nil
	}

	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	st.APIPort = ports[0]
	st.Server = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	st.EtcdClient = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	st.EtcdPeer = fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	st.CAFile = filepath.Join(dir, "ca.crt")
	st.FeatureGate = draFeatureGates()

	if err := writeCerts(dir); err != nil {
		return nil, err
	}
	if err := writeServiceAccountKey(filepath.Join(dir, "sa.key")); err != nil {
		return nil, err
	}

	specs := append([]string{"admin=system:masters", "driver"}, extra...)
	var tokens strings.Builder
	st.Kubeconfigs = map[string]string{}
	for _, spec := range specs {
		u, err := parseUser(spec)
		if err != nil {
			return nil, err
		}
		st.Users = append(st.Users, u)
		fmt.Fprintf(&tokens, "%s,%s,%s,\"%s\"\n", u.Token, u.Name, u.Name, strings.Join(u.Groups, ","))
		path := filepath.Join(dir, kubeconfigName(u.Name))
		if err := os.WriteFile(path, []byte(kubeconfig(st.Server, st.CAFile, u)), 0o600); err != nil {
			return nil, err
		}
		st.Kubeconfigs[u.Name] = path
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens.String()), 0o600); err != nil {
		return nil, err
	}
	return &st, nil
}

// parseUser reads name[=group,group]; "=" rather than ":" because user names such
// as the kubelet's "system:node:n1" contain colons.
func parseUser(spec string) (user, error) {
	name, groups, _ := strings.Cut(spec, "=")
	if name == "" {
		return user{}, fmt.Errorf("bad --user %q", spec)
	}
	u := user{Name: name, Token: randomToken()}
	if groups != "" {
		u.Groups = strings.Split(groups, ",")
	}
	return u, nil
}

func kubeconfigName(userName string) string {
	return strings.NewReplacer(":", "-", "/", "-").Replace(userName) + ".kubeconfig"
}

func kubeconfig(server, ca string, u user) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: testcluster
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: %s
  context:
    cluster: testcluster
    user: %s
current-context: %s
`, server, ca, u.Name, u.Token, u.Name, u.Name, u.Name)
}

// sliceFeatureGates are the DRA gates that change what a ResourceSlice may hold. The
// test server switches on those this release has and still lets us toggle, so it accepts
// every field a driver may publish. (Gates of other DRA areas stay at their defaults: some
// depend on unrelated alpha features.)
var sliceFeatureGates = []string{
	"DynamicResourceAllocation", // beta and off by default up to 1.33; GA and locked from 1.34
	"DRADeviceTaints",
	"DRAPartitionableDevices",
	"DRAPartitionableDevicesType",
	"DRAResourcePoolStatus", // required by DRAPartitionableDevicesType
	"DRAConsumableCapacity",
	"DRADeviceBindingConditions",
	"DRAListTypeAttributes",
	"DRAOptionalNodeOperations",
	"DRADeviceCompatibilityGroups",
	"DRAFractionalCapacityRange",
	"DRANodeAllocatableResources",
}

// servedResourceVersions are the resource.k8s.io versions besides v1 that the test server
// switches on where this release has them: beta and alpha APIs are off by default, and
// naming one that a release lacks (v1beta2 before 1.33) stops the apiserver from starting.
var servedResourceVersions = []string{"v1beta1", "v1beta2", "v1alpha3"}

func runtimeConfig() string {
	var entries []string
	for _, version := range servedResourceVersions {
		gv := schema.GroupVersion{Group: "resource.k8s.io", Version: version}
		if legacyscheme.Scheme.IsVersionRegistered(gv) {
			entries = append(entries, gv.String()+"=true")
		}
	}
	return strings.Join(entries, ",")
}

func draFeatureGates() string {
	known := utilfeature.DefaultMutableFeatureGate.GetAll()
	var names []string
	for _, name := range sliceFeatureGates {
		spec, ok := known[featuregate.Feature(name)]
		if !ok || spec.LockToDefault {
			continue
		}
		names = append(names, name+"=true")
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func apiserverArgs(dir string, st *state, extra []string) []string {
	args := []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// No Service endpoints for the apiserver: they may not be loopback, and nothing here needs them.
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--secure-port=%d", st.APIPort),
		"--etcd-servers=" + st.EtcdClient,
		"--tls-cert-file=" + filepath.Join(dir, "server.crt"),
		"--tls-private-key-file=" + filepath.Join(dir, "server.key"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC,Node",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--runtime-config=" + runtimeConfig(),
		"--feature-gates=" + st.FeatureGate,
		"--enable-admission-plugins=NodeRestriction",
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--v=0",
	}
	return append(args, extra...)
}

func startEtcd(dir string, st *state) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.Name = "testcluster"
	client, err := url.Parse(st.EtcdClient)
	if err != nil {
		return nil, err
	}
	peer, err := url.Parse(st.EtcdPeer)
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + st.EtcdPeer
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("not ready after 60s")
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%x", b)
}

// writeCerts makes a CA and a serving certificate for 127.0.0.1 and localhost.
func writeCerts(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "resourceslice-testcluster-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt":     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"server.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		"server.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: srvKeyDER}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func writeServiceAccountKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}), 0o600)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
