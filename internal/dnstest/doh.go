package dnstest

import (
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// DoHServer is a DNS-over-HTTPS server (RFC 8484) on loopback for tests:
// POST and GET on /dns-query, HTTP/2 over TLS (HTTP/1.1 for clients that
// ask for it). It logs every request it gets.
type DoHServer struct {
	// Addr is 127.0.0.1:port.
	Addr string

	srv   *http.Server
	conns atomic.Int64

	mu  sync.Mutex
	log []DoHRequest
}

// DoHRequest is one request a DoHServer got.
type DoHRequest struct {
	Method, Path, Proto, ContentType, Accept, Host string
	// ID is the DNS query's ID; Name and Type its question.
	ID   uint16
	Name string
	Type uint16
}

func (r DoHRequest) String() string {
	return fmt.Sprintf("%s %s %s id=%d %s %s ct=%s accept=%s host=%s", r.Proto, r.Method, r.Path, r.ID, r.Name,
		dns.TypeToString[r.Type], r.ContentType, r.Accept, r.Host)
}

// StartDoH serves h over DNS over HTTPS with cert on 127.0.0.1:0 until the
// test ends.
func StartDoH(t testing.TB, h dns.HandlerFunc, cert tls.Certificate) *DoHServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening for DoH: %v", err)
	}
	s := &DoHServer{Addr: ln.Addr().String()}
	s.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, h) }),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}},
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // handshakes a test makes fail on purpose
	}
	go func() { _ = s.srv.ServeTLS(&countingListener{Listener: ln, n: &s.conns}, "", "") }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

func (s *DoHServer) serve(w http.ResponseWriter, r *http.Request, h dns.HandlerFunc) {
	var buf []byte
	var err error
	switch r.Method {
	case http.MethodPost:
		buf, err = io.ReadAll(io.LimitReader(r.Body, 65536))
	case http.MethodGet:
		buf, err = base64.RawURLEncoding.DecodeString(r.URL.Query().Get("dns"))
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
		return
	}
	q := new(dns.Msg)
	if err == nil {
		err = q.Unpack(buf)
	}
	req := DoHRequest{Method: r.Method, Path: r.URL.Path, Proto: r.Proto, ContentType: r.Header.Get("Content-Type"),
		Accept: r.Header.Get("Accept"), Host: r.Host}
	if err == nil && len(q.Question) == 1 {
		req.ID, req.Name, req.Type = q.Id, q.Question[0].Name, q.Question[0].Qtype
	}
	s.mu.Lock()
	s.log = append(s.log, req)
	s.mu.Unlock()
	if err != nil || r.URL.Path != "/dns-query" || len(q.Question) != 1 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	rw := &capture{}
	h(rw, q)
	if rw.m == nil {
		// The handler dropped the query: a blackholed server.
		<-r.Context().Done()
		return
	}
	out, err := rw.m.Pack()
	if err != nil {
		http.Error(w, "pack", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/dns-message")
	_, _ = w.Write(out)
}

// Requests returns what the server was asked, in order.
func (s *DoHServer) Requests() []DoHRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]DoHRequest(nil), s.log...)
}

// Count is how many requests arrived.
func (s *DoHServer) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.log)
}

// CountName is how many requests asked name (any case) of qtype.
func (s *DoHServer) CountName(name string, qtype uint16) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.log {
		if strings.EqualFold(r.Name, name) && r.Type == qtype {
			n++
		}
	}
	return n
}

// Conns is how many TCP connections were accepted.
func (s *DoHServer) Conns() int { return int(s.conns.Load()) }

// capture is the dns.ResponseWriter a DoH request's handler writes to.
type capture struct{ m *dns.Msg }

func (c *capture) LocalAddr() net.Addr  { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (c *capture) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (c *capture) WriteMsg(m *dns.Msg) error {
	c.m = m
	return nil
}
func (c *capture) Write(b []byte) (int, error) {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return 0, err
	}
	c.m = m
	return len(b), nil
}
func (c *capture) Close() error        { return nil }
func (c *capture) TsigStatus() error   { return nil }
func (c *capture) TsigTimersOnly(bool) {}
func (c *capture) Hijack()             {}
