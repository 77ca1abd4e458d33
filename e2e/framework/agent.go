package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentPods lists the agent's pods (selector: AgentSelector, or sel when
// given).
func (c *Cluster) AgentPods(t testing.TB, sel string) []corev1.Pod {
	t.Helper()
	if sel == "" {
		sel = AgentSelector
	}
	l, err := c.Client.CoreV1().Pods(AgentNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatalf("listing pods %s in %s: %v", sel, AgentNamespace, err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].CreationTimestamp.Before(&l.Items[j].CreationTimestamp) })
	return l.Items
}

// AgentPod is the Running agent pod that is not being deleted (there is
// one when no rollout is under way); none fails the test.
func (c *Cluster) AgentPod(t testing.TB) *corev1.Pod {
	t.Helper()
	return c.AgentPodOf(t, "")
}

// AgentPodOf is AgentPod for the pods of selector sel.
func (c *Cluster) AgentPodOf(t testing.TB, sel string) *corev1.Pod {
	t.Helper()
	pods := c.AgentPods(t, sel)
	var seen []string
	for i := range pods {
		p := &pods[i]
		seen = append(seen, fmt.Sprintf("%s %s deleting=%v", p.Name, p.Status.Phase, p.DeletionTimestamp != nil))
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p
		}
	}
	t.Fatalf("no Running agent pod (selector %q): %v", sel, seen)
	return nil
}

// Stats is `nodedns stats --json` of the agent.
type Stats map[string]any

// Value is the value at a dotted path ("supervisor.replaced.oom"), nil
// when absent.
func (s Stats) Value(path string) any {
	var v any = map[string]any(s)
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// Int is the number at path (0 when absent).
func (s Stats) Int(path string) int64 {
	switch v := s.Value(path).(type) {
	case float64:
		return int64(v)
	case json.Number:
		n, _ := v.Int64()
		return n
	}
	return 0
}

// String is s as JSON, for failure messages (the part at path when not
// empty).
func (s Stats) String(path string) string {
	var v any = map[string]any(s)
	if path != "" {
		v = s.Value(path)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Stats runs `nodedns stats --json` in the agent pod.
func (c *Cluster) Stats(t testing.TB, pod string) Stats {
	t.Helper()
	out := c.ExecIn(t, AgentNamespace, pod, "nodedns", "/nodedns", "stats", "--socket", AdminSocket, "--json")
	var s Stats
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("nodedns stats --json in %s: %v: %s", pod, err, tail(out, 5))
	}
	return s
}

// HTTPGet fetches url (10 s at most) and returns the body of a 200.
func HTTPGet(t testing.TB, url string) string {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		t.Fatalf("GET %s: reading: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, tail(string(body), 5))
	}
	return string(body)
}

// CountPrefix counts the lines of text that start with prefix.
func CountPrefix(text, prefix string) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// ConfigLine sets the lines "key: value" of the agent's ConfigMap
// (config.yaml; an existing line of the key is replaced, a missing one
// added at the end) and returns whether anything changed. The agent
// applies some settings live and others at a restart: the caller decides.
func (c *Cluster) ConfigLine(t testing.TB, kv ...[2]string) bool {
	t.Helper()
	cms := c.Client.CoreV1().ConfigMaps(AgentNamespace)
	cm, err := cms.Get(context.Background(), AgentName, getOpts)
	if err != nil {
		t.Fatalf("ConfigMap %s/%s: %v", AgentNamespace, AgentName, err)
	}
	before := cm.Data["config.yaml"]
	text := before
	for _, p := range kv {
		var keep []string
		for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
			if !strings.HasPrefix(l, p[0]+":") {
				keep = append(keep, l)
			}
		}
		text = strings.Join(keep, "\n") + "\n" + p[0] + ": " + p[1] + "\n"
	}
	if text == before {
		return false
	}
	cm.Data["config.yaml"] = text
	if _, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating ConfigMap %s/%s: %v", AgentNamespace, AgentName, err)
	}
	return true
}

// AgentConfig is the agent's ConfigMap's config.yaml.
func (c *Cluster) AgentConfig(t testing.TB) string {
	t.Helper()
	cm, err := c.Client.CoreV1().ConfigMaps(AgentNamespace).Get(context.Background(), AgentName, getOpts)
	if err != nil {
		t.Fatalf("ConfigMap %s/%s: %v", AgentNamespace, AgentName, err)
	}
	return cm.Data["config.yaml"]
}

// PodPIDs are the host PIDs of the processes of pod uid whose command line
// contains "nodedns serve" (the supervisor and its serving process, or
// the one agent), lowest first.
func PodPIDs(uid string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(cg), "pod"+uid) {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(strings.ReplaceAll(string(cmd), "\x00", " "), "nodedns serve") {
			continue
		}
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// ServingPID is the host PID of pod uid's serving process: the
// supervisor's child (its command line starts "nodedns serve"), else the
// one agent; 0 when none runs.
func ServingPID(uid string) int {
	pids := PodPIDs(uid)
	for _, p := range pids {
		cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline"))
		if strings.HasPrefix(strings.ReplaceAll(string(cmd), "\x00", " "), "nodedns serve") {
			return p
		}
	}
	if len(pids) > 0 {
		return pids[0]
	}
	return 0
}

// MemoryLimit is the memory limit of the cgroup of a process, as the
// kernel reports it (cgroup v1's memory.limit_in_bytes or v2's
// memory.max), "unknown" when unreadable (the process gone).
func MemoryLimit(pid int) string {
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(cg), "\n") {
		parts := strings.SplitN(l, ":", 3)
		var f string
		switch {
		case len(parts) != 3:
			continue
		case parts[1] == "memory":
			f = "/sys/fs/cgroup/memory" + parts[2] + "/memory.limit_in_bytes"
		case parts[0] == "0" && parts[1] == "":
			f = "/sys/fs/cgroup" + parts[2] + "/memory.max"
		default:
			continue
		}
		if b, err := os.ReadFile(f); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return "unknown"
}

// AdminSocketOnNode is the host path of pod uid's admin socket (its
// emptyDir under kubelet's state), "" when none.
func (c *Cluster) AdminSocketOnNode(uid string) string {
	var found string
	root := filepath.Join(c.Env["STATE"], "kubelet", "pods", uid, "volumes")
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "admin.sock" && found == "" {
			found = p
		}
		return nil
	})
	return found
}

// AdminPost posts to path on an admin socket of the node and returns the
// reply (an empty reply and an error when the process died answering).
// The socket's path may be longer than a unix address holds: it is reached
// through a short link to its directory.
func AdminPost(sock, path string, timeout time.Duration) (string, error) {
	dir, err := os.MkdirTemp("", "nde2e")
	if err != nil {
		return "", fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	link := filepath.Join(dir, "r")
	if err := os.Symlink(filepath.Dir(sock), link); err != nil {
		return "", fmt.Errorf("link to %s: %w", filepath.Dir(sock), err)
	}
	short := filepath.Join(link, filepath.Base(sock))
	cl := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", short)
		},
	}}
	resp, err := cl.Post("http://agent"+path, "text/plain", nil)
	if err != nil {
		return "", fmt.Errorf("POST %s on %s: %w", path, sock, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return string(b), err
}
