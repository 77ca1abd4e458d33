//go:build !linux

package upstream

import (
	"net"

	"github.com/miekg/dns"
)

// readDatagram reads the next datagram of uc whole (into a 64 KiB buffer:
// no UDP datagram is larger). The Linux version sizes the buffer to the
// datagram instead.
func readDatagram(uc *net.UDPConn) ([]byte, error) {
	b := make([]byte, dns.MaxMsgSize)
	n, err := uc.Read(b)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}
