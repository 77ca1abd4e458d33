package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// TestDNS64Except: the dns64 key's except zones are kept from
// translation; an address, an empty or malformed name and the root zone
// are errors naming the value.
func TestDNS64Except(t *testing.T) {
	c := Config{DNS64Opts: &DNS64Config{AllowIPv4: true, Except: List{"other.test", "Example.NET."}}}
	d, err := c.DNS64()
	if err != nil {
		t.Fatal(err)
	}
	v4 := netip.MustParseAddr("169.254.0.1")
	if d.Applies(v4, "host.other.test.", dns.TypeAAAA, dns.ClassINET) || d.Applies(v4, "www.example.net.", dns.TypeAAAA, dns.ClassINET) ||
		!d.Applies(v4, "www.example.org.", dns.TypeAAAA, dns.ClassINET) {
		t.Error("except zones not applied as configured")
	}
	for _, z := range []string{"192.0.2.1", "", "a..b", "."} {
		c := Config{DNS64Opts: &DNS64Config{Except: List{z}}}
		if _, err := c.DNS64(); err == nil || !strings.Contains(err.Error(), `"`+z+`"`) {
			t.Errorf("except %q: %v, want an error naming it", z, err)
		}
	}
}
