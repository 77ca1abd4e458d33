//go:build linux

package peers

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/pkg/query/pipeline"
	"github.com/nodedns/nodedns/pkg/query/server"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// answerA answers every name, with nothing cached.
type answerA struct{}

func (answerA) Resolve(_ context.Context, _ stage.Origin, q *dns.Msg) (stage.Result, error) {
	m := new(dns.Msg)
	m.SetReply(q)
	return stage.Result{Msg: m, Source: stage.SourceUpstream}, nil
}

func (answerA) AppendHit(dst []byte, _ string, _, _ uint16, _, _ bool) ([]byte, int, bool) {
	return dst, 0, false
}

func (answerA) AppendHitRef(dst []byte, _ string, _, _ uint16, _, _ bool) ([]byte, int, stage.StoredHit, bool) {
	return dst, 0, nil, false
}

// reusePortConn binds a UDP socket with SO_REUSEPORT, as CoreDNS (and so
// NodeLocal DNSCache) does.
func reusePortConn(t *testing.T, addr string) net.PacketConn {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// TestCheckRealServers: a real nodedns server (pkg/query/pipeline behind
// pkg/query/server) is recognised by the probe; a foreign server sharing
// its port through SO_REUSEPORT is found among them. This pins the probe
// to what the agent answers. (In-process, every socket is this process's: an empty fd
// directory makes them all "another process's".)
func TestCheckRealServers(t *testing.T) {
	p, err := pipeline.New(pipeline.Config{Resolver: answerA{}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Listen: []string{"127.0.0.1:0"}, Handler: p, SocketsPerAddr: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	s.Serve()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	addr := s.Addrs()[0]
	cfg := Config{Addrs: []netip.AddrPort{addr}, SelfFD: t.TempDir()}

	rep, err := Check(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Servers) != 1 || rep.Servers[0].Kind != Agent {
		t.Fatalf("a nodedns server alone: %+v", rep)
	}

	// A foreign server on the same address and port: answers SERVFAIL,
	// as a NodeLocal DNSCache with a dead upstream does.
	pc := reusePortConn(t, addr.String())
	foreign := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeServerFailure)
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	foreign.NotifyStartedFunc = func() { close(started) }
	go func() { _ = foreign.ActivateAndServe() }()
	<-started
	defer func() { _ = foreign.Shutdown() }()

	rep, err = Check(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Foreign()) != 1 || rep.Servers[0].Sockets != 2 || !strings.Contains(rep.Servers[0].Evidence, "SERVFAIL") {
		t.Fatalf("with a foreign server sharing the port: %+v", rep)
	}
	t.Logf("%s", rep.Servers[0])
}
