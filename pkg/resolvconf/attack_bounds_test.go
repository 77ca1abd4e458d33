package resolvconf

// resolv.conf used to be read whole (only one line was bounded), and
// Parse kept every nameserver (each one an upstream with its own health,
// figures and sockets), every search domain (each one a step of the
// search-path walk of every query a pod walks: 1,000 domains were 1,000
// upstream steps behind one query), invalid names among them, and every
// bad line as a Problem the agent logs as one warning each, at start and
// at every reload that reads the file again.
//
// Now: the first MaxFileBytes are read (the rest is one problem), at most
// MaxNameservers are used (CoreDNS's forward takes 15), the search list is
// cut to kubelet's bounds for a pod's (32 domains, 2,048 characters) with
// its names checked, and at most maxProblems problems are kept, the rest
// counted.

import (
	"fmt"
	"strings"
	"testing"
)

func TestAttackResolvConfUnbounded(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "nameserver 10.%d.%d.%d\n", i>>16&255, i>>8&255, i&255)
		fmt.Fprintf(&b, "nameserver not-an-address-%d\n", i)
	}
	b.WriteString("search")
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b, " d%d.example", i)
	}
	b.WriteString(" a..b\n")
	f, err := Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Nameservers) > 16 {
		t.Errorf("%d nameservers kept from a %d KiB file: each becomes an upstream; want a small bound (15, as CoreDNS's forward)", len(f.Nameservers), b.Len()>>10)
	}
	if len(f.Problems) > 100 {
		t.Errorf("%d problems kept (each logged as a warning by serve): want a bound, the rest counted", len(f.Problems))
	}

	// The search list alone (in the file above it is past the bound).
	b.Reset()
	b.WriteString("nameserver 192.0.2.1\nsearch")
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&b, " d%d.example", i)
	}
	b.WriteString(" a..b\n")
	if f, err = Parse(strings.NewReader(b.String())); err != nil {
		t.Fatal(err)
	}
	if len(f.Search) > 32 {
		t.Errorf("%d search domains kept: each is a walk step per query; want kubelet's bound (32 domains, 2048 characters)", len(f.Search))
	}
	f, err = Parse(strings.NewReader("search a.example a..b a.example. b.example\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.Search, " ") != "a.example b.example" || len(f.Problems) != 1 || !strings.Contains(f.Problems[0].String(), "a..b") {
		t.Errorf("search a.example a..b a.example. b.example: kept %q, problems %v; want a.example b.example and a..b reported", f.Search, f.Problems)
	}
}

// The bounds themselves: exactly at each, nothing is lost.
func TestParseAtTheBounds(t *testing.T) {
	var b strings.Builder
	for i := range MaxNameservers + 2 {
		fmt.Fprintf(&b, "nameserver 192.0.2.%d\n", i+1)
	}
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "."
	b.WriteString("search")
	chars := 0
	for i := range MaxSearch {
		d := fmt.Sprintf("%s%02d", long, i) // 130 characters
		if chars+len(d)+1 > MaxSearchChars {
			break
		}
		chars += len(d) + 1
		b.WriteString(" " + d)
	}
	b.WriteString(" " + long + "99\n") // one too many
	f, err := Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Nameservers) != MaxNameservers {
		t.Errorf("%d nameservers, want %d", len(f.Nameservers), MaxNameservers)
	}
	if n := len(strings.Join(f.Search, " ")); n > MaxSearchChars || len(f.Search) != chars/131 {
		t.Errorf("%d search domains, %d characters; want %d within %d", len(f.Search), n, chars/131, MaxSearchChars)
	}
	if len(f.Problems) != 2 {
		t.Errorf("problems %v; want the nameservers and the search list over their bounds", f.Problems)
	}

	// Over MaxFileBytes: the whole lines before the bound are read.
	big := "nameserver 192.0.2.1\n" + strings.Repeat("# comment\n", MaxFileBytes/10) + "nameserver 192.0.2.2\n"
	if f, err = Parse(strings.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	if len(f.Nameservers) != 1 || len(f.Problems) != 1 || !strings.Contains(f.Problems[0].String(), "64 KiB") {
		t.Errorf("a %d KiB file: nameservers %v, problems %v; want the first and the bound reported", len(big)>>10, f.Nameservers, f.Problems)
	}

	// Problems past maxProblems are counted.
	if f, err = Parse(strings.NewReader(strings.Repeat("nameserver x\n", 100))); err != nil {
		t.Fatal(err)
	}
	if len(f.Problems) != maxProblems || f.MoreProblems != 100-maxProblems {
		t.Errorf("%d problems kept, %d counted; want %d and %d", len(f.Problems), f.MoreProblems, maxProblems, 100-maxProblems)
	}
}
