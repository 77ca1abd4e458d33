package config

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/nodedns/nodedns/pkg/observe/dnstap"
)

// maxDnstap bounds the dnstap collectors: each is told every query and
// reply (a copy of each per collector).
const maxDnstap = 4

// maxDnstapField bounds identity, version and extra, sent in every
// message.
const maxDnstapField = 1024

// DnstapConfig is one entry of the `dnstap:` key: CoreDNS's `dnstap
// SOCKET [full] { identity; version; extra; skipverify }`
// (pkg/observe/dnstap).
type DnstapConfig struct {
	// Socket is unix:///path (or a path), tcp://host:port or
	// tls://host:port.
	Socket string `json:"socket"`
	// Full sends the DNS messages in wire form too.
	Full bool `json:"full,omitempty"`
	// Identity (default: the host's name), Version (default
	// nodedns-VERSION) and Extra (default none) are sent in every
	// message.
	Identity string `json:"identity,omitempty"`
	Version  string `json:"version,omitempty"`
	Extra    string `json:"extra,omitempty"`
	// SkipVerify accepts any certificate of a tls:// collector.
	SkipVerify bool `json:"skip-verify,omitempty"`
	// QueueMessages and QueueBytes bound what waits for a slow or absent
	// collector (default 10000 messages, 8Mi); past them messages are
	// dropped and counted.
	QueueMessages int   `json:"queue-messages,omitempty"`
	QueueBytes    Bytes `json:"queue-bytes,omitempty"`
}

// DnstapTaps builds the `dnstap:` key's taps (nothing is dialled before
// they run), logging to log; version is the default version field. nil
// when there are none.
func (c *Config) DnstapTaps(version string, log *slog.Logger) (*dnstap.Set, error) {
	if len(c.Dnstap) == 0 {
		return nil, nil
	}
	host, _ := os.Hostname() // CoreDNS's default identity; none when unknown
	var taps []*dnstap.Tap
	for i, d := range c.Dnstap {
		tc := dnstap.Config{Socket: d.Socket, Full: d.Full, Identity: d.Identity, Version: d.Version, Extra: d.Extra,
			SkipVerify: d.SkipVerify, QueueMessages: d.QueueMessages, QueueBytes: int(d.QueueBytes), Logger: log}
		if tc.Identity == "" {
			tc.Identity = host
		}
		if tc.Version == "" {
			tc.Version = version
		}
		t, err := dnstap.New(tc)
		if err != nil {
			return nil, fmt.Errorf("dnstap %d: %w", i+1, err)
		}
		taps = append(taps, t)
	}
	return dnstap.NewSet(taps...), nil
}

// CheckDnstap checks the `dnstap:` key of c, as loading does.
func CheckDnstap(c *Config) error { return checkDnstap(c) }

func checkDnstap(c *Config) error {
	if len(c.Dnstap) > maxDnstap {
		return fmt.Errorf("dnstap: %d collectors: want at most %d (each gets a copy of every message)", len(c.Dnstap), maxDnstap)
	}
	seen := map[string]int{}
	for i, d := range c.Dnstap {
		if d.Socket == "" {
			return fmt.Errorf("dnstap %d: no socket", i+1)
		}
		if j, ok := seen[d.Socket]; ok {
			return fmt.Errorf("dnstap %d: socket %q already given by dnstap %d", i+1, d.Socket, j)
		}
		seen[d.Socket] = i + 1
		for _, f := range []struct{ name, v string }{{"identity", d.Identity}, {"version", d.Version}, {"extra", d.Extra}} {
			if len(f.v) > maxDnstapField {
				return fmt.Errorf("dnstap %d: %s of %d bytes: want at most %d", i+1, f.name, len(f.v), maxDnstapField)
			}
		}
		if d.QueueBytes < 0 {
			return fmt.Errorf("dnstap %d: queue-bytes %d: want a positive size", i+1, d.QueueBytes)
		}
	}
	_, err := c.DnstapTaps("", nil)
	return err
}
