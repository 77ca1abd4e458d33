package server

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Hostile and broken input (issue 8): every malformed packet gets the
// outcome RFC 1035/6891/8482 prescribe, over UDP and over TCP alike, and
// TCP clients that are slow, idle, too many or never read cannot hold the
// server.

// outcome is what the server must do with a packet.
type outcome int

const (
	drop     outcome = -1 // no reply at all
	answered outcome = -2 // answered from the pipeline (NOERROR)
)

// wire helpers: a header, names and records in raw bytes.

func hdr(id, flags, qd, an, ns, ar uint16) []byte {
	b := make([]byte, 12)
	for i, v := range []uint16{id, flags, qd, an, ns, ar} {
		binary.BigEndian.PutUint16(b[2*i:], v)
	}
	return b
}

func u16(v uint16) []byte { return []byte{byte(v >> 8), byte(v)} }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// name is the uncompressed wire form of dotted labels ("" is the root).
func name(dotted string) []byte {
	var out []byte
	for _, l := range strings.Split(strings.TrimSuffix(dotted, "."), ".") {
		if l == "" {
			continue
		}
		out = append(append(out, byte(len(l))), l...)
	}
	return append(out, 0)
}

// optRR is an OPT record: root owner, UDP size, extended rcode/version/DO
// in the TTL, and rdata.
func optRR(size uint16, version uint8, rdata []byte) []byte {
	return cat([]byte{0}, u16(dns.TypeOPT), u16(size), []byte{0, version, 0, 0}, u16(uint16(len(rdata))), rdata)
}

const rd = 1 << 8

func badPacketCases(t *testing.T) []struct {
	name string
	pkt  []byte
	want outcome // an rcode, drop or answered
} {
	q := cat(name("a.example."), u16(dns.TypeA), u16(dns.ClassINET))
	label64 := cat([]byte{64}, []byte(strings.Repeat("x", 64)), []byte{0})
	// 4 labels of 63 plus one of 1: 4*64 + 2 + 1 = 259 octets.
	long := []byte{}
	for i := 0; i < 4; i++ {
		long = append(append(long, 63), strings.Repeat("y", 63)...)
	}
	long = append(long, 1, 'z', 0)
	// The longest legal name: 3 labels of 63, one of 61, root = 255.
	longest := []byte{}
	for i := 0; i < 3; i++ {
		longest = append(append(longest, 63), strings.Repeat("w", 63)...)
	}
	longest = append(append(longest, 61), strings.Repeat("w", 61)...)
	longest = append(longest, 0)
	padding := cat(u16(12), u16(4000), make([]byte, 4000)) // EDNS padding option, 4000 octets
	return []struct {
		name string
		pkt  []byte
		want outcome
	}{
		// Headers.
		{"empty packet", nil, drop},
		{"header of 11 octets", hdr(1, rd, 1, 0, 0, 0)[:11], drop},
		{"response sent as a query (QR=1)", cat(hdr(2, 1<<15|rd, 1, 0, 0, 0), q), drop},
		{"response with rcode", cat(hdr(3, 1<<15|dns.RcodeNameError, 1, 0, 0, 0), q), drop},
		{"QDCOUNT 0", hdr(4, rd, 0, 0, 0, 0), dns.RcodeFormatError},
		{"QDCOUNT 2", cat(hdr(5, rd, 2, 0, 0, 0), q, q), dns.RcodeFormatError},
		{"QDCOUNT 1, no question", hdr(6, rd, 1, 0, 0, 0), dns.RcodeFormatError},
		{"opcode NOTIFY", cat(hdr(7, dns.OpcodeNotify<<11, 1, 0, 0, 0), q), dns.RcodeNotImplemented},
		{"opcode UPDATE", cat(hdr(8, dns.OpcodeUpdate<<11, 1, 0, 0, 0), q), dns.RcodeNotImplemented},
		{"opcode IQUERY", cat(hdr(9, dns.OpcodeIQuery<<11, 1, 0, 0, 0), q), dns.RcodeNotImplemented},
		// Questions.
		{"question cut inside a label", cat(hdr(10, rd, 1, 0, 0, 0), []byte{7, 'e', 'x', 'a'}), dns.RcodeFormatError},
		{"question cut before type", cat(hdr(11, rd, 1, 0, 0, 0), name("a.example.")), dns.RcodeFormatError},
		{"question cut inside class", cat(hdr(12, rd, 1, 0, 0, 0), name("a.example."), u16(dns.TypeA), []byte{0}), dns.RcodeFormatError},
		{"compression pointer loop in question", cat(hdr(13, rd, 1, 0, 0, 0), []byte{0xC0, 12}, u16(1), u16(1)), dns.RcodeFormatError},
		{"pointer loop after a label", cat(hdr(14, rd, 1, 0, 0, 0), []byte{1, 'a', 0xC0, 12}, u16(1), u16(1)), dns.RcodeFormatError},
		{"forward compression pointer", cat(hdr(15, rd, 1, 0, 0, 0), []byte{1, 'a', 0xC0, 20}, u16(1), u16(1), name("b.")), dns.RcodeFormatError},
		{"label of 64 octets", cat(hdr(16, rd, 1, 0, 0, 0), label64, u16(1), u16(1)), dns.RcodeFormatError},
		{"reserved label type 0x80", cat(hdr(17, rd, 1, 0, 0, 0), []byte{0x81, 'a', 0}, u16(1), u16(1)), dns.RcodeFormatError},
		{"name of 259 octets", cat(hdr(18, rd, 1, 0, 0, 0), long, u16(1), u16(1)), dns.RcodeFormatError},
		{"name of 255 octets (legal)", cat(hdr(19, rd, 1, 0, 0, 0), longest, u16(1), u16(1)), answered},
		{"class CHAOS", cat(hdr(20, rd, 1, 0, 0, 0), name("version.bind."), u16(dns.TypeTXT), u16(dns.ClassCHAOS)), dns.RcodeRefused},
		{"class 42", cat(hdr(21, rd, 1, 0, 0, 0), name("a.example."), u16(dns.TypeA), u16(42)), dns.RcodeRefused},
		{"class ANY", cat(hdr(22, rd, 1, 0, 0, 0), name("a.example."), u16(dns.TypeA), u16(dns.ClassANY)), dns.RcodeRefused},
		{"qtype ANY (RFC 8482)", cat(hdr(23, rd, 1, 0, 0, 0), name("a.example."), u16(dns.TypeANY), u16(1)), answered},
		{"qtype AXFR", cat(hdr(24, 0, 1, 0, 0, 0), name("example."), u16(dns.TypeAXFR), u16(1)), dns.RcodeRefused},
		{"qtype IXFR", cat(hdr(25, 0, 1, 0, 0, 0), name("example."), u16(dns.TypeIXFR), u16(1)), dns.RcodeRefused},
		{"qtype OPT", cat(hdr(26, rd, 1, 0, 0, 0), name("a.example."), u16(dns.TypeOPT), u16(1)), dns.RcodeFormatError},
		{"qtype 0", cat(hdr(27, rd, 1, 0, 0, 0), name("a.example."), u16(0), u16(1)), dns.RcodeFormatError},
		{"trailing octets after the question", cat(hdr(28, rd, 1, 0, 0, 0), q, []byte("garbage")), answered},
		// EDNS.
		{"EDNS version 1 (BADVERS)", cat(hdr(29, rd, 1, 0, 0, 1), q, optRR(1232, 1, nil)), dns.RcodeBadVers},
		{"EDNS version 255", cat(hdr(30, rd, 1, 0, 0, 1), q, optRR(1232, 255, nil)), dns.RcodeBadVers},
		{"two OPT records", cat(hdr(31, rd, 1, 0, 0, 2), q, optRR(1232, 0, nil), optRR(512, 0, nil)), dns.RcodeFormatError},
		{"OPT with a non-root owner", cat(hdr(32, rd, 1, 0, 0, 1), q, []byte{1, 'x'}, optRR(1232, 0, nil)), dns.RcodeFormatError},
		{"OPT RDLENGTH past the end", cat(hdr(33, rd, 1, 0, 0, 1), q, optRR(1232, 0, nil)[:9], u16(500)), dns.RcodeFormatError},
		{"huge OPT (4000 octets of padding)", cat(hdr(34, rd, 1, 0, 0, 1), q, optRR(65535, 0, padding)), answered},
		{"ARCOUNT 1, no record", cat(hdr(35, rd, 1, 0, 0, 1), q), dns.RcodeFormatError},
		{"ANCOUNT 3, no records", cat(hdr(36, rd, 1, 3, 0, 1), q, optRR(1232, 0, nil)), dns.RcodeFormatError},
		// A pointer loop in an additional record's owner is skipped, never
		// followed: the query itself is fine.
		{"pointer loop in an additional record", cat(hdr(37, rd, 1, 0, 0, 1), q, []byte{0xC0, 29}, u16(dns.TypeA), u16(1), []byte{0, 0, 0, 1}, u16(4), []byte{192, 0, 2, 1}), answered},
	}
}

// TestBadPacketTable sends every case over UDP and TCP and checks the
// outcome: the rcode (with the client's ID, QR set, and no question when
// the question could not be read), an answer, or silence.
func TestBadPacketTable(t *testing.T) {
	s, addr := start(t, Config{Resolver: &fakeResolver{}})
	tcpAddr := s.TCPAddrs()[0].String()
	for _, c := range badPacketCases(t) {
		for _, proto := range []string{"udp", "tcp"} {
			t.Run(proto+"/"+c.name, func(t *testing.T) {
				var b []byte
				if proto == "udp" {
					b = raw(t, addr, c.pkt)
				} else {
					b = rawTCP(t, tcpAddr, c.pkt)
				}
				checkOutcome(t, c.pkt, b, c.want)
			})
		}
	}
	if n := s.Stats().Panics; n != 0 {
		t.Fatalf("%d panics recovered", n)
	}
	// The server still answers after all that.
	if r := exchange(t, addr, "udp", q("still.example.", dns.TypeA)); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("after the bad packets: %v", r)
	}
}

func checkOutcome(t *testing.T, pkt, b []byte, want outcome) {
	t.Helper()
	if want == drop {
		if b != nil {
			t.Fatalf("got a reply (% x), want silence", b)
		}
		return
	}
	if b == nil {
		t.Fatalf("no reply, want %v", want)
	}
	r := new(dns.Msg)
	if err := r.Unpack(b); err != nil {
		t.Fatalf("reply does not unpack: %v", err)
	}
	if r.Id != binary.BigEndian.Uint16(pkt) || !r.Response {
		t.Fatalf("reply ID %d QR %v, want ID %d and QR", r.Id, r.Response, binary.BigEndian.Uint16(pkt))
	}
	switch want {
	case answered:
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			t.Fatalf("want an answer, got %s with %d records", dns.RcodeToString[r.Rcode], len(r.Answer))
		}
	default:
		if r.Rcode != int(want) {
			t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[int(want)])
		}
		if len(r.Answer) != 0 {
			t.Fatalf("error reply with %d answers", len(r.Answer))
		}
		if int(want) == dns.RcodeBadVers && r.IsEdns0() == nil {
			t.Fatalf("BADVERS without an OPT")
		}
	}
	if len(r.Question) > 1 {
		t.Fatalf("reply with %d questions", len(r.Question))
	}
}

// rawTCP sends b as one framed message on a new connection and returns
// the reply, or nil when the server closes the connection or says nothing
// for a short while.
func rawTCP(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(cat(u16(uint16(len(b))), b)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil
	}
	out := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, out); err != nil {
		t.Fatalf("reply cut short: %v", err)
	}
	return out
}

// closedWithin reports whether the server closes c within d (reading and
// discarding whatever arrives).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

// TestTCPSlowAndIdleClients: an idle connection and one that trickles a
// query a byte at a time (slowloris) are both cut after the idle timeout,
// which bounds a whole message, not each read.
func TestTCPSlowAndIdleClients(t *testing.T) {
	const idle = 300 * time.Millisecond
	s, _ := start(t, Config{Resolver: &fakeResolver{}, TCPIdleTimeout: idle})
	addr := s.TCPAddrs()[0].String()

	idleConn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idleConn.Close()
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	msg := packTB(t, q("slow.example.", dns.TypeA))
	frame := cat(u16(uint16(len(msg))), msg)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// One byte every 50 ms: the whole frame would take 1.5 s.
		for i := 0; i < len(frame)-1 && !stop.Load(); i++ {
			if _, err := slow.Write(frame[i : i+1]); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	// Generous bound (the timeout is 300 ms): the point is that they are
	// cut at all, long before the slow frame could complete.
	if !closedWithin(idleConn, 5*time.Second) {
		t.Fatal("idle connection not closed")
	}
	if !closedWithin(slow, 5*time.Second) {
		t.Fatal("slow (trickling) connection not closed")
	}
	waitFor(t, func() bool { return s.Stats().TCPConns == 0 })
}

// TestTCPConnectionBound: past MaxTCPConns a new connection closes the one
// idle longest to make room; with none idle (every connection in the
// middle of a message) it is closed at once; when one closes, a new one is
// served again.
func TestTCPConnectionBound(t *testing.T) {
	s, _ := start(t, Config{Resolver: &fakeResolver{}, MaxTCPConns: 3, MaxClientTCPConns: -1})
	addr := s.TCPAddrs()[0].String()
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		waitFor(t, func() bool { return s.Stats().TCPConns == i+1 })
	}
	// All three idle: a fourth closes the oldest and is served.
	r := exchange(t, addr, "tcp", q("fourth.example.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess || s.Stats().TCPEvicted != 1 {
		t.Fatalf("fourth connection with three idle: %v, stats %+v", r, s.Stats())
	}
	if !closedWithin(open[0], 5*time.Second) {
		t.Fatal("the connection idle longest was not closed")
	}
	open[0].Close()
	waitFor(t, func() bool { return s.Stats().TCPConns == 2 })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	open[0] = c
	waitFor(t, func() bool { return s.Stats().TCPConns == 3 })
	// None idle (each has begun a message): the next is refused.
	for _, c := range open {
		if _, err := c.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if !closedWithin(over, 5*time.Second) {
		t.Fatal("connection over the bound was served")
	}
	over.Close()
	if st := s.Stats(); st.TCPConns != 3 || st.Overloaded == 0 {
		t.Fatalf("stats %+v: want 3 connections open and one refused", st)
	}
	open[0].Close()
	waitFor(t, func() bool { return s.Stats().TCPConns == 2 })
	r = exchange(t, addr, "tcp", q("again.example.", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess {
		t.Fatalf("after a slot freed: %v", r)
	}
}

// TestTCPNonReader: clients that pipeline queries with large answers and
// never read them fill their connections; meanwhile other clients, over
// TCP and UDP, are answered (NOERROR, not an overload SERVFAIL), and the
// non-readers are cut once a write has waited TCPWriteTimeout.
func TestTCPNonReader(t *testing.T) {
	big := &fakeResolver{fn: func(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetReply(q)
		if strings.HasPrefix(q.Question[0].Name, "big") {
			for i := 0; i < 60; i++ {
				m.Answer = append(m.Answer, mustRR(`%s 60 IN TXT "%s"`, q.Question[0].Name, strings.Repeat("b", 250)))
			}
		} else {
			m.Answer = []dns.RR{mustRR("%s 60 IN A 192.0.2.7", q.Question[0].Name)}
		}
		return m, nil
	}}
	// MaxInflight: three connections resolve at most 3 x 16 at once, but
	// would hold 3 x 17 slots (and starve everyone) if a blocked write, or
	// a reader waiting for its connection's slot, kept a server-wide slot.
	// (No per-client bound: every connection here is from 127.0.0.1.)
	s, addr := start(t, Config{Resolver: big, MaxInflight: 50, MaxClientInflight: -1, TCPWriteTimeout: 3 * time.Second, TCPIdleTimeout: time.Minute})
	tcpAddr := s.TCPAddrs()[0].String()

	var stuck []net.Conn
	var written atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", tcpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		stuck = append(stuck, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Pipeline ~15 MB of answers, never reading; the writes
			// block once the server stops reading, until it cuts us.
			_ = c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			co := &dns.Conn{Conn: c}
			for j := 0; j < 1000; j++ {
				if co.WriteMsg(q(sprintf("big%d-%d.example.", i, j), dns.TypeTXT)) != nil {
					return
				}
				written.Add(1)
			}
		}()
	}
	// The queries all fit in the socket buffers; the answers (15 MB per
	// connection) do not: give the server time to fill the buffers and
	// block in its writes.
	waitLong(t, func() bool { return written.Load() == 3000 })
	time.Sleep(500 * time.Millisecond)
	// Meanwhile everyone else is served.
	tc := &dns.Client{Net: "tcp", Timeout: 3 * time.Second}
	uc := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	for i := 0; i < 20; i++ {
		for _, cl := range []struct {
			c    *dns.Client
			addr string
		}{{tc, tcpAddr}, {uc, addr}} {
			r, _, err := cl.c.Exchange(q(sprintf("other%d.example.", i), dns.TypeA), cl.addr)
			if err != nil {
				t.Fatalf("%s client while others do not read: %v", cl.c.Net, err)
			}
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("%s client while others do not read: %s (overloaded %d, in flight %d)",
					cl.c.Net, dns.RcodeToString[r.Rcode], s.Stats().Overloaded, s.Stats().InFlight)
			}
		}
	}
	if n := s.Stats().Overloaded; n != 0 {
		t.Fatalf("%d queries refused at the in-flight bound: the non-readers held server-wide slots", n)
	}
	// The non-readers are cut off by the server (they read nothing, and
	// the idle timeout is far away).
	waitLong(t, func() bool { return s.Stats().TCPConns == 0 })
	for i, c := range stuck {
		if !closedWithin(c, 5*time.Second) {
			t.Fatalf("non-reading connection %d not closed", i)
		}
	}
	wg.Wait()
	waitFor(t, func() bool { return s.Stats().TCPConns == 0 && s.Stats().InFlight == 0 })
}

// waitLong polls cond for up to 30 s: for conditions that wait on the
// server's own timeouts, on a machine that may be busy (-race).
func waitLong(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
