package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// EnvFD names the environment variable that tells a child the descriptor
// number of its control socket; its presence makes `nodedns serve` the
// serving process rather than a supervisor.
const EnvFD = "NODEDNS_SUPERVISOR_FD"

// maxMessage bounds one control message (JSON; a Status is the largest).
const maxMessage = 64 << 10

// The control socket carries one JSON request per SOCK_SEQPACKET message
// from the child; only the ops named "needs a reply" get one, in order.
const (
	opUDP      = "udp"      // a UDP socket (needs a reply, with the descriptor)
	opTCP      = "tcp"      // a TCP listener (needs a reply, with the descriptor)
	opStatus   = "status"   // the supervisor's Status (needs a reply)
	opServing  = "serving"  // the child serves from now on
	opDraining = "draining" // the child is draining: its sockets will be connected to themselves
)

type request struct {
	Op      string         `json:"op"`
	Addr    netip.AddrPort `json:"addr,omitzero"`
	Index   int            `json:"index,omitempty"`
	Replace bool           `json:"replace,omitempty"`
}

type reply struct {
	Err    string  `json:"err,omitempty"`
	Status *Status `json:"status,omitempty"`
}

func needsReply(op string) bool { return op == opUDP || op == opTCP || op == opStatus }

// Status is what the supervisor reports about itself and the serving
// processes it started.
type Status struct {
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// ChildPID is the serving process now (0 between two).
	ChildPID     int       `json:"child_pid"`
	ChildStarted time.Time `json:"child_started,omitzero"`
	// Children counts the serving processes started, the first included.
	Children uint64 `json:"children"`
	// Replaced counts the serving processes that ended without being
	// asked to, by reason: exit (an exit code), signal, oom (killed by
	// the kernel's OOM killer), hung (killed by the supervisor).
	Replaced map[string]uint64 `json:"replaced"`
	// SocketsHeld is how many listening sockets the supervisor holds;
	// Releases how often it closed them so that the fallback answers
	// (no serving process for HangTimeout).
	SocketsHeld int    `json:"sockets_held"`
	Releases    uint64 `json:"releases"`
	// Stopping: the supervisor was told to stop (SIGTERM, SIGINT) and
	// passed it on; no serving process follows the one ending.
	Stopping bool `json:"stopping,omitempty"`
	// HangTimeout is how long a serving process may stay stopped, or
	// leave a query unread, before it is replaced.
	HangTimeout Duration `json:"hang_timeout"`
	// Exits are the last serving processes' ends, newest last.
	Exits []Exit `json:"exits,omitempty"`
}

// Exit is how one serving process ended.
type Exit struct {
	PID    int       `json:"pid"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"` // exit, signal, oom, hung, stopped
	Code   int       `json:"code,omitempty"`
	Signal string    `json:"signal,omitempty"`
	RanFor Duration  `json:"ran_for"`
	// MaxRSSKiB is the process's peak resident memory.
	MaxRSSKiB int64 `json:"max_rss_kib,omitempty"`
	// Why says more (the hang that was seen).
	Why string `json:"why,omitempty"`
}

// Duration is a time.Duration that reads as "1.5s" in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// send writes one message, with the descriptor fd when fd >= 0 (the
// kernel copies it into the receiver: the sender keeps its own).
func send(c *net.UnixConn, v any, fd int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var oob []byte
	if fd >= 0 {
		oob = syscall.UnixRights(fd)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	return nil
}

// recv reads one message into v, and the descriptor it carries (nil when
// none).
func recv(c *net.UnixConn, v any) (*os.File, error) {
	b := make([]byte, maxMessage)
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, flags, _, err := c.ReadMsgUnix(b, oob)
	if err != nil {
		return nil, err
	}
	var f *os.File
	if oobn > 0 {
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, fmt.Errorf("control message: %w", err)
		}
		for _, m := range msgs {
			fds, err := syscall.ParseUnixRights(&m)
			if err != nil {
				return nil, fmt.Errorf("control message: %w", err)
			}
			for _, fd := range fds {
				if f == nil {
					f = os.NewFile(uintptr(fd), "socket")
					continue
				}
				_ = syscall.Close(fd) // one descriptor a message
			}
		}
	}
	if flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 {
		if f != nil {
			_ = f.Close()
		}
		return nil, errors.New("control message truncated")
	}
	if n == 0 {
		if f != nil {
			_ = f.Close()
		}
		return nil, errClosed
	}
	if err := json.Unmarshal(b[:n], v); err != nil {
		if f != nil {
			_ = f.Close()
		}
		return nil, fmt.Errorf("control message: %w", err)
	}
	return f, nil
}

// errClosed: the other end closed the control socket.
var errClosed = errors.New("control socket closed")
