// Package resolvconf reads resolv.conf(5) files the way the agent needs
// them: the nameservers (the default upstreams) and the search list (the
// domains pods inherit from the node). It is pure: it never resolves
// anything and never fails on a bad line.
//
// A line the C library would not use is reported as a Problem and skipped,
// so one typo in a node's resolv.conf costs one upstream, not the agent:
// a nameserver that is not an IP address (glibc's inet_pton fails and it
// skips the line too), a nameserver with a port (resolv.conf has no port
// syntax; glibc ignores such a line). Keywords the agent has no use for
// (options, sortlist, ...) are ignored silently, as are comments (# or ;
// at the start of a line).
//
// Limits: glibc uses only the first three nameservers (MAXNS); the agent
// forwards to all of them, as CoreDNS's forward plugin does. "domain" and
// "search" follow glibc: the last of them in the file wins.
package resolvconf

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
)

// DefaultPath is where the node's resolver configuration lives.
const DefaultPath = "/etc/resolv.conf"

// maxLine bounds one line; a longer one is a Problem, not a failure.
const maxLine = 64 << 10

// File is what a resolv.conf says that the agent uses.
type File struct {
	// Nameservers in file order, duplicates removed. A link-local IPv6
	// address keeps its zone ("fe80::1%eth0").
	Nameservers []netip.Addr
	// Search is the search list, in order (names as written, without a
	// trailing dot).
	Search []string
	// Problems are the lines that were skipped, for the caller to log.
	Problems []Problem
}

// Problem is one line the parser skipped.
type Problem struct {
	Line int    // 1-based
	Text string // the line, trimmed and cut to 200 bytes
	Err  error
}

func (p Problem) String() string {
	return fmt.Sprintf("line %d %q: %v", p.Line, p.Text, p.Err)
}

// ReadFile parses the file at path. The error is only for a file that
// cannot be read; bad lines are in File.Problems.
func ReadFile(path string) (File, error) {
	f, err := os.Open(path)
	if err != nil {
		return File{}, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	out, err := Parse(f)
	if err != nil {
		return out, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

// Parse reads a resolv.conf from r. The error is only for a failing
// reader; bad lines are in File.Problems.
func Parse(r io.Reader) (File, error) {
	var out File
	seen := map[netip.Addr]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		fields := strings.Fields(line)
		problem := func(err error) {
			text := line
			if len(text) > 200 {
				text = text[:200]
			}
			out.Problems = append(out.Problems, Problem{Line: n, Text: text, Err: err})
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 {
				problem(errors.New("nameserver without an address"))
				continue
			}
			ip, err := parseNameserver(fields[1])
			if err != nil {
				problem(err)
				continue
			}
			if !seen[ip] {
				seen[ip] = true
				out.Nameservers = append(out.Nameservers, ip)
			}
		case "domain":
			out.Search = nil
			if len(fields) > 1 {
				out.Search = []string{strings.TrimSuffix(fields[1], ".")}
			}
		case "search":
			out.Search = out.Search[:0:0]
			for _, d := range fields[1:] {
				if d = strings.TrimSuffix(d, "."); d != "" {
					out.Search = append(out.Search, d)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			problem := Problem{Line: n + 1, Err: fmt.Errorf("line longer than %d bytes; the rest of the file is ignored", maxLine)}
			out.Problems = append(out.Problems, problem)
			return out, nil
		}
		return out, err
	}
	return out, nil
}

// parseNameserver accepts what glibc's resolver accepts: an IPv4 or IPv6
// address, the latter optionally with a zone. Anything else (a host name,
// an address with a port, a bracketed address) is an error.
func parseNameserver(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		if _, perr := netip.ParseAddrPort(s); perr == nil {
			return netip.Addr{}, fmt.Errorf("nameserver %q: resolv.conf takes an address without a port", s)
		}
		return netip.Addr{}, fmt.Errorf("nameserver %q: not an IP address", s)
	}
	return ip.Unmap(), nil
}
