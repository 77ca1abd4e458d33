//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodedns/nodedns/e2e/framework"
)

// loadQPS is LOAD_QPS (600 by default): the rollouts' load.
func loadQPS(t *testing.T) int {
	t.Helper()
	v := os.Getenv("LOAD_QPS")
	if v == "" {
		return 600
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		t.Fatalf("LOAD_QPS=%q: want a number of queries a second, at least 2", v)
	}
	return n
}

// rolloutNames is the rollouts' query file: cluster names (a dual-stack
// Service, another namespace's, a StatefulSet pod) and external names.
func rolloutNames() string {
	var b strings.Builder
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&b, "web.%s.svc.cluster.local A\nweb.%s.svc.cluster.local AAAA\napi.%s.svc.cluster.local A\ndb-0.db.%s.svc.cluster.local AAAA\nhost%d.%s A\nhost%d.%s AAAA\n",
			nsA, nsA, nsB, nsA, i, extDomain, i, extDomain)
	}
	return b.String()
}

// rollout runs action under LOAD_QPS queries/s (dnsperf from the client
// pod, 45 s from 5 s before it) and checks that the rollout surges
// (maxSurge 1: at most 2 agent pods, and 2 at some point, counted from the
// API server's watch events), loses no query and answers no SERVFAIL, at
// a rate of at least half of LOAD_QPS (a 2x margin for a busy machine:
// below that the rollout was hardly under load and "0 lost" would say
// little), and leaves the rules once each.
func rollout(t *testing.T, c *framework.Cluster, what string, action func()) {
	t.Helper()
	qps := loadQPS(t)
	if _, err := c.ExecErr(nsA, "client", "", strings.NewReader(rolloutNames()), time.Minute, "sh", "-c", "cat > /tmp/names"); err != nil {
		t.Fatal(err)
	}
	// An earlier step's restart (the kube-dns ClusterIP added to
	// local-ip) may still have its old pod in its lameduck: wait until
	// one pod is left, then count the rollout's pods from a watch of
	// their own, so that the old pod does not count as its surge.
	framework.WaitFor(t, what+": one agent pod before the rollout", 2*time.Minute, 200*time.Millisecond, func() (bool, string) {
		pods := c.AgentPods(t, "")
		names := make([]string, 0, len(pods))
		for _, p := range pods {
			names = append(names, p.Name)
		}
		return len(pods) == 1, fmt.Sprintf("%d agent pods: %v", len(pods), names)
	})
	pw := c.WatchPods(t, ns, framework.AgentSelector)
	if maxPods, now, events, err := pw.Counts(); now != 1 || err != nil {
		t.Fatalf("%s: the watch of the agent pods lists %d pods before the rollout (most %d), want 1 (%v; events %v)", what, now, maxPods, err, events)
	}
	load := c.StartDNSPerf(nsA, "client", agentIP, "/tmp/names", 45, qps)
	time.Sleep(5 * time.Second) // the load runs before the rollout starts: a time, not a wait on a condition
	t0 := time.Now()
	action()
	c.WaitDaemonSet(t, ns, framework.AgentName, 2*time.Minute)
	took := time.Since(t0)
	res := load.Wait(t)
	// The old pod may still be terminating when the rollout is complete:
	// its DELETED event ends the count.
	framework.WaitFor(t, what+": two agent pods overlapped, then one is left (watch events)", time.Minute, 200*time.Millisecond, func() (bool, string) {
		maxPods, now, events, err := pw.Counts()
		return err == nil && now == 1 && maxPods >= 2, fmt.Sprintf("at most %d at once, %d now, watch error %v; events %v", maxPods, now, err, events)
	})
	pw.Stop()
	maxPods, now, events, _ := pw.Counts()
	// The load runs 45 s from 5 s before the rollout: a rollout that took
	// longer was partly not under load.
	if took >= 40*time.Second {
		t.Fatalf("%s: the rollout took %v, want under 40s (the load ran 45 s from 5 s before it)", what, took.Round(time.Second))
	}
	if maxPods != 2 || now != 1 {
		t.Fatalf("%s: by the API server's watch events, at most %d agent pods at once and %d at the end, want 2 and 1 (maxSurge 1; events %v)", what, maxPods, now, events)
	}
	t.Logf("%s: rollout done in %v; two agent pods overlapped, never more (maxSurge 1, counted from watch events)", what, took.Round(time.Second))
	t.Logf("dnsperf: %s", res)
	if res.Lost != 0 {
		t.Fatalf("%s: %d queries lost during the rollout, want 0 (%s)", what, res.Lost, res)
	}
	if res.ServFail != 0 {
		t.Fatalf("%s: %d SERVFAIL during the rollout, want 0 (%s)", what, res.ServFail, res)
	}
	if res.QPS < float64(qps/2) {
		t.Fatalf("%s: load was %.0f queries/s, want at least %d (half of LOAD_QPS=%d)", what, res.QPS, qps/2, qps)
	}
	c.RulesOnce(t, map[string]int{agentIP: framework.RulesWithFallback, kubeDNSIP: framework.RulesPerIP})
	ok(t, "%s: 0 lost, 0 SERVFAIL, rules still once each", what)
}

// TestRollouts (step 4): `kubectl rollout restart` and an image change
// under load: the rollout surges, 0 queries lost, 0 SERVFAIL, rules still
// exactly once; the rate reached is reported.
func TestRollouts(t *testing.T) {
	c := setup(t)
	ensureAgent(t, c)
	ensureWorkloads(t, c)
	ensureKubeDNS(t, c)
	t.Run("restart", func(t *testing.T) {
		rollout(t, c, "restart", func() { c.RolloutRestart(t, ns, framework.AgentName) })
	})
	t.Run("image-change", func(t *testing.T) {
		version := strings.Fields(c.ExecIn(t, ns, c.AgentPod(t).Name, "nodedns", "/nodedns", "version"))
		if len(version) < 2 {
			t.Fatalf("nodedns version printed %v, want \"nodedns VERSION ...\"", version)
		}
		image2 := c.ImageVersion(t, "nodedns", strings.TrimSuffix(version[1], "-e2e2")+"-e2e2")
		if running := c.AgentPod(t).Spec.Containers[0].Image; running == image2 {
			// Run again on a cluster where it ran: change back to the
			// tree's image, a change all the same.
			image2 = c.Image(t, "nodedns")
		}
		rollout(t, c, "image-change", func() { c.SetImage(t, ns, framework.AgentName, "nodedns", image2) })
		if running := c.AgentPod(t).Spec.Containers[0].Image; running != image2 {
			t.Fatalf("after the image change the agent runs %s, want %s", running, image2)
		}
		ok(t, "agent now runs %s", image2)
	})
}
