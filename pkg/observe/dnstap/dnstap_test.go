package dnstap_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	dnstappb "github.com/dnstap/golang-dnstap"
	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
	"github.com/nodedns/nodedns/pkg/observe/dnstap"
)

// run starts s's taps until the test ends, and waits for them to stop.
func run(t *testing.T, s *dnstap.Set) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("taps still running 5s after their context ended")
		}
	})
}

func newTap(t *testing.T, cfg dnstap.Config) *dnstap.Tap {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	if cfg.Backoff == 0 {
		cfg.Backoff, cfg.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	}
	tap, err := dnstap.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tap
}

func sockPath(t *testing.T) string { return filepath.Join(t.TempDir(), "tap.sock") }

func packed(t *testing.T, name string, qtype uint16, reply bool) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 4242
	if reply {
		m.Response = true
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: []byte{192, 0, 2, 1}}}
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMessages: every field of the four message types, full and bare, as
// golang-dnstap's generated types read them.
func TestMessages(t *testing.T) {
	col := dnstest.StartCollector(t, "unix", sockPath(t))
	bareCol := dnstest.StartCollector(t, "unix", sockPath(t))
	full := newTap(t, dnstap.Config{Socket: "unix://" + col.Addr, Full: true, Identity: "node-1", Version: "nodedns-test", Extra: "extra!"})
	bare := newTap(t, dnstap.Config{Socket: bareCol.Addr, Identity: "node-1", Version: "nodedns-test"})
	set := dnstap.NewSet(full, bare)
	run(t, set)

	client := netip.MustParseAddrPort("127.0.0.7:40000")
	server := netip.MustParseAddrPort("[fd00::53]:5353")
	rcv := time.Unix(1700000000, 123456789)
	sent := rcv.Add(1500 * time.Microsecond)
	q, r := packed(t, "example.org.", dns.TypeA, false), packed(t, "example.org.", dns.TypeA, true)
	set.ClientQuery(false, client, rcv, q)
	set.ClientResponse(true, client, rcv, sent, r)
	fq, fr := new(dns.Msg), new(dns.Msg)
	if err := fq.Unpack(q); err != nil {
		t.Fatal(err)
	}
	if err := fr.Unpack(r); err != nil {
		t.Fatal(err)
	}
	set.Forwarded(false, server, rcv, fq, sent, fr)
	set.Forwarded(true, server, rcv, fq, time.Time{}, nil) // no reply: the query only

	for _, c := range []struct {
		col  *dnstest.Collector
		full bool
	}{{col, true}, {bareCol, false}} {
		got := c.col.Take(5, 5*time.Second)
		if len(got) != 5 {
			t.Fatalf("full=%v: %d messages, want 5 (errors %v)", c.full, len(got), c.col.Errors())
		}
		for _, d := range got {
			if d.GetType() != dnstappb.Dnstap_MESSAGE || string(d.GetIdentity()) != "node-1" || string(d.GetVersion()) != "nodedns-test" {
				t.Errorf("full=%v: header %v %q %q", c.full, d.GetType(), d.GetIdentity(), d.GetVersion())
			}
			if wantExtra := map[bool]string{true: "extra!", false: ""}[c.full]; string(d.GetExtra()) != wantExtra || (wantExtra == "" && d.Extra != nil) {
				t.Errorf("full=%v: extra %q", c.full, d.GetExtra())
			}
		}
		want := []struct {
			typ                dnstappb.Message_Type
			proto              dnstappb.SocketProtocol
			family             dnstappb.SocketFamily
			query, resp        string
			hasRespTime        bool
			queryMsg, replyMsg []byte
		}{
			{dnstappb.Message_CLIENT_QUERY, dnstappb.SocketProtocol_UDP, dnstappb.SocketFamily_INET, "127.0.0.7:40000", "", false, q, nil},
			{dnstappb.Message_CLIENT_RESPONSE, dnstappb.SocketProtocol_TCP, dnstappb.SocketFamily_INET, "127.0.0.7:40000", "", true, nil, r},
			{dnstappb.Message_FORWARDER_QUERY, dnstappb.SocketProtocol_UDP, dnstappb.SocketFamily_INET6, "", "[fd00::53]:5353", false, q, nil},
			{dnstappb.Message_FORWARDER_RESPONSE, dnstappb.SocketProtocol_UDP, dnstappb.SocketFamily_INET6, "", "[fd00::53]:5353", true, nil, r},
			{dnstappb.Message_FORWARDER_QUERY, dnstappb.SocketProtocol_TCP, dnstappb.SocketFamily_INET6, "", "[fd00::53]:5353", false, q, nil},
		}
		for i, w := range want {
			m := got[i].GetMessage()
			if m.GetType() != w.typ || m.GetSocketProtocol() != w.proto || m.GetSocketFamily() != w.family {
				t.Errorf("full=%v #%d: %v %v %v, want %v %v %v", c.full, i, m.GetType(), m.GetSocketProtocol(), m.GetSocketFamily(), w.typ, w.proto, w.family)
			}
			addr := func(a []byte, port uint32, set bool) string {
				if !set {
					return ""
				}
				ip, _ := netip.AddrFromSlice(a)
				return netip.AddrPortFrom(ip, uint16(port)).String()
			}
			if got := addr(m.GetQueryAddress(), m.GetQueryPort(), m.QueryAddress != nil); got != w.query {
				t.Errorf("full=%v #%d: query address %s, want %s", c.full, i, got, w.query)
			}
			if got := addr(m.GetResponseAddress(), m.GetResponsePort(), m.ResponseAddress != nil); got != w.resp {
				t.Errorf("full=%v #%d: response address %s, want %s", c.full, i, got, w.resp)
			}
			if m.GetQueryTimeSec() != uint64(rcv.Unix()) || m.GetQueryTimeNsec() != uint32(rcv.Nanosecond()) {
				t.Errorf("full=%v #%d: query time %d.%09d", c.full, i, m.GetQueryTimeSec(), m.GetQueryTimeNsec())
			}
			if w.hasRespTime != (m.ResponseTimeSec != nil) || w.hasRespTime && (m.GetResponseTimeSec() != uint64(sent.Unix()) || m.GetResponseTimeNsec() != uint32(sent.Nanosecond())) {
				t.Errorf("full=%v #%d: response time %v %d.%09d", c.full, i, m.ResponseTimeSec != nil, m.GetResponseTimeSec(), m.GetResponseTimeNsec())
			}
			wq, wr := w.queryMsg, w.replyMsg
			if !c.full {
				wq, wr = nil, nil
			}
			if !bytes.Equal(m.GetQueryMessage(), wq) || !bytes.Equal(m.GetResponseMessage(), wr) || (wq == nil) != (m.QueryMessage == nil) {
				t.Errorf("full=%v #%d: query message %d bytes, response message %d bytes", c.full, i, len(m.GetQueryMessage()), len(m.GetResponseMessage()))
			}
		}
	}
	dnstest.WaitFor(t, 5*time.Second, "the sent counts", func() bool { return full.Stats().Sent == 5 && bare.Stats().Sent == 5 })
	if st := full.Stats(); !st.Connected || st.Dropped != 0 || st.Lost != 0 || st.QueuedMessages != 0 || st.QueuedBytes != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestNoCollector: with no collector the queue fills to its bound and
// every message past it is dropped and counted, without waiting; a
// collector that comes up later gets what was queued, then the rest.
func TestNoCollector(t *testing.T) {
	path := sockPath(t)
	tap := newTap(t, dnstap.Config{Socket: path, QueueMessages: 10})
	set := dnstap.NewSet(tap)
	run(t, set)
	dnstest.WaitFor(t, 5*time.Second, "a failed connection", func() bool { return tap.Stats().LastError != "" })
	q := packed(t, "example.org.", dns.TypeA, false)
	client := netip.MustParseAddrPort("127.0.0.1:1000")
	start := time.Now()
	for range 1000 {
		set.ClientQuery(false, client, time.Now(), q)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("1000 messages with no collector took %v", d)
	}
	st := tap.Stats()
	if st.Connected || st.QueuedMessages != 10 || st.Dropped != 990 || st.Sent != 0 || st.LastError == "" {
		t.Fatalf("stats %+v, want 10 queued and 990 dropped, not connected, an error", st)
	}
	col := dnstest.StartCollector(t, "unix", path)
	if got := col.Take(10, 5*time.Second); len(got) != 10 {
		t.Fatalf("collector got %d of the 10 queued messages", len(got))
	}
	// Room again once the writer has let go of what it wrote.
	dnstest.WaitFor(t, 5*time.Second, "the queue empty", func() bool { return tap.Stats().QueuedMessages == 0 })
	set.ClientQuery(false, client, time.Now(), q)
	if col.Next(5*time.Second) == nil {
		t.Fatal("no message after the collector came up")
	}
	dnstest.WaitFor(t, 5*time.Second, "sent 11", func() bool { return tap.Stats().Sent == 11 })
}

// TestQueueBytes: the queue's bound in bytes holds whatever its bound in
// messages.
func TestQueueBytes(t *testing.T) {
	tap := newTap(t, dnstap.Config{Socket: sockPath(t), Full: true, QueueMessages: 1000, QueueBytes: 4096})
	set := dnstap.NewSet(tap)
	big := make([]byte, 1000)
	for range 100 {
		set.ClientQuery(false, netip.MustParseAddrPort("127.0.0.1:1"), time.Now(), big)
	}
	st := tap.Stats()
	// Each message is a little over 1000 bytes: 3 fit.
	if st.QueuedBytes > 4096 || st.QueuedMessages != 3 || st.Dropped != 97 {
		t.Fatalf("stats %+v, want 3 messages queued within 4096 bytes", st)
	}
}

// TestHungCollector: a collector that accepts and reads nothing never
// holds the sender up; the queue fills and the rest is dropped.
func TestHungCollector(t *testing.T) {
	col := dnstest.StartCollector(t, "unix", sockPath(t))
	col.Pause()
	tap := newTap(t, dnstap.Config{Socket: col.Addr, Full: true, QueueMessages: 100})
	set := dnstap.NewSet(tap)
	run(t, set)
	dnstest.WaitFor(t, 5*time.Second, "the connection", func() bool { return col.Conns() > 0 })
	q := packed(t, "example.org.", dns.TypeTXT, false)
	start := time.Now()
	for range 10000 {
		set.ClientQuery(true, netip.MustParseAddrPort("127.0.0.1:1"), time.Now(), q)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("10000 messages to a hung collector took %v", d)
	}
	if st := tap.Stats(); st.Dropped < 10000-100 || st.Sent != 0 {
		t.Fatalf("stats %+v, want at least 9900 dropped", st)
	}
}

// TestReconnect: a collector that goes away and comes back: the tap
// connects again (counted) and messages flow again.
func TestReconnect(t *testing.T) {
	path := sockPath(t)
	col := dnstest.StartCollector(t, "unix", path)
	tap := newTap(t, dnstap.Config{Socket: path})
	set := dnstap.NewSet(tap)
	run(t, set)
	client := netip.MustParseAddrPort("127.0.0.1:1")
	set.ClientQuery(false, client, time.Now(), nil)
	if col.Next(5*time.Second) == nil {
		t.Fatal("no first message")
	}
	col.Close()
	col2 := dnstest.StartCollector(t, "unix", path)
	// Messages sent into the broken connection are lost (counted) until
	// the write fails; then the tap connects to the new collector.
	deadline := time.Now().Add(10 * time.Second)
	for col2.Next(20*time.Millisecond) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no message reached the second collector; stats %+v", tap.Stats())
		}
		set.ClientQuery(false, client, time.Now(), nil)
	}
	if st := tap.Stats(); st.Reconnects != 1 || !st.Connected {
		t.Errorf("stats %+v, want 1 reconnect, connected", st)
	}
}

// TestSendAllocs: a message costs no allocation, the queue full or not:
// it is encoded into the queue's one buffer.
func TestSendAllocs(t *testing.T) {
	col := dnstest.StartCollector(t, "unix", sockPath(t))
	tap := newTap(t, dnstap.Config{Socket: col.Addr, Full: true, QueueMessages: 64})
	set := dnstap.NewSet(tap)
	q := packed(t, "example.org.", dns.TypeA, false)
	client := netip.MustParseAddrPort("127.0.0.1:1")
	now := time.Now()
	// Not running: the queue fills, then every message is dropped.
	if n := testing.AllocsPerRun(1000, func() { set.ClientQuery(false, client, now, q) }); n != 0 {
		t.Errorf("queue full: %v allocations per message, want 0", n)
	}
	run(t, set)
	dnstest.WaitFor(t, 5*time.Second, "the queue written out", func() bool { return tap.Stats().QueuedMessages == 0 })
	if n := testing.AllocsPerRun(1000, func() {
		set.ClientResponse(false, client, now, now, q)
	}); n > 0 {
		t.Errorf("connected: %v allocations per message, want 0", n)
	}
}

func TestEndpoint(t *testing.T) {
	for _, c := range []struct{ in, network, addr string }{
		{"unix:///run/tap.sock", "unix", "/run/tap.sock"},
		{"/run/tap.sock", "unix", "/run/tap.sock"},
		{"tcp://127.0.0.1:6000", "tcp", "127.0.0.1:6000"},
		{"tls://collector.example:6000", "tls", "collector.example:6000"},
		{"tcp://[::1]:6000", "tcp", "[::1]:6000"},
	} {
		n, a, err := dnstap.Endpoint(c.in)
		if err != nil || n != c.network || a != c.addr {
			t.Errorf("Endpoint(%q) = %q %q %v, want %q %q", c.in, n, a, err, c.network, c.addr)
		}
	}
	for _, bad := range []string{"", "tap.sock", "udp://127.0.0.1:6000", "tcp://127.0.0.1", "tcp://:6000", "unix://relative"} {
		if _, _, err := dnstap.Endpoint(bad); err == nil {
			t.Errorf("Endpoint(%q): no error", bad)
		}
	}
	for _, cfg := range []dnstap.Config{{Socket: "/x", QueueMessages: -1}, {Socket: "/x", QueueBytes: 100}, {Socket: "/x", QueueMessages: dnstap.MaxQueueMessages + 1}} {
		if _, err := dnstap.New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}
