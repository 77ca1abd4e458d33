package migrate

import (
	"strings"
	"testing"
)

// TestForwardChains: the forwards of a block as CoreDNS 1.15 runs them
// (in order, next to the following ones, except to the following ones,
// SERVFAIL when none is left), carried exactly: the default upstreams,
// stub zones and their next chains; a forward CoreDNS never reaches is
// named in the header, not carried; nothing is dropped.
func TestForwardChains(t *testing.T) {
	none := []any{}
	for _, tc := range []struct {
		name, src string
		want      map[string]any
		header    string
	}{
		{"next to a second forward", ".:53 {\n  forward . 10.0.0.1 {\n    next NXDOMAIN SERVFAIL\n    next_on_nodata\n  }\n  forward . 10.0.0.2\n}\n",
			map[string]any{"upstream": []any{"10.0.0.1"}, "upstream-failover": none, "stub-domains": nil,
				"upstream-next": map[string]any{"when": []any{"NXDOMAIN", "SERVFAIL", "NODATA"}, "servers": []any{"10.0.0.2"}, "failover": none}}, ""},
		{"a second forward . without next is never reached", ".:53 {\n  forward . 10.0.0.1\n  forward . 10.0.0.2\n}\n",
			map[string]any{"upstream": []any{"10.0.0.1"}, "upstream-next": nil}, "line 3: forward . 10.0.0.2 never answers a name in CoreDNS"},
		{"a subdomain after the catch-all is never reached", ".:53 {\n  forward . 10.0.0.1\n  forward corp.example 10.0.0.2\n}\n",
			map[string]any{"upstream": []any{"10.0.0.1"}, "stub-domains": nil}, "line 3: forward corp.example 10.0.0.2 never answers"},
		{"a subdomain before the catch-all", ".:53 {\n  forward corp.example 10.0.0.2\n  forward . 10.0.0.1\n}\n",
			map[string]any{"upstream": []any{"10.0.0.1"}, "stub-domains": map[string]any{"corp.example": map[string]any{"servers": []any{"10.0.0.2"}, "failover": none}}}, ""},
		{"except alone", ".:53 {\n  forward . 10.0.0.1 {\n    except corp.example Other.Example\n  }\n}\n",
			map[string]any{"upstream": []any{"10.0.0.1"}, "upstream-except": []any{"corp.example", "other.example"}, "stub-domains": nil}, ""},
		{"except then the zone's forward", ".:53 {\n  forward . 10.0.0.1 {\n    except corp.example\n  }\n  forward corp.example 10.0.0.2\n}\n",
			map[string]any{"upstream": []any{"10.0.0.1"}, "upstream-except": nil, "stub-domains": map[string]any{"corp.example": map[string]any{"servers": []any{"10.0.0.2"}, "failover": none}}}, ""},
		{"a stub's except goes to the catch-all", ".:53 {\n  forward corp.example 10.0.0.2 {\n    except x.corp.example\n  }\n  forward . 10.0.0.1\n}\n",
			map[string]any{"upstream": []any{"10.0.0.1"}, "stub-domains": map[string]any{"corp.example": map[string]any{"servers": []any{"10.0.0.2"}, "failover": none, "except": []any{"x.corp.example"}}}}, ""},
		{"next to a forward of another zone", ".:53 {\n  forward . 10.0.0.1 {\n    next NXDOMAIN\n  }\n  forward other.example 10.0.0.2\n}\n",
			map[string]any{"upstream": []any{"10.0.0.1"}, "upstream-next": map[string]any{"when": []any{"NXDOMAIN"}, "servers": none},
				"stub-domains": map[string]any{"other.example": map[string]any{"servers": []any{"10.0.0.1"}, "failover": none,
					"next": map[string]any{"when": []any{"NXDOMAIN"}, "servers": []any{"10.0.0.2"}, "failover": none}}}}, ""},
		{"three chained", ".:53 {\n  forward . 10.0.0.1 {\n    next NXDOMAIN\n  }\n  forward . 10.0.0.2 {\n    next SERVFAIL\n    failover REFUSED\n  }\n  forward . 10.0.0.3\n}\n",
			map[string]any{"upstream": []any{"10.0.0.1"}, "upstream-next": map[string]any{"when": []any{"NXDOMAIN"}, "servers": []any{"10.0.0.2"}, "failover": []any{"REFUSED"},
				"next": map[string]any{"when": []any{"SERVFAIL"}, "servers": []any{"10.0.0.3"}, "failover": none}}}, ""},
		{"a zone block's except is SERVFAIL", "corp.example {\n  forward . 10.0.0.1 {\n    except x.corp.example\n  }\n}\n.:53 {\n  forward . 10.0.0.9\n}\n",
			map[string]any{"upstream": []any{"10.0.0.9"}, "upstream-except": []any{"x.corp.example"},
				"stub-domains": map[string]any{"corp.example": map[string]any{"servers": []any{"10.0.0.1"}, "failover": none, "except": []any{"x.corp.example"}}}}, ""},
		{"a zone block without a forward for its apex", "corp.example {\n  forward sub.corp.example 10.0.0.1\n}\nexample {\n  forward . 10.0.0.2\n}\n",
			map[string]any{"upstream-except": []any{"corp.example"}, "stub-domains": map[string]any{
				"sub.corp.example": map[string]any{"servers": []any{"10.0.0.1"}, "failover": none},
				"example":          map[string]any{"servers": []any{"10.0.0.2"}, "failover": none, "except": []any{"corp.example"}}}}, ""},
		{"the root block's except with nothing after", ".:53 {\n  forward corp.example 10.0.0.2 {\n    except x.corp.example\n  }\n}\n",
			map[string]any{"upstream-except": []any{"x.corp.example"},
				"stub-domains": map[string]any{"corp.example": map[string]any{"servers": []any{"10.0.0.2"}, "failover": none, "except": []any{"x.corp.example"}}}}, ""},
		{"the root forward's policy and force_tcp stay its own", ".:53 {\n  forward . 10.0.0.1 {\n    policy sequential\n    force_tcp\n    next NXDOMAIN\n  }\n  forward . 10.0.0.2\n}\n" +
			"corp.example {\n  forward . 10.0.0.3 10.0.0.4\n}\nother.example {\n  forward . 10.0.0.5 {\n    policy round_robin\n    prefer_udp\n  }\n}\n",
			map[string]any{"policy": "sequential", "force-tcp": true,
				"upstream-next": map[string]any{"when": []any{"NXDOMAIN"}, "servers": []any{"10.0.0.2"}, "failover": none, "policy": "random", "prefer-udp": true},
				"stub-domains": map[string]any{
					"corp.example":  map[string]any{"servers": []any{"10.0.0.3", "10.0.0.4"}, "failover": none, "policy": "random", "prefer-udp": true},
					"other.example": map[string]any{"servers": []any{"10.0.0.5"}, "failover": none, "policy": "round_robin", "prefer-udp": true}}}, ""},
		{"a zone block's chain", "corp.example {\n  forward . 10.0.0.1 {\n    next NXDOMAIN\n  }\n  forward . 10.0.0.2\n}\n",
			map[string]any{"stub-domains": map[string]any{"corp.example": map[string]any{"servers": []any{"10.0.0.1"}, "failover": none,
				"next": map[string]any{"when": []any{"NXDOMAIN"}, "servers": []any{"10.0.0.2"}, "failover": none}}}}, ""},
		{"the options", ".:53 {\n  forward . tls://10.0.0.1 tls://10.0.0.2 {\n    tls_servername dns.example\n    failover SERVFAIL refused\n    failfast_all_unhealthy_upstreams\n" +
			"    read_timeout 300ms\n    max_fails 1\n    health_check 5s no_rec domain Example.COM\n    expire 90s\n  }\n}\n",
			map[string]any{"upstream": []any{"tls://10.0.0.1#dns.example", "tls://10.0.0.2#dns.example"}, "upstream-failover": []any{"SERVFAIL", "REFUSED"},
				"upstream-failfast": true, "upstream-read-timeout": "300ms", "upstream-max-fails": float64(1), "upstream-health-check": "5s",
				"upstream-health-check-domain": "example.com", "upstream-health-check-no-rec": true, "upstream-expire": "1m30s"}, ""},
		{"DNS over HTTPS", ".:53 {\n  forward . https://10.0.0.53 https://10.0.0.54:8443 {\n    tls /etc/ssl/corp-ca.pem\n    tls_servername doh.corp.example\n    doh_method GET\n  }\n}\n",
			map[string]any{"upstream": []any{"https://10.0.0.53#doh.corp.example", "https://10.0.0.54:8443#doh.corp.example"}, "upstream-ca": "/etc/ssl/corp-ca.pem",
				"upstream-doh-method": "GET"}, ""},
		{"host names", ".:53 {\n  forward . dns.quad9.net tls://dns.google {\n    resolver 10.0.0.2 10.0.0.3:5353\n  }\n}\n",
			map[string]any{"upstream": []any{"dns.quad9.net", "tls://dns.google"}, "upstream-resolver": []any{"10.0.0.2", "10.0.0.3:5353"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Migrate([]byte(tc.src), Options{Env: testEnv, ClusterDomain: "cluster.local", ClusterDomainFrom: "--cluster-domain cluster.local"})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Dropped) != 0 {
				t.Errorf("dropped %s", droppedText(res))
			}
			expect(t, keys(t, res), tc.want)
			if tc.header != "" && !strings.Contains(strings.Join(strings.Fields(strings.ReplaceAll(string(res.YAML), "#", "")), " "), tc.header) {
				t.Errorf("no %q in\n%s", tc.header, res.YAML)
			}
		})
	}
}

// TestDoTFailoverCorefile: the study's DoT Corefile with health tuning,
// failover and a second forward for NXDOMAIN: its forwards carry whole,
// the second no longer replacing the first's servers.
func TestDoTFailoverCorefile(t *testing.T) {
	src := `. {
    errors
    forward . tls://1.1.1.1 tls://1.0.0.1 {
        tls_servername cloudflare-dns.com
        health_check 5s no_rec domain example.com
        max_fails 1
        expire 90s
        read_timeout 1s
        failover SERVFAIL REFUSED
        next NXDOMAIN
        failfast_all_unhealthy_upstreams
    }
    forward . tls://9.9.9.9 {
        tls_servername dns.quad9.net
    }
    prometheus :9153
}
`
	res, err := Migrate([]byte(src), Options{Env: testEnv, ClusterDomain: "cluster.local", ClusterDomainFrom: "--cluster-domain cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range res.Dropped {
		if n.Line >= 3 && n.Line <= 14 {
			t.Errorf("forward line dropped: %d: %s", n.Line, n.Text)
		}
	}
	expect(t, keys(t, res), map[string]any{
		"upstream":          []any{"tls://1.1.1.1#cloudflare-dns.com", "tls://1.0.0.1#cloudflare-dns.com"},
		"upstream-failover": []any{"SERVFAIL", "REFUSED"}, "upstream-failfast": true, "upstream-read-timeout": "1s",
		"upstream-max-fails": float64(1), "upstream-health-check": "5s", "upstream-health-check-domain": "example.com",
		"upstream-health-check-no-rec": true, "upstream-expire": "1m30s",
		"upstream-next": map[string]any{"when": []any{"NXDOMAIN"}, "servers": []any{"tls://9.9.9.9#dns.quad9.net"}, "failover": []any{}},
	})
}
