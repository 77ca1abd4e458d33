package zonefile

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// FuzzZone parses arbitrary zone text and asks the zone names around it:
// no panic, and every answer is a message or a failure.
func FuzzZone(f *testing.F) {
	f.Add(testZone)
	f.Add("$ORIGIN example.org.\n@ 300 IN SOA ns hm 1 2 3 4 5\n*.a 300 IN CNAME *.a\nb 300 IN CNAME c.a\n")
	f.Add("$ORIGIN example.org.\n@ 300 IN SOA ns hm 1 2 3 4 5\nx 300 IN NS ns.x\nns.x 300 IN AAAA ::1\ny 300 IN CNAME z.x\n")
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 1<<16 || strings.Contains(text, "$INCLUDE") {
			return
		}
		z, err := parse(strings.NewReader(text), "example.org.", "fuzz", -1)
		if err != nil {
			return
		}
		s := &served{origin: "example.org."}
		s.z.Store(z)
		for _, name := range []string{"example.org.", "www.example.org.", "a.b.c.example.org.", "x.a.example.org.", "b.example.org.", "y.example.org.", "ns.x.example.org."} {
			for _, qt := range []uint16{dns.TypeA, dns.TypeNS, dns.TypeSOA, dns.TypeCNAME, dns.TypeDS, dns.TypeMX} {
				a, ok := s.lookup(name, qt)
				if !ok || (a.Msg == nil && !a.Failed && a.Target == "") {
					t.Fatalf("%s %d: %+v", name, qt, a)
				}
				if a.Target != "" {
					if m := a.Finish(nil, true); m == nil {
						t.Fatalf("%s %d: Finish gave no message", name, qt)
					}
				}
			}
		}
	})
}
