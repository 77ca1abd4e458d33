package supervisor

import (
	"os/exec"
	"strconv"
	"testing"
)

// TestPreferOOMKill: the supervisor raises a process it started to
// oomPreference above itself, and the process's own call (with the
// supervisor as parent) then leaves it there instead of adding as much
// again.
func TestPreferOOMKill(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := strconv.Itoa(cmd.Process.Pid)
	self, err := readOOMScoreAdj("self")
	if err != nil {
		t.Fatal(err)
	}
	want := min(self+oomPreference, 1000)
	got, err := preferOOMKill(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if read, err := readOOMScoreAdj(pid); err != nil || got != want || read != want {
		t.Fatalf("child's oom_score_adj: returned %d, reads %d (%v); want %d (supervisor's %d + %d)", got, read, err, want, self, oomPreference)
	}
	// What the child's PreferOOMKill does, its parent being this process.
	if again, err := raiseOOMScoreAdj(pid, self); err != nil || again != want {
		t.Fatalf("raised again: %d, %v; want it left at %d", again, err, want)
	}
	if read, _ := readOOMScoreAdj(pid); read != want {
		t.Fatalf("child's oom_score_adj %d after the second raise; want %d", read, want)
	}
}
