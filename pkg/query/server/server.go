// Package server is the DNS transport: it binds the UDP and TCP listeners,
// reads queries (UDP through readers on their own OS threads or on the Go
// netpoller, restarted when a socket fails; TCP with bounded, pipelined
// connections), hands each to a Handler, and writes the replies. It bounds
// the queries resolved off the readers, for everyone together and for each
// client, and the TCP connections likewise; it recovers a panic on any of
// its goroutines (counted in Config.Panics) and goes on serving; and it
// drains, handing new queries and connections to another agent bound to
// its addresses, and shuts down without dropping the answers under way.
//
// What a reply says is the Handler's business (pkg/query/pipeline): this
// package knows DNS only as far as framing, the header and question it
// reads for the handler, and a probe for another server on its addresses.
// Interception (links and rules) is not its concern either: it only binds
// the addresses it is given.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodedns/nodedns/pkg/observe/recovery"
	"github.com/nodedns/nodedns/pkg/query/fairshare"
)

// maxQuerySize bounds the bytes of one query the transport keeps, on
// every transport: a query longer than this is answered from its header
// alone (the handler's FORMERR). A pod's query is its question and an OPT
// record, a few hundred bytes at most (EDNS padding brings it to 468);
// without the bound, each connection could make the server allocate the
// 65,535 bytes its length prefix announces before sending any of them,
// and each query resolved off the readers would keep a copy that long.
const maxQuerySize = 4096

// Config configures a Server. Zero values take the defaults named.
type Config struct {
	// Listen holds host:port addresses; UDP and TCP are served on each.
	Listen []string
	// Handler answers the queries. Required.
	Handler Handler
	// Panics is the agent's count of recovered panics (the handler's,
	// the cache's and the forwarder's), which Stats reports as one
	// figure; nil: a counter of the server's own.
	Panics *recovery.Counter

	// SocketsPerAddr is the number of SO_REUSEPORT UDP sockets (each with
	// its own reader) per listen address; default GOMAXPROCS.
	SocketsPerAddr int
	// UDPReaders selects how UDP sockets are read: "threads" (default on
	// Linux: a reader per socket on its own OS thread, blocking in
	// recvmmsg) or "poller" (goroutines on the Go netpoller).
	UDPReaders string
	// MaxInflight bounds queries being resolved off the readers (upstream,
	// walks); past it a query is refused (Handler.Refuse) at once.
	// Default 2000.
	MaxInflight int
	// MaxClientInflight bounds the share of MaxInflight one client address
	// may hold (see fairness.go); default MaxInflight/8, at least 16
	// (fairshare.PerClient); negative: no per-client bound.
	MaxClientInflight int
	// MaxTCPConns bounds open TCP connections; default 1000. Its last
	// eighth is kept for clients holding fewer than two (tcp.go:
	// admitTCP).
	MaxTCPConns int
	// MaxClientTCPConns bounds the open TCP connections of one client
	// address, so that one pod cannot hold the connections every other
	// pod needs after a TC reply; default MaxTCPConns/8, at least 4, at
	// most MaxTCPConns (fairshare.PerClient); negative: no per-client
	// bound.
	MaxClientTCPConns int
	// Sockets, when set, gives the listening sockets instead of binding
	// them (a supervisor that holds them across restarts of this process).
	Sockets Sockets
	// TCPIdleTimeout closes a TCP connection with no query for this long;
	// default 10s. TCPReadTimeout bounds the reading of one message from
	// its first byte, whatever the bytes trickle in (the idle timer does
	// not restart per byte); default 2s. TCPWriteTimeout bounds one write;
	// default 2s.
	TCPIdleTimeout, TCPReadTimeout, TCPWriteTimeout time.Duration
	Logger                                          *slog.Logger

	// threadWake replaces the default threadWake of thread readers (a
	// test knob: a long one tells a wait cut short by a signal from one
	// that ran to its timeout); zero: the default.
	threadWake time.Duration
	// backlogGrace replaces the default backlogGrace (negative: none).
	backlogGrace time.Duration
}

func (c *Config) defaults() error {
	if len(c.Listen) == 0 {
		return errors.New("server: no listen address")
	}
	if c.Handler == nil {
		return errors.New("server: no handler")
	}
	if c.SocketsPerAddr <= 0 {
		c.SocketsPerAddr = runtime.GOMAXPROCS(0)
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = 2000
	}
	if c.MaxClientInflight == 0 {
		c.MaxClientInflight = fairshare.PerClient(c.MaxInflight, 16)
	}
	if c.MaxTCPConns <= 0 {
		c.MaxTCPConns = 1000
	}
	if c.MaxClientTCPConns == 0 {
		c.MaxClientTCPConns = min(fairshare.PerClient(c.MaxTCPConns, 4), c.MaxTCPConns)
	}
	if c.TCPIdleTimeout <= 0 {
		c.TCPIdleTimeout = 10 * time.Second
	}
	if c.TCPReadTimeout <= 0 {
		c.TCPReadTimeout = 2 * time.Second
	}
	if c.TCPWriteTimeout <= 0 {
		c.TCPWriteTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Panics == nil {
		c.Panics = new(recovery.Counter)
	}
	if c.backlogGrace == 0 {
		c.backlogGrace = backlogGrace
	}
	if c.threadWake <= 0 {
		c.threadWake = threadWake
	}
	return nil
}

// Server serves DNS on its listen addresses.
type Server struct {
	cfg   Config
	log   *slog.Logger
	udp   []*udpSock
	tcp   []*net.TCPListener
	sem   chan struct{}  // slow-path queries in flight
	fair  *clientLimiter // per-client share of sem; nil: none
	conns chan struct{}  // open TCP connections
	h     Handler
	// epoch is when the server was made; ages are measured from it on the
	// monotonic clock (see mono).
	epoch time.Time
	// heldPs counts this server's thread readers that block holding a P
	// (udpthread_linux.go).
	heldPs atomic.Int32

	wg       sync.WaitGroup // readers, acceptors, connections, slow-path queries
	ctx      context.Context
	cancel   context.CancelFunc
	bound    atomic.Bool
	closing  atomic.Bool // Shutdown has begun: readers stop
	draining atomic.Bool // Drain has begun: not ready, still reading
	threads  sync.WaitGroup
	tcpMu    sync.Mutex
	tcpConns map[*net.TCPConn]*tcpState
	// tcpClients counts open TCP connections per client address (under
	// tcpMu); entries exist only while a client has one.
	tcpClients map[netip.Addr]*tcpClient

	overloads atomic.Uint64
	// clientLimited counts queries refused at the per-client bound.
	clientLimited atomic.Uint64
	// tcpClientLimited counts TCP connections refused at the per-client
	// bound; tcpEvicted stalled connections closed to make room for new
	// ones.
	tcpClientLimited, tcpEvicted atomic.Uint64

	// UDP readers (readers.go): running now, restarted after a failure,
	// down with a socket that could not be replaced.
	readersLive    atomic.Int32
	readerRestarts atomic.Uint64
	readersDead    atomic.Int32
	// rawSignalled and rawTimedOut count how thread readers' waits that
	// hold the P ended without a datagram: interrupted by the runtime's
	// signal, or at the socket's timeout (udpthread_linux.go).
	rawSignalled, rawTimedOut atomic.Uint64
	// Test hooks (nil in production): recvFault turns a thread reader's
	// successful receive into the error it returns; bindUDP replaces
	// bindUDPLike when a reader's socket is replaced; faultAccept runs in
	// the acceptor for each connection it accepts.
	recvFault   func() unix.Errno
	bindUDP     func(u *udpSock) (*udpSock, error)
	faultAccept func()
}

// New validates cfg. Call Listen, then Serve.
func New(cfg Config) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	for _, a := range cfg.Listen {
		if _, err := netip.ParseAddrPort(a); err != nil {
			return nil, fmt.Errorf("listen address %q: want ip:port: %w", a, err)
		}
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "server"),
		sem: make(chan struct{}, cfg.MaxInflight), fair: newClientLimiter(cfg.MaxClientInflight), conns: make(chan struct{}, cfg.MaxTCPConns),
		h: cfg.Handler, tcpConns: map[*net.TCPConn]*tcpState{}, tcpClients: map[netip.Addr]*tcpClient{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.epoch = time.Now()
	return s, nil
}

// mono returns t (a reading of time.Now) as nanoseconds since the server
// was made, on the monotonic clock: a step of the wall clock moves it not.
func (s *Server) mono(t time.Time) int64 { return int64(t.Sub(s.epoch)) }

// reusePort sets SO_REUSEPORT (old and new agents share the addresses
// during a rollout, and several readers share one address) and
// SO_REUSEADDR.
func reusePort(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
			serr = fmt.Errorf("setting SO_REUSEPORT on %s %s: %w", network, address, serr)
			return
		}
		if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
			serr = fmt.Errorf("setting SO_REUSEADDR on %s %s: %w", network, address, serr)
		}
	})
	if err != nil {
		return fmt.Errorf("controlling %s socket %s: %w", network, address, err)
	}
	return serr
}

// Listen binds every socket. On error nothing stays bound.
func (s *Server) Listen() error {
	for li, addr := range s.cfg.Listen {
		ap := netip.MustParseAddrPort(addr) // checked by New
		for i := 0; i < s.cfg.SocketsPerAddr; i++ {
			uc, err := s.listenUDP(ap, i, false)
			if err != nil {
				s.closeListeners()
				return fmt.Errorf("binding UDP %s: %w", addr, err)
			}
			u := s.udpSocket(uc)
			u.listener, u.index = li, i
			s.udp = append(s.udp, u)
		}
		l, err := s.listenTCP(ap)
		if err != nil {
			s.closeListeners()
			return fmt.Errorf("binding TCP %s: %w", addr, err)
		}
		s.tcp = append(s.tcp, l)
	}
	s.bound.Store(true)
	return nil
}

// Addrs returns the bound UDP addresses, one per listen address (useful
// when listening on port 0).
func (s *Server) Addrs() []netip.AddrPort {
	var out []netip.AddrPort
	for i := 0; i < len(s.udp); i += s.cfg.SocketsPerAddr {
		out = append(out, s.udp[i].local)
	}
	return out
}

// TCPAddrs returns the bound TCP addresses.
func (s *Server) TCPAddrs() []netip.AddrPort {
	var out []netip.AddrPort
	for _, l := range s.tcp {
		out = append(out, l.Addr().(*net.TCPAddr).AddrPort())
	}
	return out
}

// Bound reports whether the listeners are bound and serving.
func (s *Server) Bound() bool { return s.bound.Load() && !s.closing.Load() && !s.draining.Load() }

// Serve starts the readers and acceptors and returns at once.
func (s *Server) Serve() {
	if s.cfg.Sockets != nil && s.fair != nil && s.cfg.backlogGrace > 0 {
		s.fair.open.Store(true)
		time.AfterFunc(s.cfg.backlogGrace, func() { s.fair.open.Store(false) })
	}
	for _, u := range s.udp {
		if u.thread() {
			s.startThreadReader(u)
			continue
		}
		s.startPollerReader(u)
	}
	for i, l := range s.tcp {
		s.wg.Add(1)
		go s.acceptTCP(l, i)
	}
}

// Shutdown stops reading, waits for queries in flight (bounded by ctx) and
// closes every socket.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	// Thread readers block in the kernel on the raw descriptor: they must
	// be gone before it is closed (and its number reused). They notice the
	// flag within threadWake (cfg.threadWake).
	s.threads.Wait()
	// Answers still being resolved (a slow upstream) leave through the UDP
	// sockets: closing them first would drop those answers.
	s.awaitInflight(ctx)
	s.closeListeners()
	s.tcpMu.Lock()
	for _, st := range s.tcpConns {
		_ = st.c.SetReadDeadline(time.Unix(1, 0))
	}
	s.tcpMu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.cancel()
		return nil
	case <-ctx.Done():
		s.cancel()
		return fmt.Errorf("server shutdown: %w", ctx.Err())
	}
}

func (s *Server) closeListeners() {
	for _, u := range s.udp {
		if err := u.close(); err != nil {
			s.log.Debug("closing UDP socket", "addr", u.local, "err", err)
		}
	}
	for _, l := range s.tcp {
		_ = l.Close()
	}
}

// Stats are the server's own counters.
type Stats struct {
	Overloaded uint64 `json:"overloaded"`
	// ClientLimited counts queries refused because their client held its
	// whole share of the in-flight bound (MaxClientInflight).
	ClientLimited uint64 `json:"client_limited"`
	// Panics counts every panic recovered in the agent: answering queries,
	// and the cache's and forwarder's background work (Config.Panics).
	Panics   uint64 `json:"panics"`
	InFlight int    `json:"in_flight"`
	TCPConns int    `json:"tcp_conns"`
	// TCPClientLimited counts TCP connections closed at once because
	// their client held its share of them (MaxClientTCPConns) with none
	// stalled; TCPEvicted stalled connections (idle, or with a message
	// not arriving) closed to make room for a new one at a bound.
	TCPClientLimited uint64 `json:"tcp_client_limited"`
	TCPEvicted       uint64 `json:"tcp_evicted"`
	// UDPReaders counts the UDP sockets' readers; UDPReadersHoldingP those
	// that block keeping their P (udpthread_linux.go).
	UDPReaders         int `json:"udp_readers"`
	UDPReadersHoldingP int `json:"udp_readers_holding_p"`
	// UDPReadersLive counts the readers reading now (UDPReaders while
	// serving; fewer while one is being restarted after a failure);
	// UDPReaderRestarts counts those restarts, and those after a panic
	// (readers.go).
	UDPReadersLive    int    `json:"udp_readers_live"`
	UDPReaderRestarts uint64 `json:"udp_reader_restarts"`
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{Overloaded: s.overloads.Load(), ClientLimited: s.clientLimited.Load(), Panics: s.cfg.Panics.Count(), InFlight: len(s.sem), TCPConns: len(s.conns),
		TCPClientLimited: s.tcpClientLimited.Load(), TCPEvicted: s.tcpEvicted.Load(),
		UDPReaders: len(s.udp), UDPReadersHoldingP: int(s.heldPs.Load()),
		UDPReadersLive: int(s.readersLive.Load()), UDPReaderRestarts: s.readerRestarts.Load()}
}

// Drain stops new UDP traffic from reaching this server's sockets while
// keeping them open for wait, so that queries already queued on them are
// still read and answered; call Shutdown afterwards.
//
// Closing a socket drops whatever sits in its receive queue. During a
// rolling update the new agent already shares the addresses through
// SO_REUSEPORT, so the old one first connect()s each UDP socket to its own
// address: a connected socket only matches datagrams from that peer, which
// never sends, so the kernel steers every new query to the other sockets of
// the group (the new agent's). Without another agent, queries get an ICMP
// port unreachable, and clients fail over at once instead of timing out.
//
// TCP is handed over the same way: a classic BPF program on each
// listener's group (handOver) sends new connections to the other agent's
// listener, while this one goes on accepting, for wait, those the kernel
// gave it already; then the listeners close. Closing them at once would
// reset every connection still in their SYN or accept queues (the kernel
// moves them to another listener only with net.ipv4.tcp_migrate_req=1,
// which nodes do not set). Open connections answer what their clients
// have sent and close when idle.
func (s *Server) Drain(wait time.Duration) {
	s.draining.Store(true)
	for _, l := range s.tcp {
		if err := handOver(l); err != nil {
			s.log.Warn("drain: TCP connections queued at the close will be reset", "err", err)
		}
	}
	for _, u := range s.udp {
		if err := u.connectSelf(); err != nil {
			s.log.Warn("drain: connecting socket to itself", "addr", u.local, "err", err)
		}
	}
	time.Sleep(wait)
	s.stopAccepting()
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	if ap.Addr().Is4() || ap.Addr().Is4In6() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}
