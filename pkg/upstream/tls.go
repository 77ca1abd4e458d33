package upstream

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"
)

// caCheckEvery is how often the CA bundle file is read for changes (a
// mounted Secret or ConfigMap changes by a symlink swap; the content is
// what is compared).
const caCheckEvery = 10 * time.Second

// maxCABytes bounds the CA bundle read.
const maxCABytes = 4 << 20

// caBundle holds the roots that DNS-over-TLS upstreams are verified
// against: the PEM file of Config.CAFile, re-read when its content
// changes, or the system's roots when there is no file. A bundle that
// stops parsing keeps the last good roots (and says so).
type caBundle struct {
	file string
	log  *slog.Logger

	mu      sync.Mutex
	pool    *x509.CertPool // nil: the system roots
	sum     [32]byte
	checked time.Time
	lastErr string
}

func newCABundle(file string, log *slog.Logger) (*caBundle, error) {
	b := &caBundle{file: file, log: log}
	if file == "" {
		return b, nil
	}
	pool, sum, err := loadCA(file)
	if err != nil {
		return nil, err
	}
	b.pool, b.sum, b.checked = pool, sum, time.Now()
	return b, nil
}

// loadCA reads a PEM bundle; it must hold at least one certificate, and
// nothing in it may fail to parse (a truncated bundle is refused rather
// than half used).
func loadCA(file string) (*x509.CertPool, [32]byte, error) {
	var sum [32]byte
	f, err := os.Open(file)
	if err != nil {
		return nil, sum, fmt.Errorf("reading upstream CA bundle: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxCABytes+1)); err != nil {
		return nil, sum, fmt.Errorf("reading upstream CA bundle %s: %w", file, err)
	}
	if buf.Len() > maxCABytes {
		return nil, sum, fmt.Errorf("upstream CA bundle %s: larger than %d bytes", file, maxCABytes)
	}
	data := buf.Bytes()
	sum = sha256.Sum256(data)
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, sum, fmt.Errorf("upstream CA bundle %s: certificate %d: %w", file, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, sum, fmt.Errorf("upstream CA bundle %s: no PEM certificate in it", file)
	}
	return pool, sum, nil
}

// roots is the pool to verify against (nil: the system's).
func (b *caBundle) roots() *x509.CertPool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pool
}

// refresh re-reads the file when caCheckEvery has passed since the last
// look; new connections use new roots, open ones are left alone.
func (b *caBundle) refresh(now time.Time) {
	if b.file == "" {
		return
	}
	b.mu.Lock()
	if now.Sub(b.checked) < caCheckEvery {
		b.mu.Unlock()
		return
	}
	b.checked = now
	b.mu.Unlock()
	pool, sum, err := loadCA(b.file)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if err.Error() != b.lastErr {
			b.log.Warn("upstream CA bundle unusable; keeping the roots loaded before", "component", "upstream", "file", b.file, "err", err)
			b.lastErr = err.Error()
		}
		return
	}
	b.lastErr = ""
	if sum == b.sum {
		return
	}
	b.pool, b.sum = pool, sum
	b.log.Info("upstream CA bundle reloaded", "component", "upstream", "file", b.file)
}

// tlsConfigFunc returns the TLS configuration for new connections to one
// server: verified for serverName, or for the IP address when it is empty;
// TLS 1.2 at least; sessions resumed across the pool's connections.
func (b *caBundle) tlsConfigFunc(serverName string, addr netip.Addr) func() *tls.Config {
	name := serverName
	if name == "" {
		name = addr.String()
	}
	sessions := tls.NewLRUClientSessionCache(maxStreamConns)
	return func() *tls.Config {
		return &tls.Config{ServerName: name, RootCAs: b.roots(), MinVersion: tls.VersionTLS12, ClientSessionCache: sessions}
	}
}

// CheckCAFile reports whether file is a CA bundle the forwarder can use.
func CheckCAFile(file string) error {
	_, _, err := loadCA(file)
	return err
}
