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

// PreferOOMKill is the serving process's side of oomPreference: it raises
// its own oom_score_adj to oomPreference above its parent's (the
// supervisor's; its own inherited value when the parent's cannot be read)
// unless it is there already (the supervisor sets it at the start,
// preferOOMKill). Raising needs no privilege. It returns the value now.
func PreferOOMKill() (int, error) {
	base, err := readOOMScoreAdj(strconv.Itoa(os.Getppid()))
	if err != nil {
		if base, err = readOOMScoreAdj("self"); err != nil {
			return 0, err
		}
	}
	return raiseOOMScoreAdj("self", base)
}

// preferOOMKill is the supervisor's side: it raises a serving process
// just started to oomPreference above the supervisor, before that
// process's runtime has started (a process that did it only itself would
// spend its first milliseconds level with the supervisor, and a start
// right after an OOM kill, the cgroup still at its limit while the killed
// process's memory is released, then costs the supervisor: seen in the
// e2e's OOM step).
func preferOOMKill(pid int) (int, error) {
	base, err := readOOMScoreAdj("self")
	if err != nil {
		return 0, err
	}
	return raiseOOMScoreAdj(strconv.Itoa(pid), base)
}

func readOOMScoreAdj(pid string) (int, error) {
	path := "/proc/" + pid + "/oom_score_adj"
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %q: %w", path, b, err)
	}
	return v, nil
}

// raiseOOMScoreAdj sets pid's oom_score_adj to oomPreference above base
// (at most 1000) unless it is that high already.
func raiseOOMScoreAdj(pid string, base int) (int, error) {
	cur, err := readOOMScoreAdj(pid)
	if err != nil {
		return 0, err
	}
	v := min(base+oomPreference, 1000)
	if cur >= v {
		return cur, nil
	}
	path := "/proc/" + pid + "/oom_score_adj"
	if err := os.WriteFile(path, []byte(strconv.Itoa(v)), 0); err != nil {
		return cur, fmt.Errorf("raising %s to %d: %w", path, v, err)
	}
	return v, nil
}
