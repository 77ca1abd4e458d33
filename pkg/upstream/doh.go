package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/miekg/dns"
)

// DNS over HTTPS (RFC 8484), as CoreDNS's forward speaks it to an
// https:// server: the query in wire form with ID 0 (RFC 8484 4.1), POSTed
// to /dns-query as application/dns-message (or, with the GET method,
// base64url in the dns parameter), over HTTP/2 when the server offers it
// (ALPN), one connection carrying every query at once. The certificate is
// verified as a tls:// server's is (tls.go): for the server name, or the
// IP address; the CA bundle's reloads reach new connections. Idle
// connections close after the group's expire.
//
// A reply must come with status 200 and hold a message that answers the
// question (Validate, with ID 0); it gets the query's ID back. A reply
// larger than 64 KiB is refused, as no DNS message is.

const (
	dohPath     = "/dns-query"
	dohMimeType = "application/dns-message"
	dohMaxReply = 65535
)

var errDoHStatus = errors.New("DNS over HTTPS: unexpected HTTP status")

// dohClient is the HTTPS client of one https:// server.
type dohClient struct {
	url    string // https://ip:port/dns-query
	host   string // Host header: the server name ("" the URL's host)
	method string
	tr     *http.Transport
	hc     *http.Client
}

func newDoHClient(sp Spec, tlsCfg func() *tls.Config, method string, idle time.Duration) *dohClient {
	addr := sp.dialAddr()
	var d net.Dialer
	tr := &http.Transport{
		// Dial here rather than through TLSClientConfig: each connection
		// takes the roots in effect when it opens (the CA bundle may have
		// been reloaded since the client was made).
		DialTLSContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, fmt.Errorf("dialing %s: %w", addr, err)
			}
			cfg := tlsCfg()
			cfg.NextProtos = []string{"h2", "http/1.1"}
			tc := tls.Client(nc, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				nc.Close()
				return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
			}
			return tc, nil
		},
		ForceAttemptHTTP2:   true,
		MaxConnsPerHost:     maxStreamConns,
		MaxIdleConnsPerHost: maxStreamConns,
		IdleConnTimeout:     idle,
		DisableCompression:  true,
		Proxy:               nil, // never through an HTTP proxy of the environment
	}
	return &dohClient{url: "https://" + addr + dohPath, host: sp.ServerName, method: method, tr: tr,
		hc: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// exchange sends q with ID 0 and returns the reply with q's ID.
func (c *dohClient) exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	out := q.Copy()
	out.Id = 0
	buf, err := out.Pack()
	if err != nil {
		return nil, fmt.Errorf("packing a query for %s: %w", c.url, err)
	}
	var req *http.Request
	if c.method == http.MethodGet {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, c.url+"?dns="+base64.RawURLEncoding.EncodeToString(buf), nil)
	} else {
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(buf))
		if err == nil {
			req.Header.Set("Content-Type", dohMimeType)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("DNS over HTTPS request to %s: %w", c.url, err)
	}
	req.Header.Set("Accept", dohMimeType)
	if c.host != "" {
		req.Host = c.host
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("DNS over HTTPS to %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, dohMaxReply))
		return nil, fmt.Errorf("%w %d from %s", errDoHStatus, resp.StatusCode, c.url)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, dohMaxReply+1))
	if err != nil {
		return nil, fmt.Errorf("reading the reply of %s: %w", c.url, err)
	}
	if len(body) > dohMaxReply {
		return nil, fmt.Errorf("reply of %s: larger than %d bytes", c.url, dohMaxReply)
	}
	r := new(dns.Msg)
	if err := r.Unpack(body); err != nil {
		return nil, fmt.Errorf("reply of %s: %w: %w", c.url, errMismatch, err)
	}
	if err := Validate(out, r); err != nil {
		return nil, fmt.Errorf("reply of %s: %w: %w", c.url, errMismatch, err)
	}
	r.Id = q.Id
	return r, nil
}

func (c *dohClient) close() { c.tr.CloseIdleConnections() }
