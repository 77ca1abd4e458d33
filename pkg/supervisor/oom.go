package supervisor

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// oomKills reads how many processes the kernel's OOM killer has killed in
// this process's memory cgroup, so that a serving process killed by
// SIGKILL can be told an OOM kill: the count moved while it ran. The
// cgroup is the one /proc/self/cgroup names (cgroup v2's memory.events,
// v1's memory.oom_control, whose oom_kill line needs Linux 4.13); inside a
// container whose /sys/fs/cgroup shows its own cgroup as the root, the
// root's files. ok is false when none can be read.
func oomKills() (n uint64, ok bool) {
	for _, f := range oomFiles() {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, ok := fieldValue(b, "oom_kill"); ok {
			return n, true
		}
	}
	return 0, false
}

// oomFiles are where this process's memory cgroup's OOM kill count may
// be read, the most specific first.
func oomFiles() []string {
	var out []string
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			// ID:CONTROLLERS:PATH
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) != 3 || strings.Contains(parts[2], "..") {
				continue
			}
			switch {
			case parts[1] == "" && parts[0] == "0":
				out = append(out, filepath.Join("/sys/fs/cgroup", parts[2], "memory.events"))
			case slices.Contains(strings.Split(parts[1], ","), "memory"):
				out = append(out, filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.oom_control"))
			}
		}
	}
	return append(out, "/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
}

// fieldValue reads "NAME VALUE" lines.
func fieldValue(b []byte, name string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte(" "))
		if !ok || string(k) != name {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// oomPreference is how much more the serving process volunteers for the
// OOM killer than the supervisor: when their container reaches its memory
// limit the kernel should kill the serving process (the supervisor then
// starts another at once, on the same sockets), not the supervisor (which
// would end the container).
const oomPreference = 500

// PreferOOMKill raises this process's oom_score_adj above the one it
// inherited (raising needs no privilege). It returns the new value.
func PreferOOMKill() (int, error) {
	const path = "/proc/self/oom_score_adj"
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	cur, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %q: %w", path, b, err)
	}
	v := min(cur+oomPreference, 1000)
	if err := os.WriteFile(path, []byte(strconv.Itoa(v)), 0); err != nil {
		return cur, fmt.Errorf("raising %s to %d: %w", path, v, err)
	}
	return v, nil
}
