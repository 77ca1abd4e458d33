package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/pkg/query/server"
)

// Config configures Run. Zero values take the defaults named.
type Config struct {
	// Path is the serving process's executable (default this one's)
	// and Args its arguments after argv[0]; Env its environment (default
	// this process's), to which EnvFD is added.
	Path string
	Args []string
	Env  []string
	// HangTimeout is how long a serving process may stay stopped, or
	// leave a query unread at the head of a socket's queue, before it is
	// killed and replaced; and how long the sockets are held
	// for a serving process to come back before they are released.
	// Default 2s.
	HangTimeout time.Duration
	// Teardown runs once on a stop, after the last serving process ended
	// and the sockets closed (nil: nothing).
	Teardown func()
	Log      *slog.Logger

	// For tests: how sockets are bound (default server.BindUDP and
	// BindTCP), how many OOM kills the kernel counted in this cgroup
	// (default oomKills), the signals that stop the supervisor and the
	// ones passed on (default SIGTERM and SIGINT; SIGHUP).
	bindUDP, bindTCP func(netip.AddrPort) (*os.File, error)
	oomKills         func() (uint64, bool)
	now              func() time.Time
	// received, when set, is called with each control message as it is
	// read, before the loop sees it (a test slows the reader with it).
	received func(request)
}

const (
	// maxSockets bounds the sockets one serving process may ask for (the
	// configuration allows 256 UDP readers, and a listener per address).
	maxSockets = 1024
	// maxExits is how many exits Status keeps.
	maxExits = 16
	// stableAfter: a serving process that ran this long before ending is
	// replaced at once; one that ended sooner after a delay doubling from
	// restartMin to restartMax, so that a crash loop does not spin.
	stableAfter = 10 * time.Second
	restartMin  = 100 * time.Millisecond
	restartMax  = 5 * time.Second
	// readDrainMax bounds how long the waiter of a process that ended
	// waits for the reader to pass on what the process sent before it
	// ended (its end of the control socket closed with it, so the reader
	// ends at once, unless a process it started kept a copy).
	readDrainMax = time.Second
	// startGrace is how many hang timeouts a starting serving process
	// may take before it asks for the sockets (checkRelease).
	startGrace = 5
	// maxFailedStarts: after this many serving processes in a row ended
	// before they served, the supervisor gives up (giveUp).
	maxFailedStarts = 5
)

// child is one serving process.
type child struct {
	pid      int
	started  time.Time
	ctl      *net.UnixConn
	serving  bool
	draining bool
	asked    bool // it asked for a socket
	// stoppedSince: since when it has been seen stopped (checkHang).
	stoppedSince time.Time
	oomAt        uint64 // OOM kills counted when it started
	oomOK        bool
	hung         string // why the supervisor killed it
	// readDone is closed when the reader of its control socket ends.
	readDone chan struct{}
}

// event is what the goroutines around the loop report to it.
type event struct {
	// from a child's control socket: a request, with where its reply goes
	// (nil when it needs none); gone when the socket closed.
	c     *child
	req   request
	reply chan<- answer
	gone  bool
	// from a child's waiter: it ended.
	exited *exitInfo
}

// answer is the loop's reply to a request; with withFD, fd is a duplicate
// of a held socket for the requester to send and close.
type answer struct {
	rep    reply
	fd     int
	withFD bool
}

type exitInfo struct {
	c  *child
	ws unix.WaitStatus
	ru unix.Rusage
}

// heads remembers, per UDP socket, the datagram at the head of its queue
// when last looked at, and since when (hang.go).
type head struct {
	key   string
	since time.Time
}

type supervisor struct {
	cfg    Config
	log    *slog.Logger
	events chan event
	// socks are the held sockets as bare descriptors, never *os.File:
	// os.NewFile registers a non-blocking descriptor (the serving process
	// makes the shared open file non-blocking) with this process's
	// netpoller, whose epoll then woke the supervisor for every datagram
	// the serving process read: measured, the CPU per cache hit went from
	// 10 µs to 27-32 µs with the supervisor's share of it.
	socks map[string]int
	heads map[string]head
	cur   *child
	st    Status
	// deadSince is when the last serving process ended with no other
	// serving since (zero while one serves): the sockets are released
	// HangTimeout after it.
	deadSince time.Time
	backoff   time.Duration
	stopping  bool
	// served: some serving process has served; failedStarts counts the
	// ones in a row that ended before they did (giveUp).
	served       bool
	failedStarts int
}

// Run supervises serving processes until ctx is done or a SIGTERM or
// SIGINT arrives and the serving process has ended; see the package
// comment.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Path == "" {
		// The executable's own path, so that the serving process is
		// called as it is (ps, pgrep); /proc/self/exe when it cannot be
		// had or the file was replaced since.
		cfg.Path = "/proc/self/exe"
		if p, err := os.Executable(); err == nil && !strings.HasSuffix(p, " (deleted)") {
			cfg.Path = p
		}
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.HangTimeout <= 0 {
		cfg.HangTimeout = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.bindUDP == nil {
		cfg.bindUDP = server.BindUDP
	}
	if cfg.bindTCP == nil {
		cfg.bindTCP = server.BindTCP
	}
	if cfg.oomKills == nil {
		cfg.oomKills = oomKills
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	s := &supervisor{cfg: cfg, log: cfg.Log.With("component", "supervisor"), events: make(chan event),
		socks: map[string]int{}, heads: map[string]head{}}
	s.st = Status{PID: os.Getpid(), Started: cfg.now(), Replaced: map[string]uint64{}, HangTimeout: Duration(cfg.HangTimeout)}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	return s.loop(ctx, sigs)
}

func (s *supervisor) loop(ctx context.Context, sigs <-chan os.Signal) error {
	done := make(chan struct{})
	defer close(done)
	tick := time.NewTicker(s.cfg.HangTimeout / 4)
	defer tick.Stop()
	restart := time.NewTimer(0) // the first serving process at once
	defer restart.Stop()
	ctxDone := ctx.Done()
	for {
		select {
		case <-ctxDone:
			ctxDone = nil
			s.stop(syscall.SIGTERM)
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				s.signalChild(syscall.SIGHUP)
				continue
			}
			s.stop(sig.(syscall.Signal))
		case <-restart.C:
			if s.stopping || s.cur != nil {
				continue
			}
			if err := s.start(done); err != nil {
				s.log.Error("starting the serving process", "err", err)
				s.backoff = min(max(2*s.backoff, restartMin), restartMax)
				restart.Reset(s.backoff)
			}
		case ev := <-s.events:
			if ev.exited != nil {
				if s.exited(ev.exited) {
					if s.stopping {
						return s.finish(ev.exited)
					}
					if err := s.giveUp(ev.exited); err != nil {
						s.closeSockets()
						return err
					}
					restart.Reset(s.backoff)
				}
				continue
			}
			s.handle(ev)
		case <-tick.C:
			s.checkHang()
			s.checkRelease()
		}
		if s.stopping && s.cur == nil {
			return s.finish(nil)
		}
	}
}

// stop begins the end: the signal goes to the serving process, which
// drains; Run returns once it has ended.
func (s *supervisor) stop(sig syscall.Signal) {
	if !s.stopping {
		s.log.Info("stopping: passing the signal on to the serving process", "signal", sig.String())
	}
	s.stopping = true
	s.signalChild(sig)
}

func (s *supervisor) signalChild(sig syscall.Signal) {
	if s.cur == nil {
		return
	}
	if err := unix.Kill(s.cur.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		s.log.Warn("signalling the serving process", "pid", s.cur.pid, "signal", sig.String(), "err", err)
	}
}

// finish closes the sockets: the end of Run. The serving process that
// ended (last) removed the interception itself when it should (it alone
// knows what it added); with none running at the stop, the teardown is
// Config.Teardown's.
func (s *supervisor) finish(last *exitInfo) error {
	s.closeSockets()
	if last == nil && s.cfg.Teardown != nil {
		s.cfg.Teardown()
	}
	s.log.Info("supervisor stopped")
	if last != nil && last.ws.Exited() && last.ws.ExitStatus() != 0 {
		return fmt.Errorf("the serving process exited with code %d", last.ws.ExitStatus())
	}
	return nil
}

// start forks a serving process with one end of a new control socket as
// descriptor 3.
func (s *supervisor) start(done <-chan struct{}) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control")
	defer theirs.Close()
	conn, err := net.FileConn(ours)
	_ = ours.Close()
	if err != nil {
		_ = theirs.Close()
		return fmt.Errorf("control socket: %w", err)
	}
	ctl := conn.(*net.UnixConn)
	oom, oomOK := s.cfg.oomKills()
	attr := &syscall.ProcAttr{
		Env: append(append([]string(nil), s.cfg.Env...), EnvFD+"=3"),
		// Descriptors 0-2 as ours; 3 the control socket.
		Files: []uintptr{0, 1, 2, uintptr(fds[1])},
		// The serving process dies with the supervisor: the sockets it
		// holds then close too, and the fallback rules answer, as when a
		// whole container ends.
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	pid, err := syscall.ForkExec(s.cfg.Path, append([]string{"nodedns"}, s.cfg.Args...), attr)
	if err != nil {
		_ = ctl.Close()
		return fmt.Errorf("starting %s: %w", s.cfg.Path, err)
	}
	if _, err := preferOOMKill(pid); err != nil {
		s.log.Warn("could not make the serving process the OOM killer's first choice; at the memory limit the kernel may pick the supervisor", "pid", pid, "err", err)
	}
	now := s.cfg.now()
	c := &child{pid: pid, started: now, ctl: ctl, oomAt: oom, oomOK: oomOK, readDone: make(chan struct{})}
	s.cur = c
	s.st.Children++
	s.st.ChildPID, s.st.ChildStarted = pid, now
	s.log.Info("serving process started", "pid", pid, "children", s.st.Children, "sockets_held", len(s.socks))
	go s.read(c, done)
	go s.wait(c, done)
	return nil
}

// read passes c's control messages to the loop (and the loop's replies
// back) until the socket closes.
func (s *supervisor) read(c *child, done <-chan struct{}) {
	defer close(c.readDone)
	for {
		var req request
		f, err := recv(c.ctl, &req)
		if f != nil {
			_ = f.Close() // a child sends no descriptors
		}
		if err == nil && s.cfg.received != nil {
			s.cfg.received(req)
		}
		if err != nil {
			select {
			case s.events <- event{c: c, gone: true}:
			case <-done:
			}
			return
		}
		var replies chan answer
		if needsReply(req.Op) {
			replies = make(chan answer, 1)
		}
		select {
		case s.events <- event{c: c, req: req, reply: replies}:
		case <-done:
			return
		}
		if replies == nil {
			continue
		}
		var a answer
		select {
		case a = <-replies:
		case <-done:
			return
		}
		fd := -1
		if a.withFD {
			fd = a.fd
		}
		err = send(c.ctl, a.rep, fd)
		if a.withFD {
			_ = unix.Close(a.fd) // the loop's duplicate; the held copy stays
		}
		if err != nil {
			s.log.Warn("answering the serving process", "pid", c.pid, "err", err)
		}
	}
}

// wait reaps c (only c: a wait for any child would take the exit status
// of the commands the teardown runs). The loop hears of the end after
// what c sent before it: a process that says it serves and crashes at
// once served (a query of death), it did not fail to start; with the two
// goroutines racing, the loop could see the exit first and give up as on
// a start that failed.
func (s *supervisor) wait(c *child, done <-chan struct{}) {
	var e exitInfo
	e.c = c
	for {
		_, err := unix.Wait4(c.pid, &e.ws, 0, &e.ru)
		if err == nil {
			break
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		s.log.Error("waiting for the serving process", "pid", c.pid, "err", err)
		e.ws = unix.WaitStatus(0xff00) // "exited 255": it is gone for us
		break
	}
	drain := time.NewTimer(readDrainMax)
	defer drain.Stop()
	select {
	case <-c.readDone:
	case <-drain.C:
		s.log.Warn("the ended serving process's control socket is still open (a process it started holds it?): its end is handled without waiting for its last messages", "pid", c.pid)
	case <-done:
		return
	}
	select {
	case s.events <- event{exited: &e}:
	case <-done:
	}
}

// handle answers one control message.
func (s *supervisor) handle(ev event) {
	c := ev.c
	if ev.gone {
		_ = c.ctl.Close()
		return
	}
	if c != s.cur { // a message of a process already reaped
		if ev.reply != nil {
			ev.reply <- answer{rep: reply{Err: "not the serving process"}}
		}
		return
	}
	switch ev.req.Op {
	case opServing:
		// The backoff stays: it comes down only once a process has
		// lived stableAfter (exited), so that a process that crashes soon
		// after it serves (a query of death) is restarted ever later, the
		// sockets released meanwhile (checkRelease).
		c.serving = true
		s.deadSince, s.served, s.failedStarts = time.Time{}, true, 0
		s.log.Info("serving process serves", "pid", c.pid, "after", s.cfg.now().Sub(c.started).Round(time.Millisecond).String())
	case opDraining:
		// Its sockets are about to be connected to themselves and closed:
		// the copies go now, so that the kernel hands new queries and
		// connections to another agent's sockets (a rolling update), not
		// to a copy nobody reads or accepts on.
		c.draining = true
		s.closeSockets()
	case opStatus:
		st := s.status()
		ev.reply <- answer{rep: reply{Status: &st}}
	case opUDP, opTCP:
		fd, err := s.socket(ev.req)
		if err != nil {
			ev.reply <- answer{rep: reply{Err: err.Error()}}
			return
		}
		c.asked = true
		ev.reply <- answer{fd: fd, withFD: true}
	default:
		if ev.reply != nil {
			ev.reply <- answer{rep: reply{Err: fmt.Sprintf("unknown op %q", ev.req.Op)}}
		}
	}
}

func (s *supervisor) status() Status {
	st := s.st
	st.SocketsHeld = len(s.socks)
	st.Stopping = s.stopping
	st.Replaced = make(map[string]uint64, len(s.st.Replaced))
	for k, v := range s.st.Replaced {
		st.Replaced[k] = v
	}
	st.Exits = append([]Exit(nil), s.st.Exits...)
	return st
}

// socket returns a duplicate of the socket asked for, binding it first
// when none is held (or a new one in place of a failed one).
func (s *supervisor) socket(req request) (int, error) {
	if !req.Addr.IsValid() || req.Index < 0 || req.Index >= maxSockets {
		return -1, fmt.Errorf("bad socket request %s %s #%d", req.Op, req.Addr, req.Index)
	}
	key := fmt.Sprintf("%s %s %d", req.Op, req.Addr, req.Index)
	fd, held := s.socks[key]
	if held && req.Replace {
		_ = unix.Close(fd)
		delete(s.socks, key)
		delete(s.heads, key)
		held = false
	}
	if !held {
		if len(s.socks) >= maxSockets {
			return -1, fmt.Errorf("holding %d sockets already (at most %d)", len(s.socks), maxSockets)
		}
		var f *os.File
		var err error
		if req.Op == opUDP {
			f, err = s.cfg.bindUDP(req.Addr)
		} else {
			f, err = s.cfg.bindTCP(req.Addr)
		}
		if err != nil {
			return -1, fmt.Errorf("binding %s %s: %w", req.Op, req.Addr, err)
		}
		if fd, err = bareFD(f); err != nil {
			return -1, fmt.Errorf("holding %s %s: %w", req.Op, req.Addr, err)
		}
		s.socks[key] = fd
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("duplicating socket %s: %w", key, err)
	}
	return nfd, nil
}

// bareFD turns f into a bare descriptor of the same open file (see
// supervisor.socks) and closes f, which takes it out of the netpoller.
// Its blocking mode is left as it is.
func bareFD(f *os.File) (int, error) {
	nfd := -1
	rc, err := f.SyscallConn()
	if err == nil {
		var derr error
		err = rc.Control(func(fd uintptr) {
			if nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); derr != nil {
				nfd = -1
			}
		})
		err = errors.Join(err, derr)
	}
	if cerr := f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing the bound socket's file: %w", cerr)
	}
	if err != nil {
		if nfd >= 0 {
			_ = unix.Close(nfd)
		}
		return -1, fmt.Errorf("duplicating a socket: %w", err)
	}
	return nfd, nil
}

// exited records how c ended. It reports whether c was the serving
// process (a message from an older one can still be under way).
func (s *supervisor) exited(e *exitInfo) bool {
	c := e.c
	_ = c.ctl.Close()
	if c != s.cur {
		return false
	}
	now := s.cfg.now()
	s.cur = nil
	s.st.ChildPID, s.st.ChildStarted = 0, time.Time{}
	ex := Exit{PID: c.pid, At: now, RanFor: Duration(now.Sub(c.started).Round(time.Millisecond)), MaxRSSKiB: e.ru.Maxrss}
	switch {
	case c.hung != "":
		ex.Reason, ex.Why, ex.Signal = "hung", c.hung, unix.SIGKILL.String()
	case e.ws.Signaled():
		ex.Reason, ex.Signal = "signal", e.ws.Signal().String()
		if e.ws.Signal() == unix.SIGKILL && c.oomOK {
			if n, ok := s.cfg.oomKills(); ok && n > c.oomAt {
				ex.Reason = "oom"
			}
		}
	default:
		ex.Reason, ex.Code = "exit", e.ws.ExitStatus()
	}
	if s.stopping {
		ex.Reason = "stopped"
	} else {
		s.st.Replaced[ex.Reason]++
	}
	s.st.Exits = append(s.st.Exits, ex)
	if len(s.st.Exits) > maxExits {
		s.st.Exits = s.st.Exits[len(s.st.Exits)-maxExits:]
	}
	attrs := []any{"pid", c.pid, "reason", ex.Reason, "ran_for", time.Duration(ex.RanFor).String(), "max_rss_kib", ex.MaxRSSKiB}
	if ex.Signal != "" {
		attrs = append(attrs, "signal", ex.Signal)
	} else {
		attrs = append(attrs, "code", ex.Code)
	}
	if ex.Why != "" {
		attrs = append(attrs, "why", ex.Why)
	}
	if s.stopping {
		s.log.Info("serving process ended", attrs...)
		return true
	}
	switch {
	case !c.serving && !s.served:
		// A failed first start: the process said why; the supervisor
		// ends as quietly as an unsupervised agent would (giveUp).
		s.log.Debug("serving process ended before it served", attrs...)
	case !c.serving:
		s.log.Error("serving process ended before it served", attrs...)
	default:
		s.log.Error("serving process ended; starting another on the same sockets", attrs...)
	}
	if s.deadSince.IsZero() {
		s.deadSince = now
	}
	if now.Sub(c.started) >= stableAfter {
		s.backoff = 0
	} else {
		s.backoff = min(max(2*s.backoff, restartMin), restartMax)
	}
	clear(s.heads)
	return true
}

// giveUp decides whether a serving process that ended is the end of the
// supervisor too: when it ended before it served and no process has
// served yet (a start that fails as the agent's always failed: a
// configuration that cannot work, an address that cannot be bound),
// or after maxFailedStarts such ends in a row. The supervisor then exits
// with an error, as an unsupervised agent would, so that kubelet shows
// the failure (and restarts the container); the fallback rules answer
// meanwhile. A process that served and crashed is always replaced.
func (s *supervisor) giveUp(e *exitInfo) error {
	if e.c.serving {
		return nil
	}
	s.failedStarts++
	if s.served && s.failedStarts < maxFailedStarts {
		return nil
	}
	how := fmt.Sprintf("exited with code %d", e.ws.ExitStatus())
	if e.ws.Signaled() {
		how = "was killed by " + e.ws.Signal().String()
	}
	return &StartError{Code: max(e.ws.ExitStatus(), 1), First: !s.served,
		msg: fmt.Sprintf("the serving process %s before it served (%d in a row); giving up", how, s.failedStarts)}
}

// StartError is Run's error when it gives up on serving processes that
// end before they serve. First: none ever served, so the serving
// process's own log already says why, and the command may end as quietly
// as an unsupervised agent whose start failed, with Code.
type StartError struct {
	Code  int
	First bool
	msg   string
}

func (e *StartError) Error() string { return e.msg }

// checkRelease closes the sockets once no serving process has served for
// HangTimeout and none is on its way: no process runs (a crash loop's
// backoff), or the one starting has not taken the sockets within
// startGrace hang timeouts (a start that waits long, e.g. for an API
// server that does not answer). The queries then go to the node's
// fallback instead of waiting in a queue nobody reads. A process that
// just started gets its time: its start (the runtime, the configuration,
// the cluster index) takes longer than a hang timeout on a busy node.
func (s *supervisor) checkRelease() {
	if s.deadSince.IsZero() || len(s.socks) == 0 || (s.cur != nil && s.cur.asked) {
		return
	}
	now := s.cfg.now()
	if now.Sub(s.deadSince) < s.cfg.HangTimeout {
		return
	}
	if s.cur != nil && now.Sub(s.cur.started) < startGrace*s.cfg.HangTimeout {
		return
	}
	s.st.Releases++
	s.log.Warn("no serving process: releasing the sockets, so that the node's fallback answers until one serves",
		"without_for", now.Sub(s.deadSince).Round(time.Millisecond).String(), "sockets", len(s.socks))
	s.closeSockets()
}

func (s *supervisor) closeSockets() {
	for k, fd := range s.socks {
		if err := unix.Close(fd); err != nil {
			s.log.Warn("closing a held socket", "socket", k, "err", err)
		}
	}
	clear(s.socks)
	clear(s.heads)
}
