package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestAnswering(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeRefused)
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })

	// A port nobody serves: a closed UDP socket's address.
	idle, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := idle.LocalAddr().String()
	idle.Close()

	if a, ok := Answering(context.Background(), []string{silent, pc.LocalAddr().String()}, 2*time.Second); !ok || a != pc.LocalAddr().String() {
		t.Errorf("Answering = %q, %t; want %s", a, ok, pc.LocalAddr())
	}
	start := time.Now()
	if a, ok := Answering(context.Background(), []string{silent}, 300*time.Millisecond); ok {
		t.Errorf("Answering(silent) = %q, want none", a)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Answering(silent) took %v, bounded by its timeout", d)
	}
}
