package dnstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// CA is a certificate authority made for one test: it issues server
// certificates for DNS-over-TLS upstreams on loopback.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate in PEM form.
	PEM []byte
}

// NewCA makes a fresh CA (ECDSA P-256, valid for a day).
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("CA key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nodedns test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("CA certificate: %v", err)
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// File writes the CA certificate to a file in a test directory and
// returns its path.
func (ca *CA) File(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var serial atomic.Int64

// Issue returns a server certificate for the names and addresses given.
func (ca *CA) Issue(t testing.TB, names []string, ips ...netip.Addr) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("server key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(100 + serial.Add(1)),
		Subject:      pkix.Name{CommonName: "nodedns test server"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     names,
	}
	for _, a := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(a.AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("server certificate: %v", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TLSServer is a DNS-over-TLS server on loopback (RFC 7858), answering one
// query at a time per connection as miekg/dns (and CoreDNS) do.
type TLSServer struct {
	// Addr is 127.0.0.1:port.
	Addr string

	srv        *dns.Server
	queries    atomic.Int64
	conns      atomic.Int64
	handshakes atomic.Int64
	resumed    atomic.Int64
}

// StartTLS serves h over TLS with cert on 127.0.0.1:0 until the test ends.
func StartTLS(t testing.TB, h dns.HandlerFunc, cert tls.Certificate) *TLSServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening for TLS: %v", err)
	}
	s := &TLSServer{Addr: ln.Addr().String()}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			s.handshakes.Add(1)
			if cs.DidResume {
				s.resumed.Add(1)
			}
			return nil
		}}
	started := make(chan struct{})
	s.srv = &dns.Server{
		Listener: tls.NewListener(&countingListener{Listener: ln, n: &s.conns}, cfg),
		Net:      "tcp-tls",
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			s.queries.Add(1)
			h(w, r)
		}),
		NotifyStartedFunc: func() { close(started) },
		ReadTimeout:       2 * time.Second,
		IdleTimeout:       func() time.Duration { return 5 * time.Second },
	}
	go func() { _ = s.srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = s.srv.Shutdown() })
	return s
}

// Count is how many queries arrived.
func (s *TLSServer) Count() int { return int(s.queries.Load()) }

// Conns is how many TCP connections were accepted.
func (s *TLSServer) Conns() int { return int(s.conns.Load()) }

// Handshakes is how many TLS handshakes completed, Resumed how many of
// those resumed an earlier session.
func (s *TLSServer) Handshakes() int { return int(s.handshakes.Load()) }
func (s *TLSServer) Resumed() int    { return int(s.resumed.Load()) }

// IssueFiles issues a server certificate (as Issue) and writes it and its
// key as PEM files in a test directory, for servers that read files.
func (ca *CA) IssueFiles(t testing.TB, names []string, ips ...netip.Addr) (certFile, keyFile string) {
	t.Helper()
	cert := ca.Issue(t, names, ips...)
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatalf("server key: %v", err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
