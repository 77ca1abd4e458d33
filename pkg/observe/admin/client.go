package admin

import (
	"context"
	"net"
	"net/http"
	"time"
)

// NewClient returns an HTTP client and the base URL of an agent's admin
// endpoint, for the commands that read it from another process (`nodedns
// stats`, `probe`, `pprof`): through the unix socket when one is given
// (each pod has its own, so it always reaches this pod's agent), else the
// TCP address.
func NewClient(socket, addr string, timeout time.Duration) (*http.Client, string) {
	if socket == "" {
		return &http.Client{Timeout: timeout}, "http://" + addr
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &http.Client{Timeout: timeout, Transport: tr}, "http://nodedns"
}
