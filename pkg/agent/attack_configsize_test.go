package agent

// A --config file over the bound (config.MaxFileBytes, 1 MiB: the most a
// ConfigMap holds) used to be read whole at every reload poll and applied;
// now the reload is rejected naming the file and the bound, the running
// configuration stays, and the failure counts.

import (
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/internal/dnstest"
)

func TestAttackConfigFileSizeOnReload(t *testing.T) {
	up := dnstest.Start(t, answerWith("192.0.2.1"))
	ta := startTestAgent(t, "lameduck: 0s\nupstream: ["+up.Addr+"]\n")
	ta.waitAnswer("192.0.2.1")
	ta.write(dnstest.BigConfig("lameduck: 0s\nupstream: ["+up.Addr+"]\ncache-size: 50\n", 2<<20))
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		logs := ta.logs.String()
		if strings.Contains(logs, "config reload rejected") {
			line := ta.waitLog("config reload rejected")
			if !strings.Contains(line, "1 MiB") || !strings.Contains(line, "config.yaml") {
				t.Errorf("rejection %q: want the file and the bound (1 MiB) named", line)
			}
			if got := ta.a.running().CacheSize; got == 50 {
				t.Errorf("cache-size of the refused file applied")
			}
			if v := ta.metric(`nodedns_config_reloads_total{result="failure"}`); v < 1 {
				t.Errorf("failed reloads %v; want the rejection counted", v)
			}
			return
		}
		if strings.Contains(logs, "configuration reloaded") {
			t.Fatalf("a 2 MiB config file was read whole and applied at reload; want the reload rejected naming the 1 MiB bound")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no reload outcome logged for a 2 MiB file")
}
