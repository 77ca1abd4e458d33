//go:build !linux

package server

import "net"

// handOver and clearHandOver steer a SO_REUSEPORT group's new connections
// on Linux (handover_linux.go); elsewhere a closing listener's queue is
// the kernel's to handle.
func handOver(*net.TCPListener) error { return nil }

func clearHandOver(*net.TCPListener) error { return nil }
