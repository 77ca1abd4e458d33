package pipeline

import (
	"errors"
	"net"
	"syscall"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnswire"
	"github.com/nodedns/nodedns/pkg/query/stage"
)

// Extended DNS Errors (RFC 8914): why the agent answered as it did, in an
// option of the reply's OPT record, so only for clients that sent EDNS
// (finish). The pipeline sets the codes of what it decides:
//
//	 3 Stale Answer           an expired answer served because the upstreams failed (serve-stale)
//	19 Stale NXDOMAIN Answer  the same for an NXDOMAIN
//	13 Cached Error           a SERVFAIL served from the cache (kept 5 s after the upstream's)
//	22 No Reachable Authority SERVFAIL: no upstream answered in time (every attempt timed out), or none is configured
//	23 Network Error          SERVFAIL: the exchanges failed otherwise (refused, unreachable, a broken reply)
//	 0 Other Error            SERVFAIL at the in-flight bound (max-inflight, max-client-inflight, the forwarder's), with EXTRA-TEXT
//	14 Not Ready              SERVFAIL for a cluster name before the index synced
//	18 Prohibited             REFUSED: zone transfers (AXFR, IXFR) are refused by policy
//	21 Not Supported          REFUSED: a class other than IN
//	29 Synthesized            an answer the agent made up: the search-path CNAME, RFC 8482's ANY answer
//
// The in-flight bound gets Other Error: no registered code says "shed for
// load". Not Ready (14) means a server not yet fully functional, which a
// client may take as "try another server now" for every query; Prohibited
// (18) is a policy about the client, whose next query would be refused
// too; Network Error (23) is about talking to another server, which did
// not happen. RFC 8914 §4.1 makes Other Error, with EXTRA-TEXT, the code
// for what the others do not cover.
//
// An upstream's own EDE options ride with its answer, forwarded or cached
// (the cache keeps them, bounded, in the stored reply's OPT); at most
// maxEDE options in all.

// maxEDE bounds the EDE options of one reply: the agent's and those passed
// on from an upstream (the cache keeps at most 3 of those; a hit served
// from wire form adds at most one of the agent's to them).
const maxEDE = 4

// EXTRA-TEXT of the codes the agent sets (RFC 8914 §2: for humans, not
// parsed). Constants: setting one allocates nothing.
const (
	edeTextInflight   = "in-flight bound reached"
	edeTextUpInflight = "upstream in-flight bound reached"
	edeTextPanic      = "internal error"
	edeTextNotSynced  = "cluster index not synced"
	edeTextTimeout    = "no upstream answered in time"
	edeTextNoUpstream = "no upstream for the name"
	edeTextAllDown    = "every upstream is down"
	edeTextNetwork    = "upstream exchange failed"
	edeTextTransfer   = "zone transfers are refused"
	edeTextClass      = "only class IN is served"
	edeTextSearch     = "search-path answer"
	edeTextANY        = "RFC 8482 answer to ANY"
	edeTextZone       = "zone file not loaded, or a CNAME loop"
)

// edeSet is the EDE options of one reply, on the call's stack.
type edeSet struct {
	n     uint8
	codes [maxEDE]uint16
	texts [maxEDE]string
}

// add adds an option unless the code is there already or the set is full.
func (e *edeSet) add(code uint16, text string) {
	for i := uint8(0); i < e.n; i++ {
		if e.codes[i] == code {
			return
		}
	}
	if e.n < maxEDE {
		e.codes[e.n], e.texts[e.n] = code, text
		e.n++
	}
}

// size is the bytes the options add to the reply's OPT.
func (e *edeSet) size() int {
	n := 0
	for i := uint8(0); i < e.n; i++ {
		n += dnswire.EDELen(e.texts[i])
	}
	return n
}

// appendTo appends the options to the OPT record at opt, the last record
// of m.
func (e *edeSet) appendTo(m []byte, opt int) []byte {
	for i := uint8(0); i < e.n; i++ {
		m = dnswire.AppendEDE(m, opt, e.codes[i], e.texts[i])
	}
	return m
}

// passOn adds the EDE options of m's OPT record (an upstream's reply, or
// one the cache kept with them).
func (e *edeSet) passOn(m *dns.Msg) {
	for i := len(m.Extra) - 1; i >= 0; i-- {
		opt, ok := m.Extra[i].(*dns.OPT)
		if !ok {
			continue
		}
		for _, o := range opt.Option {
			if x, ok := o.(*dns.EDNS0_EDE); ok {
				e.add(x.InfoCode, x.ExtraText)
			}
		}
		return
	}
}

// stale marks an answer served stale: NXDOMAIN has a code of its own.
func (e *edeSet) stale(rcode int) {
	if rcode == dns.RcodeNameError {
		e.add(dns.ExtendedErrorCodeStaleNXDOMAINAnswer, "")
		return
	}
	e.add(dns.ExtendedErrorCodeStaleAnswer, "")
}

// failed adds the codes for a resolution that failed with err (the reply is
// SERVFAIL).
func (e *edeSet) failed(err error) {
	switch {
	case errors.Is(err, errNotSynced):
		e.add(dns.ExtendedErrorCodeNotReady, edeTextNotSynced)
		return
	case errors.Is(err, errZone):
		e.add(dns.ExtendedErrorCodeOther, edeTextZone)
		return
	case errors.Is(err, errClusterDNS):
		// Before the sync, asking the central cluster DNS failed: not
		// ready, and why the fallback failed.
		e.add(dns.ExtendedErrorCodeNotReady, edeTextNotSynced)
	}
	switch {
	case errors.Is(err, stage.ErrOverloaded):
		e.add(dns.ExtendedErrorCodeOther, edeTextUpInflight)
	case errors.Is(err, stage.ErrNoServer):
		e.add(dns.ExtendedErrorCodeNoReachableAuthority, edeTextNoUpstream)
	case errors.Is(err, stage.ErrAllDown):
		e.add(dns.ExtendedErrorCodeNoReachableAuthority, edeTextAllDown)
	case onlyTimeouts(err):
		e.add(dns.ExtendedErrorCodeNoReachableAuthority, edeTextTimeout)
	default:
		e.add(dns.ExtendedErrorCodeNetworkError, edeTextNetwork)
	}
}

// onlyTimeouts reports whether the failures err holds (every attempt of
// an exchange, joined) are timeouts only: nothing answered in time, as
// against a server that refused, an unreachable network or a broken
// reply. Sentinels and wrappers along the way say neither.
func onlyTimeouts(err error) bool {
	t, other := classify(err)
	return t > 0 && other == 0
}

// classify counts the network failures in err's tree: timeouts (a
// deadline, an i/o timeout) and the others (refused, unreachable, reset).
func classify(err error) (timeouts, others int) {
	if ne, ok := err.(net.Error); ok {
		if ne.Timeout() {
			return 1, 0
		}
		return 0, 1
	}
	if _, ok := err.(syscall.Errno); ok {
		return 0, 1
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			t, o := classify(e)
			timeouts, others = timeouts+t, others+o
		}
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return classify(inner)
		}
	}
	return timeouts, others
}
