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
// forwards to all of them up to MaxNameservers, as CoreDNS's forward plugin
// does (it takes at most 15). "domain" and "search" follow glibc: the last
// of them in the file wins. Search domains that are not domain names are
// Problems; repeated ones are dropped; the list is cut to kubelet's bounds
// for a pod's (MaxSearch domains, MaxSearchChars characters), since each
// domain is a step of the search-path walk. Only the first MaxFileBytes of
// a file are read, and only the first maxProblems problems are kept (the
// rest are counted).
package resolvconf

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// DefaultPath is where the node's resolver configuration lives.
const DefaultPath = "/etc/resolv.conf"

// maxLine bounds one line; a longer one is a Problem, not a failure.
const maxLine = 64 << 10

// Bounds of what is read and kept (see the package comment).
const (
	// MaxFileBytes: a resolv.conf is a few lines; 64 KiB is generous.
	MaxFileBytes = 64 << 10
	// MaxNameservers: each nameserver becomes an upstream; CoreDNS's
	// forward takes at most 15 (as --upstream does).
	MaxNameservers = 15
	// MaxSearch and MaxSearchChars are kubelet's bounds on a pod's search
	// list (MaxDNSSearchPaths, MaxDNSSearchListChars: the domains joined
	// by spaces).
	MaxSearch      = 32
	MaxSearchChars = 2048
	// maxProblems bounds the problems kept: each is logged.
	maxProblems = 16
)

// File is what a resolv.conf says that the agent uses.
type File struct {
	// Nameservers in file order, duplicates removed. A link-local IPv6
	// address keeps its zone ("fe80::1%eth0").
	Nameservers []netip.Addr
	// Search is the search list, in order (names as written, without a
	// trailing dot).
	Search []string
	// Problems are the lines that were skipped, for the caller to log:
	// the first maxProblems of them; MoreProblems counts the rest.
	Problems     []Problem
	MoreProblems int
}

func (f *File) problem(p Problem) {
	if len(f.Problems) < maxProblems {
		f.Problems = append(f.Problems, p)
		return
	}
	f.MoreProblems++
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

// Parse reads a resolv.conf from r, at most MaxFileBytes of it. The error
// is only for a failing reader; bad lines are in File.Problems.
func Parse(r io.Reader) (File, error) {
	var out File
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return out, err
	}
	cut := len(data) > MaxFileBytes
	if cut {
		// Up to the last whole line within the bound: a line cut in two
		// could read as another nameserver.
		data = data[:bytes.LastIndexByte(data[:MaxFileBytes], '\n')+1]
	}
	seen := map[netip.Addr]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	n, dropped := 0, 0
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
			out.problem(Problem{Line: n, Text: text, Err: err})
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
			if seen[ip] {
				continue
			}
			if len(out.Nameservers) == MaxNameservers {
				dropped++
				continue
			}
			seen[ip] = true
			out.Nameservers = append(out.Nameservers, ip)
		case "domain":
			out.Search = nil
			if len(fields) > 1 {
				out.Search = searchList(fields[1:2], problem)
			}
		case "search":
			out.Search = searchList(fields[1:], problem)
		}
	}
	if dropped > 0 {
		out.problem(Problem{Line: n, Err: fmt.Errorf("%d more nameservers ignored: at most %d are used", dropped, MaxNameservers)})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			out.problem(Problem{Line: n + 1, Err: fmt.Errorf("line longer than %d bytes; the rest of the file is ignored", maxLine)})
			return out, nil
		}
		return out, err
	}
	if cut {
		out.problem(Problem{Line: n + 1, Err: fmt.Errorf("the file is larger than %d KiB; the rest is ignored", MaxFileBytes>>10)})
	}
	return out, nil
}

// searchList is the search list of a search (or domain) line: names
// without a trailing dot, in order; a name that is not a domain name is a
// problem, a repeated one is dropped, and the list is cut to MaxSearch
// domains and MaxSearchChars characters.
func searchList(names []string, problem func(error)) []string {
	out := []string{}
	chars := 0
	for _, d := range names {
		if d = strings.TrimSuffix(d, "."); d == "" {
			continue
		}
		if !validDomain(d) {
			problem(fmt.Errorf("search domain %q: not a domain name; skipped", d))
			continue
		}
		if slices.Contains(out, d) {
			continue
		}
		add := len(d)
		if len(out) > 0 {
			add++ // the separating space
		}
		if len(out) == MaxSearch || chars+add > MaxSearchChars {
			problem(fmt.Errorf("search list longer than %d domains or %d characters; %q and those after it ignored", MaxSearch, MaxSearchChars, d))
			break
		}
		chars += add
		out = append(out, d)
	}
	return out
}

// validDomain reports whether d (without a trailing dot) is a domain name:
// labels of 1 to 63 bytes, 253 in all.
func validDomain(d string) bool {
	if len(d) > 253 {
		return false
	}
	for _, l := range strings.Split(d, ".") {
		if l == "" || len(l) > 63 {
			return false
		}
	}
	return true
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
