//go:build !linux

package server

import (
	"errors"
	"net"
)

var errNoThreads = errors.New("server: thread readers need Linux")

func (s *Server) startThreadReader(*net.UDPConn) error { return errNoThreads }
