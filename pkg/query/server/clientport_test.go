package server

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// portHandler answers on the reader with an empty reply and keeps the
// client ports it saw.
type portHandler struct {
	mu    sync.Mutex
	ports []uint16
}

func (h *portHandler) Answer(dst []byte, req *Request) ([]byte, Verdict) {
	h.mu.Lock()
	h.ports = append(h.ports, req.ClientPort)
	h.mu.Unlock()
	m := new(dns.Msg)
	q := new(dns.Msg)
	if q.Unpack(req.Packet) != nil {
		return dst, Drop
	}
	m.SetReply(q)
	b, _ := m.Pack()
	return append(dst, b...), Reply
}

func (h *portHandler) Resolve(_ context.Context, dst []byte, _ *Request) []byte { return dst }
func (h *portHandler) Refuse(dst []byte, _ *Request) []byte                     { return dst }

// TestClientPort: every reader tells the handler the client's port (what
// a dnstap message carries), over UDP, each reader kind, and TCP.
func TestClientPort(t *testing.T) {
	for _, readers := range []string{"threads", "poller"} {
		h := new(portHandler)
		s, _ := start(t, Config{Handler: h, UDPReaders: readers})
		for _, network := range []string{"udp", "tcp"} {
			addr := s.Addrs()[0].String()
			if network == "tcp" {
				addr = s.TCPAddrs()[0].String()
			}
			c, err := net.Dial(network, addr)
			if err != nil {
				t.Fatal(err)
			}
			co := &dns.Conn{Conn: c}
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			if err := co.WriteMsg(q("p.example.", dns.TypeA)); err != nil {
				t.Fatal(err)
			}
			if _, err := co.ReadMsg(); err != nil {
				t.Fatalf("%s %s: %v", readers, network, err)
			}
			want := netip.MustParseAddrPort(c.LocalAddr().String()).Port()
			c.Close()
			h.mu.Lock()
			got := h.ports[len(h.ports)-1]
			h.mu.Unlock()
			if got != want || got == 0 {
				t.Errorf("readers %q, %s: client port %d, want %d", readers, network, got, want)
			}
		}
	}
}
