package agent

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/config"
	"github.com/nodedns/nodedns/pkg/intercept"
	"github.com/nodedns/nodedns/pkg/k8s"
)

func TestFallbackOn(t *testing.T) {
	for _, c := range []struct {
		args  []string
		index bool
		on    bool
		why   string
	}{
		{args: []string{"--local-ip=169.254.20.10"}, index: true, on: true},
		{args: []string{"--local-ip=169.254.20.10"}, why: "no cluster index"},
		{args: []string{"--local-ip=169.254.20.10", "--fallback-dns=169.254.211.2"}, on: true},
		{args: []string{"--local-ip=169.254.20.10", "--fallback-dns="}, index: true, why: "fallback-dns is empty"},
		{args: []string{"--local-ip=169.254.20.10", "--setup-iptables=false"}, index: true, why: "no rules"},
		{args: []string{"--listen=127.0.0.1:5300"}, index: true, why: "no rules"},
		// A wildcard listener: the socket match would never see it.
		{args: []string{"--local-ip=169.254.20.10", "--listen=0.0.0.0:53"}, index: true, why: "no listener bound to 169.254.20.10:53"},
		{args: []string{"--local-ip=169.254.20.10,fd00:20::10", "--listen=169.254.20.10:53,[fd00:20::10]:53,127.0.0.1:5300"}, index: true, on: true},
		{args: []string{"--local-ip=169.254.20.10", "--listen=[::ffff:169.254.20.10]:53"}, index: true, on: true},
	} {
		cfg, err := config.Load(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		on, why := fallbackOn(cfg, c.index)
		if on != c.on || !strings.Contains(why, c.why) {
			t.Errorf("%v (index %v): %v %q; want %v %q", c.args, c.index, on, why, c.on, c.why)
		}
	}
}

func TestFallbackServiceNeedsTheIndex(t *testing.T) {
	cfg, err := config.Load([]string{"--local-ip=169.254.20.10", "--fallback-dns=kube-system/kube-dns", "--loop-check=false"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(cfg, Options{Log: quietLog()}); err == nil || !strings.Contains(err.Error(), "needs the cluster index") {
		t.Fatalf("Build = %v, want the cluster index named", err)
	}
}

// TestFallbackFollowsTheIndex: the targets are the cluster DNS Service's
// endpoints, with the IPv4 address of its pod on this node (the Service is
// IPv6), and follow the EndpointSlice; a local IP that is the Service's
// ClusterIP is left to kube-proxy; a reload switches to addresses, then
// turns the fallback off.
func TestFallbackFollowsTheIndex(t *testing.T) {
	defer func(p time.Duration) { fallbackPoll = p }(fallbackPoll)
	fallbackPoll = 10 * time.Millisecond

	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(name string, proto corev1.Protocol, p int32) discoveryv1.EndpointPort {
		return discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &p}
	}
	slice := func(ips ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns-1", Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}},
			AddressType: discoveryv1.AddressTypeIPv6,
			Ports:       []discoveryv1.EndpointPort{port("dns", udp, 53), port("dns-tcp", tcp, 53)},
		}
		for _, ip := range ips {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
		}
		return s
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-a"},
		Spec:   corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "fd00:244::2", PodIPs: []corev1.PodIP{{IP: "fd00:244::2"}, {IP: "169.254.244.2"}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "169.254.20.11", ClusterIPs: []string{"169.254.20.11"}}}
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}, svc, pod, slice("fd00:244::3", "fd00:244::2"))
	ix, err := k8s.New(client, k8s.Config{Zones: []string{"cluster.local"}, TTL: 5, NodeName: "node-1", Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cfg, err := config.Load([]string{"--local-ip=169.254.20.10,169.254.20.11", "--node-name=node-1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fi := &fakeInterceptor{}
	a := &Agent{cfg: cfg, log: quietLog(), fb: newFallbackState(), ic: fi, ix: ix,
		icfg: intercept.Config{LocalIPs: []netip.Addr{netip.MustParseAddr("169.254.20.10"), netip.MustParseAddr("169.254.20.11")}}}
	a.live.Store(&cfg)
	// Before the sync nothing is set: the rules keep what they have.
	a.updateFallback()
	if _, n := fi.lastFallback(); n != 0 {
		t.Fatalf("SetFallback called %d times before the index synced", n)
	}
	go func() { _ = ix.Run(ctx) }()
	go a.runFallback(ctx)

	wait := func(what string, want intercept.Fallback) {
		t.Helper()
		dnstest.Eventually(t, 10*time.Second, what, func() error {
			got, _ := fi.lastFallback()
			if got.Off == want.Off && slices.Equal(got.Targets, want.Targets) && slices.Equal(got.ClusterIPs, want.ClusterIPs) {
				return nil
			}
			return fmt.Errorf("last SetFallback %+v, want %+v", got, want)
		})
	}
	tgt := func(s string, p uint16) intercept.Target {
		return intercept.Target{Addr: netip.MustParseAddr(s), UDPPort: p, TCPPort: p}
	}
	cips := []netip.Addr{netip.MustParseAddr("169.254.20.11")}
	wait("synced", intercept.Fallback{Targets: []intercept.Target{tgt("169.254.244.2", 53), tgt("fd00:244::2", 53), tgt("fd00:244::3", 53)}, ClusterIPs: cips})

	if _, err := client.DiscoveryV1().EndpointSlices("kube-system").Update(ctx, slice("fd00:244::3"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("endpoint gone", intercept.Fallback{Targets: []intercept.Target{tgt("fd00:244::3", 53)}, ClusterIPs: cips})

	next := cfg
	next.FallbackDNS = config.List{"169.254.211.2:1053"}
	a.live.Store(&next)
	a.kickFallback()
	wait("reloaded", intercept.Fallback{Targets: []intercept.Target{tgt("169.254.211.2", 1053)}, ClusterIPs: cips})

	off := cfg
	off.FallbackDNS = config.List{}
	a.live.Store(&off)
	a.kickFallback()
	wait("off", intercept.Fallback{Off: true})
}

// TestReadyWaitsForTheFallback: /ready holds back while the fallback's
// targets could be known but are not set yet.
func TestReadyWaitsForTheFallback(t *testing.T) {
	cfg, err := config.Load([]string{"--local-ip=169.254.20.10"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	fi := &fakeInterceptor{}
	fi.rules.Add(1)
	a := &Agent{cfg: cfg, ic: fi}
	check := a.interceptReady()
	fi.status = intercept.Status{Fallback: intercept.FallbackWaiting}
	if err := check.Fn(); err == nil || !strings.Contains(err.Error(), "fallback") {
		t.Errorf("waiting: %v, want not ready", err)
	}
	for _, st := range []string{intercept.FallbackOn, intercept.FallbackOff, intercept.FallbackUnavailable} {
		fi.status = intercept.Status{Fallback: st}
		if err := check.Fn(); err != nil {
			t.Errorf("%s: %v, want ready", st, err)
		}
	}
}
