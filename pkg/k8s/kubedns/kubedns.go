// Package kubedns reads the kube-dns ConfigMap from a mounted directory, as
// kube-dns and NodeLocal DNSCache (node-cache) read it: one file per key,
// `stubDomains` a JSON object of zone to a list of nameservers and
// `upstreamNameservers` a JSON list of at most three nameservers. Other
// files are ignored (`federations` is obsolete and said so), as are hidden
// ones (the `..data` links kubelet maintains).
//
// A bad directory is refused whole, as kube-dns refuses a bad ConfigMap
// update: the caller keeps what it had, and the error names the file.
// Source remembers the last good content, so a live re-read only reports
// a change when the content changed.
//
// Accepted forms follow kube-dns's validation: zones are domain names;
// stub nameservers are IP, IP:port or a host name (kube-dns resolves those;
// nodedns resolves names of the cluster zone from its index); upstream
// nameservers are IP or IP:port.
//
// Bounds, each refused with an error naming the file: a file holds at most
// 1 MiB (a ConfigMap's most), stubDomains at most MaxStubZones zones of at
// most MaxStubServers nameservers each, upstreamNameservers at most three.
package kubedns

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/miekg/dns"
)

// File names (the ConfigMap's keys).
const (
	StubDomainsKey         = "stubDomains"
	UpstreamNameserversKey = "upstreamNameservers"
	FederationsKey         = "federations"
)

// maxUpstreams is kube-dns's bound on upstreamNameservers.
const maxUpstreams = 3

// maxFileBytes bounds one file (a ConfigMap holds at most 1 MiB).
const maxFileBytes = 1 << 20

// MaxStubZones bounds the stub domains: each is a forwarder group, found
// by a walk of the zones on every cache miss, and some 20,000 fit in one
// file. A thousand is far more than any cluster has (kube-dns set no
// bound); pkg/config holds the agent's own stub domains and these together
// to it.
const MaxStubZones = 1000

// MaxStubServers bounds the nameservers of one stub domain: each is an
// upstream with its own health, sockets and figures, tried in turn within
// one exchange's budget. CoreDNS's forward takes at most 15.
const MaxStubServers = 15

// Config is what the ConfigMap says.
type Config struct {
	// StubDomains maps a zone (lower-case, no trailing dot) to its
	// nameservers, as written.
	StubDomains map[string][]string
	// UpstreamNameservers replace the node's resolvers when set.
	UpstreamNameservers []string
	// Federations is true when the obsolete federations key is present
	// (ignored).
	Federations bool
}

// Empty reports whether c configures nothing.
func (c Config) Empty() bool { return len(c.StubDomains) == 0 && len(c.UpstreamNameservers) == 0 }

// Zones are the stub zones, sorted.
func (c Config) Zones() []string {
	out := make([]string, 0, len(c.StubDomains))
	for z := range c.StubDomains {
		out = append(out, z)
	}
	sort.Strings(out)
	return out
}

// Equal reports whether c and o configure the same.
func (c Config) Equal(o Config) bool {
	if c.Federations != o.Federations || !slices.Equal(c.UpstreamNameservers, o.UpstreamNameservers) || len(c.StubDomains) != len(o.StubDomains) {
		return false
	}
	for z, s := range c.StubDomains {
		if t, ok := o.StubDomains[z]; !ok || !slices.Equal(s, t) {
			return false
		}
	}
	return true
}

// FileError is a problem with one file of the directory.
type FileError struct {
	File string // path
	Err  error
}

func (e *FileError) Error() string { return fmt.Sprintf("kube-dns config %s: %v", e.File, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// Read reads the directory. A directory that does not exist, and keys that
// are absent, configure nothing (the ConfigMap may not exist).
func Read(dir string) (Config, error) {
	c, _, err := read(dir)
	return c, err
}

// read also returns a digest of the files it used.
func read(dir string) (Config, [32]byte, error) {
	var c Config
	h := sha256.New()
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c, [32]byte(h.Sum(nil)), nil
	case err != nil:
		return c, [32]byte{}, fmt.Errorf("kube-dns config directory: %w", err)
	case !st.IsDir():
		return c, [32]byte{}, fmt.Errorf("kube-dns config %s: not a directory", dir)
	}
	for _, key := range []string{FederationsKey, StubDomainsKey, UpstreamNameserversKey} {
		path := filepath.Join(dir, key)
		b, ok, err := readFile(path)
		if err != nil {
			return Config{}, [32]byte{}, &FileError{File: path, Err: err}
		}
		if !ok {
			continue
		}
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
		switch key {
		case FederationsKey:
			c.Federations = true
		case StubDomainsKey:
			if c.StubDomains, err = parseStubDomains(b); err != nil {
				return Config{}, [32]byte{}, &FileError{File: path, Err: err}
			}
		case UpstreamNameserversKey:
			if c.UpstreamNameservers, err = parseUpstreams(b); err != nil {
				return Config{}, [32]byte{}, &FileError{File: path, Err: err}
			}
		}
	}
	return c, [32]byte(h.Sum(nil)), nil
}

// readFile reads one key; ok is false when it is absent.
func readFile(path string) ([]byte, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxFileBytes+1)); err != nil {
		return nil, false, err
	}
	if buf.Len() > maxFileBytes {
		return nil, false, fmt.Errorf("larger than 1 MiB (%d bytes), the most a ConfigMap holds", maxFileBytes)
	}
	if !utf8.Valid(buf.Bytes()) {
		return nil, false, errors.New("not UTF-8")
	}
	return buf.Bytes(), true, nil
}

func parseStubDomains(b []byte) (map[string][]string, error) {
	var raw map[string][]string
	if err := strictJSON(b, &raw); err != nil {
		return nil, fmt.Errorf("want a JSON object of domain to a list of nameservers: %w", err)
	}
	if len(raw) > MaxStubZones {
		return nil, fmt.Errorf("%d stub domains: want at most %d", len(raw), MaxStubZones)
	}
	out := make(map[string][]string, len(raw))
	for zone, servers := range raw {
		z := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(zone), "."))
		if !isDomain(z) {
			return nil, fmt.Errorf("stub domain %q: not a domain name", zone)
		}
		if _, dup := out[z]; dup {
			return nil, fmt.Errorf("stub domain %q: given twice", zone)
		}
		if len(servers) == 0 {
			return nil, fmt.Errorf("stub domain %q: no nameservers", zone)
		}
		if len(servers) > MaxStubServers {
			return nil, fmt.Errorf("stub domain %q: %d nameservers: want at most %d", zone, len(servers), MaxStubServers)
		}
		for _, s := range servers {
			if err := checkStubServer(s); err != nil {
				return nil, fmt.Errorf("stub domain %q: %w", zone, err)
			}
		}
		out[z] = slices.Clone(servers)
	}
	return out, nil
}

func parseUpstreams(b []byte) ([]string, error) {
	var l []string
	if err := strictJSON(b, &l); err != nil {
		return nil, fmt.Errorf("want a JSON list of nameservers: %w", err)
	}
	if len(l) > maxUpstreams {
		return nil, fmt.Errorf("%d nameservers: at most %d", len(l), maxUpstreams)
	}
	for _, s := range l {
		if _, err := ipPort(s); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// strictJSON decodes exactly one JSON value.
func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}

// ipPort checks IP or IP:port (kube-dns's ValidateNameserverIpAndPort).
func ipPort(s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil && a.Zone() == "" {
		return netip.AddrPortFrom(a, 53), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err == nil {
		a, aerr := netip.ParseAddr(host)
		p, perr := strconv.ParseUint(port, 10, 16)
		if aerr == nil && perr == nil && p > 0 && a.Zone() == "" {
			return netip.AddrPortFrom(a, uint16(p)), nil
		}
	}
	return netip.AddrPort{}, fmt.Errorf("nameserver %q: want an IP address with an optional :port", s)
}

// checkStubServer accepts IP, IP:port, name or name:port.
func checkStubServer(s string) error {
	if _, err := ipPort(s); err == nil {
		return nil
	}
	host, port := s, ""
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i+1:]
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return fmt.Errorf("nameserver %q: bad port", s)
		}
	}
	if !isDomain(strings.ToLower(strings.TrimSuffix(host, "."))) {
		return fmt.Errorf("nameserver %q: want an IP address or a host name, with an optional :port", s)
	}
	return nil
}

// isDomain: a DNS-1123 subdomain (what kube-dns accepts for zones), no
// trailing dot.
func isDomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	if _, ok := dns.IsDomainName(s); !ok {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, ch := range l {
			if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-') {
				return false
			}
		}
	}
	return true
}

// Source reads one directory again and again, reporting changes.
type Source struct {
	Dir string

	sum  [32]byte
	read bool
	good Config
}

// Load reads the directory. changed is true the first time and whenever
// the content differs from the last good read. On error the last good
// configuration is returned (empty before the first) with the error; the
// same bad content is reported again on the next Load (the caller decides
// whether to repeat its warning).
func (s *Source) Load() (c Config, changed bool, err error) {
	c, sum, err := read(s.Dir)
	if err != nil {
		return s.good, false, err
	}
	if s.read && sum == s.sum {
		return s.good, false, nil
	}
	s.read, s.sum, s.good = true, sum, c
	return c, true, nil
}

// Current is the last good configuration.
func (s *Source) Current() Config { return s.good }
