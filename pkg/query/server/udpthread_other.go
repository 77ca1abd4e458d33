//go:build !linux

package server

import (
	"errors"
	"net"
	"net/netip"
	"time"
)

var errNoThreads = errors.New("server: thread readers need Linux")

func threadSocket(*net.UDPConn, time.Duration) (*udpSock, error) { return nil, errNoThreads }

func (s *Server) startThreadReader(*udpSock) {}

func fdSendTo(int, int, []byte, netip.AddrPort) error { return errNoThreads }

func fdClose(int) error { return errNoThreads }

// threadWake: no thread readers here; the default of Config.threadWake.
const threadWake = 200 * time.Millisecond
