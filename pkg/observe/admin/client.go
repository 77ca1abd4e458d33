package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nodedns/nodedns/pkg/observe/metrics"
)

// maxStatsBody bounds what Stats reads of /stats.
const maxStatsBody = 8 << 20

// Client reads an agent's admin endpoint from another process, for the
// commands `nodedns stats`, `probe` and `pprof`: through the unix socket
// when one is given (each pod has its own, so it always reaches this
// pod's agent), else the TCP address. They need nothing but the nodedns
// binary, so they work through `kubectl exec` in the agent's pod, without
// curl in the image.
type Client struct {
	hc      *http.Client
	base    string // the endpoint's URL, no trailing slash
	where   string // the socket or the address, for messages
	timeout time.Duration
}

// NewClient returns a client of the agent at socket (a unix socket path),
// else at addr (ip:port), that waits at most timeout for an answer.
func NewClient(socket, addr string, timeout time.Duration) *Client {
	if socket == "" {
		return &Client{hc: &http.Client{Timeout: timeout}, base: "http://" + addr, where: addr, timeout: timeout}
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{hc: &http.Client{Timeout: timeout, Transport: tr}, base: "http://nodedns", where: socket, timeout: timeout}
}

// Where is the socket or address the client reads.
func (c *Client) Where() string { return c.where }

// Stats returns the /stats document as the agent sent it (at most 8 MiB),
// for metrics.Document. An agent that does not answer is an *AgentError.
func (c *Client) Stats(ctx context.Context) ([]byte, error) {
	u := c.base + "/stats"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("building request for %s: %w", u, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.unreachable(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatsBody))
	if err != nil {
		return nil, fmt.Errorf("reading /stats from %s: %w", c.where, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return nil, fmt.Errorf("agent at %s answered /stats with %s: %s", c.where, resp.Status, metrics.Printable(msg))
	}
	return body, nil
}

// WatchOptions say how Watch repeats.
type WatchOptions struct {
	// Interval is the time between two reports.
	Interval time.Duration
	// Count stops the watch after this many reports; 0: until the
	// context is done.
	Count int
	// Header puts the time and the interval above each report.
	Header bool
}

// Watch writes show's report of /stats to w every o.Interval until ctx is
// done (then it returns nil) or o.Count reports are written (then the last
// one's error). An agent that stops answering (a restart during a
// rollout) is reported in the report's place and read again, not fatal. On
// a terminal each report replaces the last; elsewhere a blank line
// separates them.
func (c *Client) Watch(ctx context.Context, w io.Writer, o WatchOptions, show func(io.Writer, []byte) error) error {
	clear := isTerminal(w)
	for n := 1; ; n++ {
		var buf bytes.Buffer
		if clear {
			buf.WriteString("\x1b[H\x1b[2J")
		} else if n > 1 {
			buf.WriteString("\n")
		}
		if o.Header {
			fmt.Fprintf(&buf, "%s  every %s, Ctrl-C to stop\n\n", time.Now().Format(time.TimeOnly), o.Interval)
		}
		body, err := c.Stats(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = show(&buf, body)
		}
		if err != nil {
			fmt.Fprintf(&buf, "nodedns stats: %v\n", err)
		}
		if _, werr := w.Write(buf.Bytes()); werr != nil {
			return fmt.Errorf("writing report: %w", werr)
		}
		if o.Count > 0 && n >= o.Count {
			return err
		}
		t := time.NewTimer(o.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Probe asks /health or /ready (what) and returns the agent's answer when
// it says the agent is healthy or ready; else an error carrying it.
func (c *Client) Probe(ctx context.Context, what string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/"+what, nil)
	if err != nil {
		return "", fmt.Errorf("building request for /%s: %w", what, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("no agent answering: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", what, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

// Profile copies the Go profile what (profile?seconds=30, heap,
// goroutine?debug=2, ..., with or without /debug/pprof/ in front) to w.
// The agent serves them on its unix socket only, with --pprof. It waits
// 30 s plus the seconds the profile takes, whatever the client's timeout.
func (c *Client) Profile(ctx context.Context, what string, w io.Writer) error {
	what = strings.TrimPrefix(what, "/debug/pprof/")
	u, err := url.Parse(c.base + "/debug/pprof/" + what)
	if err != nil {
		return fmt.Errorf("profile %q: %w", what, err)
	}
	hc := *c.hc
	hc.Timeout = 30 * time.Second
	if s, err := strconv.Atoi(u.Query().Get("seconds")); err == nil && s > 0 {
		hc.Timeout += time.Duration(s) * time.Second
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("building request for %s: %w", u.Path, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("no agent answering on %s: %w", c.where, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%s: 404: is the agent running with --pprof? %s", u.Path, strings.TrimSpace(string(body)))
		}
		return fmt.Errorf("%s: %s: %s", u.Path, resp.Status, strings.TrimSpace(string(body)))
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("reading %s: %w", u.Path, err)
	}
	return nil
}

// AgentError is "no agent answering": one short line for the operator,
// the full error underneath for errors.Is.
type AgentError struct {
	Where, Reason string
	Err           error
}

func (e *AgentError) Error() string {
	return "no agent answering at " + e.Where + ": " + e.Reason
}

func (e *AgentError) Unwrap() error { return e.Err }

// unreachable names why the agent did not answer by the innermost cause
// ("connection refused", "no such file or directory"), not by the
// request's full chain of wrappers.
func (c *Client) unreachable(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &AgentError{Where: c.where, Reason: "no answer within " + c.timeout.String(), Err: err}
	}
	inner := err
	for {
		u := errors.Unwrap(inner)
		if u == nil {
			break
		}
		inner = u
	}
	return &AgentError{Where: c.where, Reason: inner.Error(), Err: err}
}

// isTerminal reports whether w is a terminal, whose screen Watch clears.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
