package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The test's external world: a DNS server on the node's resolver address
// (scripts/cluster.sh's NODE_RESOLVER, 127.0.53.53, which pods with
// dnsPolicy Default and the agent's upstream use) and on the node's
// link-local address (where the cluster's central DNS forwards), that
// knows *.ext.e2e.example (link-local and ULA answers: data, no packet
// ever goes there) and refuses everything else.
const (
	UpstreamIP = "127.0.53.53"
	ExtDomain  = "ext.e2e.example"
	ExtV4      = "169.254.99.1"
	ExtV6      = "fdd5:6e6f:6465:ee::1"
)

// EnsureUpstream makes sure the test upstream answers: when something
// already answers up.ext.e2e.example on UpstreamIP (scripts/e2e.sh's, or
// one left by KEEP=1), it is used; else dnsmasq is started and stopped
// when the test binary's TestMain calls the returned stop.
func (c *Cluster) EnsureUpstream() (stop func(), err error) {
	if upstreamAnswers() {
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "nodedns-e2e-upstream")
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	logf, err := os.Create(filepath.Join(dir, "upstream.log"))
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	cmd := exec.Command("dnsmasq", "--keep-in-foreground", "--no-hosts", "--no-resolv", "--bind-interfaces",
		"--listen-address="+UpstreamIP, "--listen-address="+c.Env["NODE_IP4"], "--port=53", "--local-ttl=60",
		"--address=/"+ExtDomain+"/"+ExtV4, "--address=/"+ExtDomain+"/"+ExtV6,
		"--pid-file="+filepath.Join(dir, "dnsmasq.pid"), "--log-facility=-", "--log-queries=extra")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting dnsmasq: %w", err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		os.RemoveAll(dir)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !upstreamAnswers() {
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("test upstream (dnsmasq) on %s did not answer within 10s", UpstreamIP)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return stop, nil
}

func upstreamAnswers() bool {
	out, err := HostErr("dig", "+short", "+time=1", "+tries=1", "@"+UpstreamIP, "up."+ExtDomain, "A")
	return err == nil && strings.TrimSpace(out) == ExtV4
}
