package dnstap

import (
	"net/netip"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The dnstap schema (dnstap.proto, https://dnstap.info), written by hand
// with protowire so that a message is appended to a reused buffer on the
// caller's path without an allocation; the generated types of
// github.com/dnstap/golang-dnstap (which proto.Marshal fills from a dozen
// pointers per message) read it back in the tests.

// Field numbers of dnstap.Dnstap.
const (
	fieldIdentity protowire.Number = 1
	fieldVersion  protowire.Number = 2
	fieldExtra    protowire.Number = 3
	fieldMessage  protowire.Number = 14
	fieldType     protowire.Number = 15
)

// Field numbers of dnstap.Message.
const (
	fieldMsgType          protowire.Number = 1
	fieldSocketFamily     protowire.Number = 2
	fieldSocketProtocol   protowire.Number = 3
	fieldQueryAddress     protowire.Number = 4
	fieldResponseAddress  protowire.Number = 5
	fieldQueryPort        protowire.Number = 6
	fieldResponsePort     protowire.Number = 7
	fieldQueryTimeSec     protowire.Number = 8
	fieldQueryTimeNsec    protowire.Number = 9
	fieldQueryMessage     protowire.Number = 10
	fieldResponseTimeSec  protowire.Number = 12
	fieldResponseTimeNsec protowire.Number = 13
	fieldResponseMessage  protowire.Number = 14
)

// dnstapMessage is dnstap.Dnstap.Type MESSAGE, the only one.
const dnstapMessage = 1

// Type is a dnstap.Message.Type: what the message is about.
type Type uint8

// The message types the agent sends, as CoreDNS's dnstap and forward.
const (
	ClientQuery       Type = 5
	ClientResponse    Type = 6
	ForwarderQuery    Type = 7
	ForwarderResponse Type = 8
)

func (t Type) String() string {
	switch t {
	case ClientQuery:
		return "CLIENT_QUERY"
	case ClientResponse:
		return "CLIENT_RESPONSE"
	case ForwarderQuery:
		return "FORWARDER_QUERY"
	case ForwarderResponse:
		return "FORWARDER_RESPONSE"
	}
	return "UNKNOWN"
}

// dnstap.SocketFamily and dnstap.SocketProtocol values.
const (
	familyINET  = 1
	familyINET6 = 2
	protoUDP    = 1
	protoTCP    = 2
)

// Message is one dnstap message, as the caller knows it. Zero fields are
// left out: an invalid address, a zero time, a nil message.
type Message struct {
	Type Type
	TCP  bool
	// Query is the address of the side that sent the query (the client;
	// for the forwarder's messages, the agent), Response the side that
	// answers it (for the forwarder's messages, the upstream server).
	Query, Response netip.AddrPort
	// QueryTime is when the query was received (or sent upstream),
	// ResponseTime when the reply was sent (or received).
	QueryTime, ResponseTime time.Time
	// QueryMessage and ResponseMessage are DNS messages in wire form.
	QueryMessage, ResponseMessage []byte
}

// header is what every message of a tap carries: its identity, version
// and extra (absent when empty, as CoreDNS's).
type header struct {
	identity, version, extra []byte
}

// appendDnstap appends the dnstap.Dnstap of m, with h, to b.
func appendDnstap(b []byte, h *header, m *Message) []byte {
	for _, f := range [...]struct {
		n protowire.Number
		v []byte
	}{{fieldIdentity, h.identity}, {fieldVersion, h.version}, {fieldExtra, h.extra}} {
		if len(f.v) > 0 {
			b = protowire.AppendTag(b, f.n, protowire.BytesType)
			b = protowire.AppendBytes(b, f.v)
		}
	}
	b = protowire.AppendTag(b, fieldMessage, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeMessage(m)))
	b = appendMessage(b, m)
	b = protowire.AppendTag(b, fieldType, protowire.VarintType)
	return protowire.AppendVarint(b, dnstapMessage)
}

// sizeDnstap is the length appendDnstap appends for m with h.
func sizeDnstap(h *header, m *Message) int {
	s := 0
	for _, v := range [...][]byte{h.identity, h.version, h.extra} {
		if len(v) > 0 {
			s += protowire.SizeTag(fieldIdentity) + protowire.SizeBytes(len(v))
		}
	}
	return s + protowire.SizeTag(fieldMessage) + protowire.SizeBytes(sizeMessage(m)) +
		protowire.SizeTag(fieldType) + protowire.SizeVarint(dnstapMessage)
}

// appendMessage appends the fields of dnstap.Message m, in field order.
func appendMessage(b []byte, m *Message) []byte {
	b = protowire.AppendTag(b, fieldMsgType, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(m.Type))
	if fam, ok := family(m); ok {
		b = protowire.AppendTag(b, fieldSocketFamily, protowire.VarintType)
		b = protowire.AppendVarint(b, fam)
	}
	b = protowire.AppendTag(b, fieldSocketProtocol, protowire.VarintType)
	b = protowire.AppendVarint(b, protocol(m))
	b = appendAddr(b, fieldQueryAddress, m.Query)
	b = appendAddr(b, fieldResponseAddress, m.Response)
	if m.Query.IsValid() {
		b = protowire.AppendTag(b, fieldQueryPort, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.Query.Port()))
	}
	if m.Response.IsValid() {
		b = protowire.AppendTag(b, fieldResponsePort, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.Response.Port()))
	}
	if !m.QueryTime.IsZero() {
		b = protowire.AppendTag(b, fieldQueryTimeSec, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.QueryTime.Unix()))
		b = protowire.AppendTag(b, fieldQueryTimeNsec, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, uint32(m.QueryTime.Nanosecond()))
	}
	if m.QueryMessage != nil {
		b = protowire.AppendTag(b, fieldQueryMessage, protowire.BytesType)
		b = protowire.AppendBytes(b, m.QueryMessage)
	}
	if !m.ResponseTime.IsZero() {
		b = protowire.AppendTag(b, fieldResponseTimeSec, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.ResponseTime.Unix()))
		b = protowire.AppendTag(b, fieldResponseTimeNsec, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, uint32(m.ResponseTime.Nanosecond()))
	}
	if m.ResponseMessage != nil {
		b = protowire.AppendTag(b, fieldResponseMessage, protowire.BytesType)
		b = protowire.AppendBytes(b, m.ResponseMessage)
	}
	return b
}

// sizeMessage is the length appendMessage appends for m.
func sizeMessage(m *Message) int {
	tagVarint := func(n protowire.Number, v uint64) int {
		return protowire.SizeTag(n) + protowire.SizeVarint(v)
	}
	tagBytes := func(n protowire.Number, l int) int {
		return protowire.SizeTag(n) + protowire.SizeBytes(l)
	}
	s := tagVarint(fieldMsgType, uint64(m.Type)) + tagVarint(fieldSocketProtocol, protocol(m))
	if fam, ok := family(m); ok {
		s += tagVarint(fieldSocketFamily, fam)
	}
	if m.Query.IsValid() {
		s += tagBytes(fieldQueryAddress, addrLen(m.Query.Addr())) + tagVarint(fieldQueryPort, uint64(m.Query.Port()))
	}
	if m.Response.IsValid() {
		s += tagBytes(fieldResponseAddress, addrLen(m.Response.Addr())) + tagVarint(fieldResponsePort, uint64(m.Response.Port()))
	}
	if !m.QueryTime.IsZero() {
		s += tagVarint(fieldQueryTimeSec, uint64(m.QueryTime.Unix())) + protowire.SizeTag(fieldQueryTimeNsec) + protowire.SizeFixed32()
	}
	if m.QueryMessage != nil {
		s += tagBytes(fieldQueryMessage, len(m.QueryMessage))
	}
	if !m.ResponseTime.IsZero() {
		s += tagVarint(fieldResponseTimeSec, uint64(m.ResponseTime.Unix())) + protowire.SizeTag(fieldResponseTimeNsec) + protowire.SizeFixed32()
	}
	if m.ResponseMessage != nil {
		s += tagBytes(fieldResponseMessage, len(m.ResponseMessage))
	}
	return s
}

// family is the socket family of m's addresses: INET for IPv4 (mapped
// addresses included, as CoreDNS's), else INET6; none without an address.
func family(m *Message) (uint64, bool) {
	a := m.Query
	if !a.IsValid() {
		a = m.Response
	}
	if !a.IsValid() {
		return 0, false
	}
	if a.Addr().Unmap().Is4() {
		return familyINET, true
	}
	return familyINET6, true
}

func protocol(m *Message) uint64 {
	if m.TCP {
		return protoTCP
	}
	return protoUDP
}

func addrLen(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 4
	}
	return 16
}

// appendAddr appends address field n of ap (4 octets for IPv4, 16 for
// IPv6), when ap is valid.
func appendAddr(b []byte, n protowire.Number, ap netip.AddrPort) []byte {
	if !ap.IsValid() {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.BytesType)
	a := ap.Addr().Unmap()
	if a.Is4() {
		v := a.As4()
		b = protowire.AppendVarint(b, 4)
		return append(b, v[:]...)
	}
	v := a.As16()
	b = protowire.AppendVarint(b, 16)
	return append(b, v[:]...)
}
