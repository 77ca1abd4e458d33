package resolvconf

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	in := `# generated
; also a comment
nameserver 192.0.2.1
nameserver 192.0.2.1:5353
nameserver dns.example.com
nameserver
nameserver [2001:db8::1]
nameserver 2001:db8::53
nameserver fe80::1%eth0
nameserver 192.0.2.1
nameserver ::ffff:192.0.2.2   trailing words are ignored
search a.example b.example.
options ndots:5 rotate
sortlist 130.155.160.0/255.255.240.0
`
	f, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::53"),
		netip.MustParseAddr("fe80::1%eth0"), netip.MustParseAddr("192.0.2.2")}
	if !slices.Equal(f.Nameservers, want) {
		t.Errorf("nameservers %v, want %v", f.Nameservers, want)
	}
	if !slices.Equal(f.Search, []string{"a.example", "b.example"}) {
		t.Errorf("search %q", f.Search)
	}
	var lines []int
	for _, p := range f.Problems {
		lines = append(lines, p.Line)
	}
	if !slices.Equal(lines, []int{4, 5, 6, 7}) {
		t.Errorf("problems on lines %v, want 4-7: %v", lines, f.Problems)
	}
	if s := f.Problems[0].String(); !strings.Contains(s, "line 4") || !strings.Contains(s, "192.0.2.1:5353") || !strings.Contains(s, "port") {
		t.Errorf("problem text %q", s)
	}
}

func TestParseDomainAndSearchLastWins(t *testing.T) {
	for in, want := range map[string][]string{
		"search a b\ndomain c\n": {"c"},
		"domain c\nsearch a b\n": {"a", "b"},
		"search a\nsearch\n":     {},
		"":                       nil,
	} {
		f, err := Parse(strings.NewReader(in))
		if err != nil || !slices.Equal(f.Search, want) {
			t.Errorf("Parse(%q): search %q, %v; want %q", in, f.Search, err, want)
		}
	}
}

func TestParseLongLine(t *testing.T) {
	in := "nameserver 192.0.2.1\n" + strings.Repeat("x", maxLine+10) + "\nnameserver 192.0.2.2\n"
	f, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Nameservers) != 1 || len(f.Problems) != 1 {
		t.Errorf("got %v, problems %v", f.Nameservers, f.Problems)
	}
}

func TestReadFileMissing(t *testing.T) {
	_, err := ReadFile(filepath.Join(t.TempDir(), "nope"))
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("err = %v", err)
	}
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte("nameserver 127.0.0.53\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := ReadFile(p); err != nil || len(f.Nameservers) != 1 {
		t.Errorf("ReadFile = %v, %v", f, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("nameserver 192.0.2.1\nsearch a b\n")
	f.Add("nameserver fe80::1%eth0\ndomain x.\n")
	f.Fuzz(func(t *testing.T, in string) {
		out, err := Parse(strings.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		for _, ip := range out.Nameservers {
			if !ip.IsValid() || ip.Is4In6() {
				t.Fatalf("nameserver %v", ip)
			}
		}
	})
}
