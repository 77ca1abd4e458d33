package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	dnstappb "github.com/dnstap/golang-dnstap"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/observe/dnstap"
	"github.com/nodedns/nodedns/pkg/query/acl"
	"github.com/nodedns/nodedns/pkg/query/server"
)

// recordingTap keeps what the pipeline logs.
type recordingTap struct {
	mu   sync.Mutex
	msgs []tapped
}

type tapped struct {
	response       bool
	tcp            bool
	client         netip.AddrPort
	received, sent time.Time
	msg            []byte
}

func (r *recordingTap) ClientQuery(tcp bool, client netip.AddrPort, received time.Time, query []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, tapped{tcp: tcp, client: client, received: received, msg: bytes.Clone(query)})
}

func (r *recordingTap) ClientResponse(tcp bool, client netip.AddrPort, received, sent time.Time, reply []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, tapped{response: true, tcp: tcp, client: client, received: received, sent: sent, msg: bytes.Clone(reply)})
}

func (r *recordingTap) take() []tapped {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.msgs
	r.msgs = nil
	return out
}

// TestDnstapClientMessages: what CoreDNS's dnstap, first of the plugins,
// logs: a query that gets past the server's checks once (answered on the
// reader, or resolved off it after a Wait, or refused for room), its
// reply as sent; nothing for what the server drops or answers before the
// plugins; the query alone for an access-list drop.
func TestDnstapClientMessages(t *testing.T) {
	tap := new(recordingTap)
	s := hotServer(t, func(c *Config) {
		c.Tap = tap
		c.Plugins = &Plugins{ACL: mustACL(t, acl.Rule{Zones: []string{"dropped.example."}, Policies: []acl.Policy{{Action: acl.Drop}}})}
	})
	out := make([]byte, 0, 4096)
	req := new(server.Request)
	at := time.Unix(1700000000, 5)
	read := func(pkt []byte) {
		req.Read("udp", 0, client, at, pkt)
		req.ClientPort = 5353
	}
	want := netip.AddrPortFrom(client, 5353)

	// A cache hit on the reader: the query, then the reply as sent.
	pkt := packet(t, "Www.Example.Test.", dns.TypeA, true)
	read(pkt)
	reply, v := s.Answer(out[:0], req)
	if v != server.Reply {
		t.Fatalf("verdict %d", v)
	}
	got := tap.take()
	if len(got) != 2 || got[0].response || !got[1].response || !bytes.Equal(got[0].msg, pkt) || !bytes.Equal(got[1].msg, reply) {
		t.Fatalf("cache hit: logged %+v", got)
	}
	for _, m := range got {
		if m.client != want || m.tcp || !m.received.Equal(at) {
			t.Errorf("cache hit: %+v, want client %v, UDP, received %v", m, want, at)
		}
	}
	if got[1].sent.Before(at) {
		t.Errorf("reply sent %v before the query came %v", got[1].sent, at)
	}

	// A miss: Wait on the reader (the query logged there), then
	// Resolve (the reply, SERVFAIL: no upstream answers); a Refuse
	// instead logs the reply the same way.
	pkt = packet(t, "miss.example.test.", dns.TypeA, false)
	read(pkt)
	if _, v := s.Answer(out[:0], req); v != server.Wait {
		t.Fatalf("miss: verdict %d, want Wait", v)
	}
	if got := tap.take(); len(got) != 1 || got[0].response {
		t.Fatalf("miss on the reader: logged %+v, want the query", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	reply = s.Resolve(ctx, out[:0], req)
	if got := tap.take(); len(got) != 1 || !got[0].response || !bytes.Equal(got[0].msg, reply) {
		t.Fatalf("miss resolved: logged %+v, want the reply", got)
	}
	reply = s.Refuse(out[:0], req)
	if got := tap.take(); len(got) != 1 || !got[0].response || !bytes.Equal(got[0].msg, reply) {
		t.Fatalf("miss refused: logged %+v, want the reply", got)
	}

	// What the server answers or drops before the plugins: nothing.
	two := packet(t, "www.example.test.", dns.TypeA, false)
	two[5] = 2 // QDCOUNT 2: FORMERR
	resp := packet(t, "www.example.test.", dns.TypeA, false)
	resp[2] |= 0x80 // a response: dropped
	badVers := new(dns.Msg)
	badVers.SetQuestion("www.example.test.", dns.TypeA)
	badVers.SetEdns0(1232, false)
	badVers.IsEdns0().SetVersion(1)
	bv, err := badVers.Pack()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]byte{two, resp, bv, {1, 2, 3}} {
		read(p)
		s.Answer(out[:0], req)
	}
	if got := tap.take(); len(got) != 0 {
		t.Errorf("protocol errors: logged %d messages, want none", len(got))
	}

	// Dropped by the access list: the query, no reply.
	read(packet(t, "x.dropped.example.", dns.TypeA, false))
	if _, v := s.Answer(out[:0], req); v != server.Drop {
		t.Fatalf("acl drop: verdict %d", v)
	}
	if got := tap.take(); len(got) != 1 || got[0].response {
		t.Errorf("acl drop: logged %+v, want the query alone", got)
	}
}

// withDnstap logs everything, DNS messages included, to a collector on a
// unix socket that reads as fast as it can (and allocates nothing: the
// allocation counts are the process's).
func withDnstap(tb testing.TB) func(*Config) {
	tb.Helper()
	col := dnstest.StartSink(tb, "unix", filepath.Join(tb.TempDir(), "tap.sock"))
	tap, err := dnstap.New(dnstap.Config{Socket: col.Addr, Full: true, Identity: "node", Version: "test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	set := dnstap.NewSet(tap)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); set.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	// Connected before the measures: the queue is written out as it
	// fills.
	deadline := time.Now().Add(5 * time.Second)
	for !tap.Stats().Connected {
		if time.Now().After(deadline) {
			tb.Fatal("dnstap collector not connected")
		}
		time.Sleep(time.Millisecond)
	}
	return func(c *Config) { c.Tap = set }
}

// TestDnstapHotPathAllocs: with a dnstap collector configured (the DNS
// messages included), the reader's answers still allocate nothing: the
// query and the reply are encoded into frames that go round a free list.
func TestDnstapHotPathAllocs(t *testing.T) {
	s := hotServer(t, withDnstap(t))
	out := make([]byte, 0, 4096)
	for _, c := range []struct {
		name string
		pkt  []byte
	}{
		{"cache hit", packet(t, "Www.Example.Test.", dns.TypeA, true)},
		{"cluster answer", packet(t, "web.team-a.svc.cluster.local.", dns.TypeA, true)},
	} {
		if _, v := serveOnce(s, c.pkt, out); v != server.Reply {
			t.Fatalf("%s: verdict %d", c.name, v)
		}
		if n := testing.AllocsPerRun(200, func() { serveOnce(s, c.pkt, out) }); n > 0 {
			t.Errorf("%s with dnstap: %.2f allocations per query, want 0", c.name, n)
		}
	}
}

// TestDnstapReplyBytes: the CLIENT_RESPONSE a collector gets holds the
// reply exactly as the client got it.
func TestDnstapReplyBytes(t *testing.T) {
	col := dnstest.StartCollector(t, "unix", filepath.Join(t.TempDir(), "tap.sock"))
	tap, err := dnstap.New(dnstap.Config{Socket: col.Addr, Full: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	set := dnstap.NewSet(tap)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); set.Run(ctx) }()
	defer func() { cancel(); <-done }()
	s := hotServer(t, func(c *Config) { c.Tap = set })
	pkt := packet(t, "web.team-a.svc.cluster.local.", dns.TypeA, true)
	reply, _ := serveOnce(s, pkt, make([]byte, 0, 4096))
	got := col.Take(2, 5*time.Second)
	if len(got) != 2 {
		t.Fatalf("%d messages", len(got))
	}
	q, r := got[0].GetMessage(), got[1].GetMessage()
	if q.GetType() != dnstappb.Message_CLIENT_QUERY || !bytes.Equal(q.GetQueryMessage(), pkt) {
		t.Errorf("query: %v, %d bytes", q.GetType(), len(q.GetQueryMessage()))
	}
	if r.GetType() != dnstappb.Message_CLIENT_RESPONSE || !bytes.Equal(r.GetResponseMessage(), reply) {
		t.Errorf("response: %v, %d bytes", r.GetType(), len(r.GetResponseMessage()))
	}
}
