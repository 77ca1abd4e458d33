package server

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// UDP readers are kept reading by keepReading (the readers' restart loop,
// not the process supervisor of pkg/supervisor). A reader that panics (the
// handler's panic on the reader, or ours) is counted, logged and started
// again at once on the same socket. A reader whose socket fails does not
// just return: with SO_REUSEPORT its socket would stay in the group and
// the kernel would keep handing it a share of the queries that nobody reads
// (or, with one socket per address, UDP would stop being served while the
// agent looks healthy). keepReading logs the failure, backs off, and
// starts the reader again: on the same socket after an error the socket
// reports once (an ICMP error, memory pressure), else on a new socket
// bound to the same address, closing the old one so it leaves the group.
// Live readers and restarts are counted in Stats; a reader whose socket
// cannot be replaced readerDeadAfter times in a row makes ReadersHealthy
// fail (/health), while keepReading keeps trying at the longest backoff.
const (
	readerBackoffMin = 20 * time.Millisecond
	readerBackoffMax = 5 * time.Second
	// readerStable: a reader that ran this long before failing starts
	// again at the shortest backoff.
	readerStable = time.Minute
	// readerDeadAfter is how many failed socket replacements in a row
	// make a reader dead for ReadersHealthy.
	readerDeadAfter = 5
)

// readerError is how a reader reports a failed socket to keepReading.
type readerError struct {
	err error
	// broken: the socket must be replaced (else it is read again).
	broken bool
	// gone: the descriptor itself is invalid (EBADF); its number may
	// belong to another file by now, so it is not closed.
	gone bool
	// panicked: the reader panicked (counted and logged already); its
	// socket is sound.
	panicked bool
}

func (e *readerError) Error() string { return e.err.Error() }
func (e *readerError) Unwrap() error { return e.err }

// pollerReadError classifies an error of a poller reader's read.
func pollerReadError(err error) *readerError {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return &readerError{err: err, broken: !transientErrno(errno), gone: errno == syscall.EBADF}
	}
	// Not a system call's error (a deadline nobody set?): read again.
	return &readerError{err: err}
}

// transientErrno: an error a socket reports once (a queued ICMP error,
// memory pressure); reading it again is the fix. Any other error means
// the socket itself is broken, and it is replaced.
func transientErrno(errno syscall.Errno) bool {
	switch errno {
	case syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENOMEM, syscall.ENOBUFS, syscall.EPERM:
		return true
	}
	return false
}

// keepReading runs read (one reader of u) until it returns nil (the
// server is shutting down), restarting it after each failure as described
// above. The caller counts the reader live before it calls keepReading,
// so Stats is right as soon as Serve returns.
func (s *Server) keepReading(u *udpSock, read func() error) {
	backoff := readerBackoffMin
	failures := 0 // failed replacements in a row
	for {
		began := time.Now()
		err := s.guardReader(u, read)
		s.readersLive.Add(-1)
		if err == nil || s.closing.Load() {
			return
		}
		if time.Since(began) >= readerStable {
			backoff = readerBackoffMin
		}
		s.readerRestarts.Add(1)
		var re *readerError
		if !errors.As(err, &re) {
			re = &readerError{err: err, broken: true}
		}
		if re.panicked {
			// Read the same socket again at once: a panic is a query's
			// (or a bug's), not the socket's, and a backoff would let a
			// client whose query panics stall the reader for everyone.
			s.readersLive.Add(1)
			continue
		}
		s.log.Warn("UDP reader failed; restarting it", "addr", u.local, "err", err, "new_socket", re.broken, "after", backoff.String())
		if re.broken {
			u.detach(!re.gone)
		}
		for {
			if !s.sleepUnlessClosing(backoff) {
				return
			}
			backoff = min(2*backoff, readerBackoffMax)
			if !re.broken {
				break
			}
			err := s.replaceSocket(u)
			if err == nil {
				break
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			failures++
			if failures == readerDeadAfter {
				s.readersDead.Add(1)
				s.log.Error("UDP reader cannot be restarted: health check failing until it is", "addr", u.local, "attempts", failures, "err", err)
			} else {
				s.log.Warn("replacing the UDP reader's socket failed; retrying", "addr", u.local, "attempt", failures, "err", err, "after", backoff.String())
			}
		}
		if failures >= readerDeadAfter {
			s.readersDead.Add(-1)
		}
		failures = 0
		s.readersLive.Add(1)
		s.log.Info("UDP reader restarted", "addr", u.local)
	}
}

// guardReader runs read, turning a panic into a readerError for
// keepReading once it is counted and logged.
func (s *Server) guardReader(u *udpSock, read func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &readerError{err: s.cfg.Panics.Caught(s.log, p, "reading UDP queries", "addr", u.local), panicked: true}
		}
	}()
	return read()
}

// sleepUnlessClosing sleeps for d; false if Shutdown began meanwhile.
// Shutdown waits for readers (and the keepReading loops that restart
// them) before it cancels the server's context, so the flag is what is
// watched.
func (s *Server) sleepUnlessClosing(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if s.closing.Load() {
			return false
		}
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		time.Sleep(min(left, 50*time.Millisecond))
	}
}

// replaceSocket binds a new socket of u's kind to u's address and
// attaches it to u (detached before). During a Drain the new socket is
// connected to itself too, as the others were.
func (s *Server) replaceSocket(u *udpSock) error {
	bind := s.bindUDP
	if bind == nil {
		bind = s.bindUDPLike
	}
	fresh, err := bind(u)
	if err != nil {
		return fmt.Errorf("binding a new UDP socket on %s: %w", u.local, err)
	}
	if !u.attach(fresh) {
		return net.ErrClosed
	}
	if s.draining.Load() {
		if err := u.connectSelf(); err != nil {
			s.log.Warn("drain: connecting the new socket to itself", "addr", u.local, "err", err)
		}
	}
	return nil
}

// bindUDPLike binds a socket of the same kind as u (thread or poller) to
// u's address, with the options Listen gives its sockets (from
// Config.Sockets when set: the holder replaces its copy too, so that the
// failed socket leaves the SO_REUSEPORT group).
func (s *Server) bindUDPLike(u *udpSock) (*udpSock, error) {
	uc, err := s.listenUDP(u.local, u.index, true)
	if err != nil {
		return nil, err
	}
	if !u.thread() {
		fresh := newPollerSock(uc)
		fresh.index = u.index
		return fresh, nil
	}
	fresh, err := threadSocket(uc, s.cfg.threadWake)
	if err != nil {
		_ = uc.Close()
		return nil, err
	}
	fresh.index = u.index
	return fresh, nil
}

// ReadersHealthy reports an error while a UDP reader is down and its
// socket could not be replaced readerDeadAfter times in a row: the process
// no longer serves every socket it holds (liveness).
func (s *Server) ReadersHealthy() error {
	if n := s.readersDead.Load(); n > 0 && !s.closing.Load() {
		return fmt.Errorf("%d UDP reader(s) down and not restartable (see the log)", n)
	}
	return nil
}
