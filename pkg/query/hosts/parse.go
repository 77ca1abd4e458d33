package hosts

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
)

// Bounds on what is read: a hosts file larger than maxFileSize is refused
// rather than read into memory, and so is a line longer than maxLine, and
// a file (or a list of configured entries) of more than maxNames names:
// each name of each line is an address kept under a name (and a PTR
// name), ~300 bytes once indexed (measured; the answers built on first
// use come on top), so 100,000 take some 30 MiB of the container's 256,
// where 16 MiB of short lines (1.7 million names) would take 500.
const (
	maxFileSize = 16 << 20
	maxLine     = 64 << 10
	maxNames    = 100_000
)

// entry is one parsed hosts(5) line: an address and its names (lower-case
// FQDNs; a wildcard name starts with "*.").
type entry struct {
	addr  netip.Addr
	names []string
}

// parseLine reads one hosts(5) line: an address, then one or more names,
// whitespace-separated; '#' starts a comment. A blank or comment-only line
// gives ok false and no error.
func parseLine(line string) (e entry, ok bool, err error) {
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return entry{}, false, nil
	}
	ip := f[0]
	if i := strings.IndexByte(ip, '%'); i >= 0 {
		ip = ip[:i] // an IPv6 zone means nothing in DNS
	}
	a, perr := netip.ParseAddr(ip)
	if perr != nil {
		return entry{}, false, fmt.Errorf("%q is not an IP address", f[0])
	}
	if len(f) == 1 {
		return entry{}, false, fmt.Errorf("no host name after the address %s", f[0])
	}
	e.addr = a.Unmap()
	for _, n := range f[1:] {
		name, err := checkName(n)
		if err != nil {
			return entry{}, false, err
		}
		e.names = append(e.names, name)
	}
	return e, true, nil
}

// checkName returns n as a lower-case FQDN, or an error naming it.
func checkName(n string) (string, error) {
	name := dnsname.Canonical(n)
	if name == "." {
		return "", fmt.Errorf("host name %q: the root cannot be a host", n)
	}
	// A name ending in a lone backslash escapes the dot Canonical adds: it
	// passes IsDomainName but is not fully qualified, and its answer could
	// not be packed. hosts(5) has no escapes; such a name is refused.
	if _, ok := dns.IsDomainName(name); !ok || !dns.IsFqdn(name) || strings.Contains(name, "..") {
		return "", fmt.Errorf("host name %q is not a domain name", n)
	}
	if i := strings.IndexByte(name, '*'); i >= 0 && (i != 0 || !strings.HasPrefix(name, "*.") || strings.Count(name, "*") > 1) {
		return "", fmt.Errorf("host name %q: '*' may only be the whole leftmost label", n)
	}
	return name, nil
}

// parseEntries reads the configured lines; an error names the entry by its
// position (1-based) in the list.
func parseEntries(lines []string) ([]entry, error) {
	var out []entry
	names := 0
	for i, l := range lines {
		if strings.ContainsAny(l, "\r\n") {
			return nil, fmt.Errorf("hosts entry %d (%q): one hosts line per entry", i+1, l)
		}
		e, ok, err := parseLine(l)
		if err != nil {
			return nil, fmt.Errorf("hosts entry %d (%q): %w", i+1, l, err)
		}
		if ok {
			if names += len(e.names); names > maxNames {
				return nil, fmt.Errorf("hosts entries: more than %d names (every name of every entry counts)", maxNames)
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// parseFile reads a hosts(5) file; an error names the line by number.
func parseFile(path string, r io.Reader) ([]entry, error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxFileSize+1))
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	var out []entry
	n, size, names := 0, 0, 0
	for sc.Scan() {
		n++
		size += len(sc.Bytes()) + 1
		if size > maxFileSize {
			return nil, fmt.Errorf("hosts file %s: larger than %d MiB", path, maxFileSize>>20)
		}
		e, ok, err := parseLine(string(bytes.TrimRight(sc.Bytes(), "\r")))
		if err != nil {
			return nil, fmt.Errorf("hosts file %s line %d: %w", path, n, err)
		}
		if ok {
			if names += len(e.names); names > maxNames {
				return nil, fmt.Errorf("hosts file %s line %d: more than %d names (every name of every line counts): split the file, or serve it from a zone of its own", path, n, maxNames)
			}
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("hosts file %s line %d: longer than %d KiB", path, n+1, maxLine>>10)
		}
		return nil, fmt.Errorf("reading hosts file %s: %w", path, err)
	}
	return out, nil
}
