package k8s

import (
	"net/netip"
	"strings"

	"github.com/nodedns/nodedns/pkg/k8s/pbdecode"
)

// Rules on the text of the fields the constructors read (objects.go), in
// either of its forms (pbdecode.Text): strings of a decoded API object, or
// bytes of a protobuf item read in place, which they read without copying.

// isLabel reports whether s is a DNS-1123 label (what a pod's generated
// name and a hostname are): 1-63 of [a-z0-9-], not starting or ending
// with '-'.
func isLabel[S pbdecode.Text](s S) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// protoName lower-cases a protocol, sharing the common spellings.
func protoName[S pbdecode.Text](p S) string {
	switch string(p) {
	case "TCP", "tcp":
		return "tcp"
	case "UDP", "udp":
		return "udp"
	case "SCTP", "sctp":
		return "sctp"
	}
	return strings.ToLower(string(p))
}

// parseAddr is netip.ParseAddr on either form of text: dotted-quad IPv4,
// the bulk of a large cluster's endpoint addresses, is parsed in place
// (with ParseAddr's rules: four decimal parts of at most 255, no leading
// zeros); anything else goes to ParseAddr.
func parseAddr[S pbdecode.Text](b S) (netip.Addr, bool) {
	var a [4]byte
	part, digits, val := 0, 0, 0
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c >= '0' && c <= '9':
			if digits == 1 && val == 0 {
				return slowParseAddr(b) // a leading zero: ParseAddr refuses it
			}
			val = val*10 + int(c-'0')
			digits++
			if val > 255 {
				return slowParseAddr(b)
			}
		case c == '.' && digits > 0 && part < 3:
			a[part] = byte(val)
			part, digits, val = part+1, 0, 0
		default:
			return slowParseAddr(b)
		}
		if i == len(b)-1 {
			if part != 3 || digits == 0 {
				return slowParseAddr(b)
			}
			a[3] = byte(val)
			return netip.AddrFrom4(a), true
		}
	}
	return slowParseAddr(b)
}

func slowParseAddr[S pbdecode.Text](b S) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(string(b))
	return ip, err == nil
}
