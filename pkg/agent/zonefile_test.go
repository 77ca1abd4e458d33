package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/internal/dnstest"
)

// TestReloadZoneFilesNSID: zone-files, nsid and nsid-data change with a
// config reload (CoreDNS reloads its Corefile's file and nsid); a zone
// file that does not parse fails the reload, which keeps the zone served
// and names the file and line; nsid-data defaults to the node's name.
func TestReloadZoneFilesNSID(t *testing.T) {
	dir := t.TempDir()
	zone := func(name, ip string) string {
		p := filepath.Join(dir, name)
		text := fmt.Sprintf("$ORIGIN example.org.\n@ 300 IN SOA ns hm 1 7200 1800 86400 60\n@ 300 IN NS ns\nns 300 IN A 192.0.2.53\nwww 300 IN A %s\n", ip)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first, second := zone("db.one", "192.0.2.1"), zone("db.two", "192.0.2.2")
	bad := filepath.Join(dir, "db.bad")
	if err := os.WriteFile(bad, []byte("$ORIGIN example.org.\n@ 300 IN SOA ns hm 1 7200 1800 86400 60\nwww 300 IN A not-an-address\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	up := dnstest.Start(t, answerWith("192.0.2.9"))
	keys := func(file, nsid string) string {
		return fmt.Sprintf("lameduck: 0s\nnode-name: node-7\nupstream: [%s]\nzone-files: [{file: %s, zones: [example.org]}]\n%s", up.Addr, file, nsid)
	}
	ta := startTestAgent(t, keys(first, ""))
	ask := func() (ip, nsid string) {
		m := new(dns.Msg)
		m.SetQuestion("www.example.org.", dns.TypeA)
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_NSID{Code: dns.EDNS0NSID})
		r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, ta.addr)
		if err != nil {
			return "error: " + err.Error(), ""
		}
		if len(r.Answer) == 1 {
			ip = r.Answer[0].(*dns.A).A.String()
		}
		if o := r.IsEdns0(); o != nil {
			for _, e := range o.Option {
				if x, ok := e.(*dns.EDNS0_NSID); ok {
					nsid = x.Nsid
				}
			}
		}
		return ip, nsid
	}
	dnstest.WaitFor(t, 10*time.Second, "the agent answering from the first zone file", func() bool {
		ip, _ := ask()
		return ip == "192.0.2.1"
	})
	if ip, nsid := ask(); ip != "192.0.2.1" || nsid != "" {
		t.Fatalf("at start: %s, NSID %q; want 192.0.2.1 and no NSID", ip, nsid)
	}
	ta.write(keys(second, "nsid: true\n"))
	dnstest.WaitFor(t, 5*time.Second, "the second zone file and the node's name as NSID", func() bool {
		ip, nsid := ask()
		return ip == "192.0.2.2" && nsid == fmt.Sprintf("%x", "node-7")
	})
	ta.write(keys(bad, "nsid: true\nnsid-data: other\n"))
	line := ta.waitLog("config reload rejected")
	if !strings.Contains(line, bad) || !strings.Contains(line, "line: 3") {
		t.Errorf("the rejection does not name the file and line: %s", line)
	}
	if ip, nsid := ask(); ip != "192.0.2.2" || nsid != fmt.Sprintf("%x", "node-7") {
		t.Errorf("after a rejected reload: %s, NSID %q; want the zone and NSID before", ip, nsid)
	}
	if v := ta.metric("nodedns_zone_file_loads_total"); v != 2 {
		t.Errorf("nodedns_zone_file_loads_total %v, want 2 (start, the reload)", v)
	}
	ta.write(keys(first, "nsid: true\nnsid-data: other\n"))
	dnstest.WaitFor(t, 5*time.Second, "the first zone file and the NSID set", func() bool {
		ip, nsid := ask()
		return ip == "192.0.2.1" && nsid == fmt.Sprintf("%x", "other")
	})
}
