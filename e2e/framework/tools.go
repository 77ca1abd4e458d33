package framework

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	toolsMu  sync.Mutex
	toolsDir string
	tools    = map[string]string{}
)

// Tool builds the program name of internal/tools (dnsload, resolvstub, ...) for
// the node, once per test binary, and returns the binary's path (in a
// temporary directory removed when the binary's TestMain calls
// RemoveTools). In pods, the client image already holds dnsload and
// glibc-loop (StartDNSLoad, StartGlibcLoop).
func (c *Cluster) Tool(t testing.TB, name string) string {
	t.Helper()
	toolsMu.Lock()
	defer toolsMu.Unlock()
	if p, ok := tools[name]; ok {
		return p
	}
	if toolsDir == "" {
		d, err := os.MkdirTemp("", "nodedns-e2e-tools")
		if err != nil {
			t.Fatalf("tools directory: %v", err)
		}
		toolsDir = d
	}
	bin := filepath.Join(toolsDir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./internal/tools/"+name)
	cmd.Dir = c.Root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./internal/tools/%s: %v\n%s", name, err, tail(string(out), 20))
	}
	tools[name] = bin
	return bin
}

// RemoveTools removes the binaries Tool built.
func RemoveTools() error {
	toolsMu.Lock()
	defer toolsMu.Unlock()
	if toolsDir == "" {
		return nil
	}
	err := os.RemoveAll(toolsDir)
	toolsDir, tools = "", map[string]string{}
	return err
}

// Process is a program started on the node by Start.
type Process struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// Start starts a program on the node in the background; when ready is not
// empty it waits (at most 30 s) until the program prints a line holding
// it (resolvstub prints "ready"). The process is stopped (SIGTERM, then
// SIGKILL after 5 s) when the test ends.
func Start(t testing.TB, ready string, name string, args ...string) *Process {
	t.Helper()
	p := &Process{cmd: exec.Command(name, args...), out: &syncBuffer{}, done: make(chan struct{})}
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			p.out.add(sc.Text())
			if ready != "" && strings.Contains(sc.Text(), ready) {
				once.Do(func() { close(seen) })
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.Stop() })
	if ready != "" {
		select {
		case <-seen:
		case <-p.done:
			t.Fatalf("%s %s exited before printing %q: %v\n%s", name, strings.Join(args, " "), ready, p.err, p.Output())
		case <-time.After(30 * time.Second):
			t.Fatalf("%s %s did not print %q within 30s:\n%s", name, strings.Join(args, " "), ready, p.Output())
		}
	}
	return p
}

// Output is what the process printed so far (its last 200 lines).
func (p *Process) Output() string { return p.out.String() }

// Stop ends the process (SIGTERM, SIGKILL after 5 s) and returns how it
// ended (idempotent).
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// syncBuffer keeps the last 200 lines a process printed.
type syncBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *syncBuffer) add(l string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, l)
	if len(b.lines) > 200 {
		b.lines = b.lines[len(b.lines)-200:]
	}
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintln(strings.Join(b.lines, "\n"))
}
