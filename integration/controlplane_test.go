//go:build integration

package integration

// A real Kubernetes control plane for the tests: Debian's etcd and a
// kube-apiserver built from the k8s.io/kubernetes module
// (scripts/kube-apiserver.sh), both on 127.0.0.1 with random ports and a
// temporary directory. It is started once per test binary, by the first
// test that asks for it, and stopped by TestMain. No controller manager,
// scheduler or kubelet runs: tests create EndpointSlices themselves and set
// pod IPs through the status subresource. Service and pod IPs the API
// server hands out are data only: nothing ever sends a packet to them.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ControlPlane is a running etcd + kube-apiserver.
type ControlPlane struct {
	// Kubeconfig is the path of an admin kubeconfig (group system:masters).
	Kubeconfig string
	// Client is an admin clientset.
	Client kubernetes.Interface
	// URL is the API server's https URL on 127.0.0.1.
	URL string
	// Config is the admin REST config behind Client.
	Config *rest.Config
	// Dir holds data, certificates, keys and the two logs.
	Dir string

	etcd, apiserver *cpProc
	kas             string   // kube-apiserver binary
	kasArgs         []string // its flags, for restarts
	token           string   // admin bearer token
	roots           *x509.CertPool
}

// cpProc is a control-plane process writing to a log file.
type cpProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

var (
	cpOnce sync.Once
	cpMu   sync.Mutex
	cp     *ControlPlane
	cpErr  error
	cpSkip string // a prerequisite is missing
)

// controlPlane returns the shared control plane, starting it on first use.
// A missing prerequisite fails the test (need), and so does a start that
// fails, with the tails of both logs.
func controlPlane(t testing.TB) *ControlPlane {
	t.Helper()
	needRoot(t)
	cpOnce.Do(func() {
		c, skip, err := startControlPlane()
		cpMu.Lock()
		cp, cpSkip, cpErr = c, skip, err
		cpMu.Unlock()
	})
	cpMu.Lock()
	c, skip, err := cp, cpSkip, cpErr
	cpMu.Unlock()
	if skip != "" {
		need(t, false, skip)
	}
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", c.tails(40))
		}
	})
	return c
}

// stopControlPlane stops etcd and kube-apiserver, if started, and removes
// their directory. TestMain calls it after every test has run.
func stopControlPlane() {
	cpMu.Lock()
	c := cp
	cp = nil
	cpMu.Unlock()
	if c != nil {
		c.stop()
	}
}

func (c *ControlPlane) stop() {
	// The API server first: it would log etcd errors otherwise.
	for _, p := range []*cpProc{c.apiserver, c.etcd} {
		if p != nil {
			p.stop(15 * time.Second)
		}
	}
	if c.Dir != "" {
		_ = os.RemoveAll(c.Dir)
	}
}

// tails returns the last n lines of each log.
func (c *ControlPlane) tails(n int) string {
	var b strings.Builder
	for _, p := range []*cpProc{c.etcd, c.apiserver} {
		if p == nil {
			continue
		}
		fmt.Fprintf(&b, "--- %s (%s), last %d lines:\n%s\n", p.name, p.log, n, tailFile(p.log, n))
	}
	return b.String()
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kubeAPIServerBin returns the kube-apiserver binary: NODEDNS_KUBE_APISERVER
// when scripts/test.sh has set it, else whatever scripts/kube-apiserver.sh
// prints (a cached build, or a build of several minutes the first time; the
// script also installs etcd when it is missing).
func kubeAPIServerBin() (string, error) {
	if p := os.Getenv("NODEDNS_KUBE_APISERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("NODEDNS_KUBE_APISERVER: %w", err)
		}
		return p, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", "../scripts/kube-apiserver.sh")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/kube-apiserver.sh: %w\n%s", err, tailLines(stderr.String(), 30))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startControlPlane starts etcd and kube-apiserver. skip names a missing
// prerequisite; err is a failure to start. A port taken between choosing it
// and binding it is retried a few times.
func startControlPlane() (c *ControlPlane, skip string, err error) {
	kas, err := kubeAPIServerBin()
	if err != nil {
		return nil, "kube-apiserver binary: " + err.Error(), nil
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return nil, "program etcd on PATH (Debian package etcd-server)", nil
	}
	for attempt := 1; ; attempt++ {
		c, err = tryStartControlPlane(kas)
		if err == nil || attempt == 3 || !errors.Is(err, errPortRace) {
			return c, "", err
		}
	}
}

var errPortRace = errors.New("port taken")

func tryStartControlPlane(kas string) (_ *ControlPlane, err error) {
	dir, err := os.MkdirTemp("", "nodedns-cp-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	c := &ControlPlane{Dir: dir}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.tails(40))
			c.stop()
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return c, err
	}
	etcdClient := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	etcdPeer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])

	c.etcd, err = startCPProc("etcd", filepath.Join(dir, "etcd.log"), "etcd",
		"--name=nodedns-test",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdClient,
		"--advertise-client-urls="+etcdClient,
		"--listen-peer-urls="+etcdPeer,
		"--initial-advertise-peer-urls="+etcdPeer,
		"--initial-cluster=nodedns-test="+etcdPeer,
		"--log-level=warn",
	)
	if err != nil {
		return c, err
	}
	if err := waitHTTP(c.etcd, http.DefaultClient, etcdClient+"/health", "", 30*time.Second, func(b []byte) bool {
		return bytes.Contains(b, []byte(`"health":"true"`))
	}); err != nil {
		return c, err
	}

	// Credentials: an admin bearer token and a service-account key pair.
	token, err := randomHex(16)
	if err != nil {
		return c, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+`,nodedns-admin,nodedns-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return c, fmt.Errorf("writing token file: %w", err)
	}
	saKey, saPub, err := writeSAKey(dir)
	if err != nil {
		return c, err
	}
	certDir := filepath.Join(dir, "certs")
	c.kas, c.token = kas, token
	c.kasArgs = []string{
		"--etcd-servers=" + etcdClient,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--cert-dir=" + certDir,
		"--token-auth-file=" + tokens,
		"--authorization-mode=Node,RBAC",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112",
		// No controller creates the default ServiceAccount of a namespace.
		"--disable-admission-plugins=ServiceAccount",
		// The reconciler of the "kubernetes" Service's endpoints refuses
		// a loopback advertise address; nothing here needs them.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--v=1",
	}
	c.apiserver, err = startCPProc("kube-apiserver", filepath.Join(dir, "kube-apiserver.log"), kas, c.kasArgs...)
	if err != nil {
		return c, err
	}

	// The serving certificate is self-signed by the API server into
	// cert-dir on start; trust exactly that file.
	crt := filepath.Join(certDir, "apiserver.crt")
	if err := waitFile(c.apiserver, crt, 60*time.Second); err != nil {
		return c, err
	}
	pool := x509.NewCertPool()
	pemData, err := os.ReadFile(crt)
	if err != nil {
		return c, fmt.Errorf("reading serving cert: %w", err)
	}
	if !pool.AppendCertsFromPEM(pemData) {
		return c, fmt.Errorf("no certificate in %s", crt)
	}
	c.roots = pool
	if err := c.waitReady(90 * time.Second); err != nil {
		return c, err
	}

	c.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, c.URL, crt, token)
	if err := os.WriteFile(c.Kubeconfig, []byte(kc), 0o600); err != nil {
		return c, fmt.Errorf("writing kubeconfig: %w", err)
	}
	c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return c, fmt.Errorf("loading kubeconfig: %w", err)
	}
	// Tests create thousands of objects; the default 5 QPS would throttle.
	c.Config.QPS, c.Config.Burst = 500, 1000
	c.Client, err = kubernetes.NewForConfig(c.Config)
	if err != nil {
		return c, fmt.Errorf("clientset: %w", err)
	}
	return c, nil
}

// waitReady waits for the API server's /readyz.
func (c *ControlPlane) waitReady(timeout time.Duration) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.roots}}}
	defer hc.CloseIdleConnections()
	return waitHTTP(c.apiserver, hc, c.URL+"/readyz", c.token, timeout, func(b []byte) bool {
		return bytes.Equal(bytes.TrimSpace(b), []byte("ok"))
	})
}

// StopAPIServer stops kube-apiserver and leaves etcd running: an API
// outage as clients see it. StartAPIServer brings it back.
func (c *ControlPlane) StopAPIServer() {
	c.apiserver.stop(15 * time.Second)
}

// StartAPIServer starts kube-apiserver again with the same flags, port and
// certificates, and waits until it is ready. Every object survives in etcd.
func (c *ControlPlane) StartAPIServer() error {
	if !c.apiserver.exited() {
		return errors.New("kube-apiserver is running")
	}
	p, err := startCPProc("kube-apiserver", c.apiserver.log, c.kas, c.kasArgs...)
	if err != nil {
		return err
	}
	c.apiserver = p
	return c.waitReady(90 * time.Second)
}

// startCPProc starts a control-plane process logging to logPath (appended
// to, so that a restart keeps the earlier log). It gets SIGKILL if the test
// binary dies without stopping it.
func startCPProc(name, logPath, bin string, args ...string) (*cpProc, error) {
	return startCPProcEnv(name, logPath, nil, bin, args...)
}

// startCPProcEnv is startCPProc with env added to the process's
// environment.
func startCPProcEnv(name, logPath string, env []string, bin string, args ...string) (*cpProc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &cpProc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *cpProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after wait.
func (p *cpProc) stop(wait time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(wait):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitHTTP polls url until ok accepts the body of a 200 reply, the process
// exits, or timeout passes.
func waitHTTP(p *cpProc, hc *http.Client, url, token string, timeout time.Duration, ok func([]byte) bool) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if p.exited() {
			if strings.Contains(tailFile(p.log, 200), "address already in use") {
				return fmt.Errorf("%s exited: %v: %w", p.name, p.err, errPortRace)
			}
			return fmt.Errorf("%s exited early: %v", p.name, p.err)
		}
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("request %s: %w", url, err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && ok(body) {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, tailLines(string(body), 5))
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready at %s within %v: %s", p.name, url, timeout, last)
}

func waitFile(p *cpProc, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if st, err := os.Stat(path); err == nil && st.Size() > 0 {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited early: %v", p.name, p.err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not write %s within %v", p.name, path, timeout)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. They are free
// when chosen; a process may take one before we bind it (errPortRace).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("choosing a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeSAKey writes a fresh ECDSA service-account signing key and its
// public half.
func writeSAKey(dir string) (keyPath, pubPath string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("service-account key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("marshal service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", fmt.Errorf("marshal service-account public key: %w", err)
	}
	keyPath, pubPath = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", keyPath, err)
	}
	if err := os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", pubPath, err)
	}
	return keyPath, pubPath, nil
}
