//go:build !linux

package server

import (
	"errors"
	"net"
	"net/netip"
)

var errNoThreads = errors.New("server: thread readers need Linux")

func threadSocket(*net.UDPConn) (*udpSock, error) { return nil, errNoThreads }

func (s *Server) startThreadReader(*udpSock) {}

func fdSendTo(int, int, []byte, netip.AddrPort) error { return errNoThreads }

func fdClose(int) error { return errNoThreads }
