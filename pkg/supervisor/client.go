package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"
)

// Client is the serving process's end of the control socket: it gets the
// listening sockets from the supervisor (it implements the query
// server's Sockets) and tells it when the process serves and drains.
type Client struct {
	conn *net.UnixConn
	log  *slog.Logger
	mu   sync.Mutex // one request and its reply at a time
}

// FromEnv returns the Client of a process started by a supervisor, or nil
// when the process was not (EnvFD unset). The variable is removed from
// the environment, so that nothing this process starts inherits it.
func FromEnv(log *slog.Logger) (*Client, error) {
	v, ok := os.LookupEnv(EnvFD)
	if !ok {
		return nil, nil
	}
	_ = os.Unsetenv(EnvFD)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: want a descriptor number of 3 or more", EnvFD, v)
	}
	f := os.NewFile(uintptr(fd), "supervisor")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("supervisor control socket (fd %d): %w", fd, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("supervisor control socket (fd %d) is a %T", fd, c)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Client{conn: uc, log: log.With("component", "supervisor-client")}, nil
}

// UDP asks for the i-th UDP socket of addr (replace: a new one in place
// of the one given before, whose reader failed).
func (c *Client) UDP(addr netip.AddrPort, i int, replace bool) (*os.File, error) {
	return c.socket(request{Op: opUDP, Addr: addr, Index: i, Replace: replace})
}

// TCP asks for addr's TCP listener.
func (c *Client) TCP(addr netip.AddrPort) (*os.File, error) {
	return c.socket(request{Op: opTCP, Addr: addr})
}

func (c *Client) socket(req request) (*os.File, error) {
	var rep reply
	f, err := c.call(req, &rep)
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, fmt.Errorf("supervisor sent no socket for %s %s", req.Op, req.Addr)
	}
	return f, nil
}

// Status asks for the supervisor's report.
func (c *Client) Status() (Status, error) {
	var rep reply
	f, err := c.call(request{Op: opStatus}, &rep)
	if f != nil {
		_ = f.Close()
	}
	if err != nil {
		return Status{}, err
	}
	if rep.Status == nil {
		return Status{}, errors.New("supervisor sent no status")
	}
	return *rep.Status, nil
}

func (c *Client) call(req request, rep *reply) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.conn.SetDeadline(time.Time{})
	if err := send(c.conn, req, -1); err != nil {
		return nil, fmt.Errorf("asking the supervisor (%s): %w", req.Op, err)
	}
	f, err := recv(c.conn, rep)
	if err != nil {
		return nil, fmt.Errorf("supervisor's answer (%s): %w", req.Op, err)
	}
	if rep.Err != "" {
		if f != nil {
			_ = f.Close()
		}
		return nil, fmt.Errorf("supervisor: %s", rep.Err)
	}
	return f, nil
}

// tell sends a message that gets no reply.
func (c *Client) tell(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return send(c.conn, request{Op: op}, -1)
}

// Serving tells the supervisor that this process serves from now on:
// from here a stop or an unread query counts as a hang.
func (c *Client) Serving() error { return c.tell(opServing) }

// Draining tells the supervisor that this process is about to connect its
// sockets to themselves (a drain): they cannot serve another process.
func (c *Client) Draining() error { return c.tell(opDraining) }

// Close closes the control socket.
func (c *Client) Close() error { return c.conn.Close() }
