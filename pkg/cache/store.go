package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/pkg/query/dnsname"
	"github.com/nodedns/nodedns/pkg/query/dnswire"
)

// Put stores r as the answer for k if the caching rules allow it.
func (c *Cache) Put(k Key, r *dns.Msg) { c.store(k, r, c.gen.Load()) }

// keeps reports whether old must survive a SERVFAIL: it is still fresh, or
// could still be served stale (either is worth more than the failure).
func (c *Cache) keeps(old *entry, now int64) bool {
	return old.kind != kindServfail && (old.expires() > now || c.usableStale(old, now))
}

// keepsAnswer reports whether old, an answer to its question still fresh
// or servable stale, must survive a reply that is no answer to it, under
// StalePreferPositive.
func (c *Cache) keepsAnswer(old *entry, now int64) bool {
	return c.conf().StalePreferPositive && old.kind == kindPositive && (old.expires() > now || c.usableStale(old, now))
}

// store applies the caching rules (written next to the code that enforces
// them, as the RFCs they come from):
//   - truncated replies are never stored: the TCP retry has the real answer;
//   - the reply must answer exactly k's question;
//   - a TTL (or SOA MINIMUM) of 2^31 or more counts as 0 (RFC 2181 §8, as
//     unbound; RFC 8767 §4 would read it as a positive value capped at 7
//     days instead: dnswire.ReadTTL): such a value only comes from a
//     broken or hostile source, and it must not pin an answer for MaxTTL
//     (a positive answer is then kept for MinTTL, as one with TTL 0 is);
//   - NOERROR with answers: lifetime is the smallest TTL in the message (OPT
//     excluded), clamped to [MinTTL, MaxTTL];
//   - NOERROR whose answers do not answer the question (a CNAME chain that
//     stops short of the type asked) is NODATA at the chain's end (RFC 2308
//     §2.2) and kept as a denial is: only with an SOA, for the smallest of
//     the records' TTLs and the SOA's MINIMUM, clamped to [MinNegativeTTL,
//     MaxNegativeTTL]. Without an SOA it says nothing about how long the
//     end has no data (an upstream that could not follow the chain sends
//     such replies too), and is not kept. CoreDNS keeps it as an answer,
//     up to its max TTL;
//   - NXDOMAIN, or NOERROR without answers (NODATA): only with an SOA in the
//     authority section; lifetime min(SOA TTL, SOA MINIMUM) (RFC 2308 §5),
//     clamped to [MinNegativeTTL, MaxNegativeTTL]; SOA-less denials are not
//     stored;
//   - SERVFAIL and NOTIMP: ServfailTTL, and never over an entry that is
//     still fresh (a failed prefetch) or could still be served stale: that
//     entry is worth more than the failure;
//   - everything else (REFUSED, FORMERR, ...) is not stored;
//   - nothing under a zone of DisableSuccess (answers) or DisableDenial
//     (the rest) is stored;
//   - with StalePreferPositive, an answer to the question still fresh or
//     servable stale is not replaced by anything but another answer;
//   - nothing fetched before the upstream was replaced or entries were
//     dropped (gen, read before the fetch, no longer the cache's) is
//     stored: it is the old upstream's answer, or one just dropped.
//
// It returns the entry's lifetime and whether r was stored.
func (c *Cache) store(k Key, r *dns.Msg, gen uint64) (time.Duration, bool) {
	cfg := c.conf()
	now := c.now()
	life, kd, ok := lifetime(cfg, k, r)
	if !ok || life <= 0 {
		return 0, false
	}
	disabled := cfg.DisableDenial
	if kd == kindPositive || kd == kindPartial {
		disabled = cfg.DisableSuccess
	}
	if len(disabled) > 0 && dnsname.InZones(k.Name, disabled) {
		return 0, false
	}
	if kd != kindPositive {
		if old, ok := c.peek(&k); ok && (kd == kindServfail && c.keeps(old, now) || c.keepsAnswer(old, now)) {
			return 0, false
		}
	}
	wire, err := pack(k, r, cfg.MaxEntryBytes)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			c.tooLarge.Add(1)
		}
		c.log.Debug("not caching reply", "name", k.Name, "type", k.Type, "err", err)
		return 0, false
	}
	e := &entry{wire: wire, kind: kd, flags: keyFlags(&k), rcode: uint16(r.Rcode), stored: now, lifetime: int64(life)}
	sh, h := c.slot(&k)
	if !sh.add(h, e, &c.gen, gen) {
		return 0, false
	}
	return life, true
}

// lifetime is how long r would be kept for k, and as what: the rules of
// store but the zones not cached, the entries kept over it and the size
// bound. ok is false for a reply that is never kept.
func lifetime(cfg *Config, k Key, r *dns.Msg) (time.Duration, kind, bool) {
	if r.Truncated || len(r.Question) != 1 {
		return 0, 0, false
	}
	if q := r.Question[0]; q.Qtype != k.Type || q.Qclass != k.Class || !strings.EqualFold(q.Name, k.Name) {
		return 0, 0, false
	}
	switch {
	case r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0:
		if answers(k, r) {
			return clamp(minTTL(r), cfg.MinTTL, cfg.MaxTTL), kindPositive, true
		}
		// A CNAME chain that stops short of the type: NODATA at its end
		// (RFC 2308 §2.2), kept as a denial is (with an SOA, within the
		// negative bounds), not as an answer.
		soa := findSOA(r)
		if soa == nil {
			return 0, 0, false
		}
		ttl := time.Duration(dnswire.ReadTTL(soa.Minttl)) * time.Second
		return clamp(min(minTTL(r), ttl), cfg.MinNegativeTTL, cfg.MaxNegativeTTL), kindPartial, true
	case r.Rcode == dns.RcodeNameError || r.Rcode == dns.RcodeSuccess:
		soa := findSOA(r)
		if soa == nil {
			return 0, 0, false
		}
		ttl := min(dnswire.ReadTTL(soa.Hdr.Ttl), dnswire.ReadTTL(soa.Minttl))
		return clamp(time.Duration(ttl)*time.Second, cfg.MinNegativeTTL, cfg.MaxNegativeTTL), kindNegative, true
	case r.Rcode == dns.RcodeServerFailure || r.Rcode == dns.RcodeNotImplemented:
		return cfg.ServfailTTL, kindServfail, true
	}
	return 0, 0, false
}

// answers reports whether r's answer section answers k's question: a
// record of k's type (any type for ANY) owned by the name its CNAME chain
// from k's name ends at, or for CNAME the question's CNAME. A malformed
// chain (a loop, two targets for one owner) answers nothing.
func answers(k Key, r *dns.Msg) bool {
	name := k.Name
	for hops := 0; ; hops++ {
		var target string
		for _, rr := range r.Answer {
			h := rr.Header()
			if !strings.EqualFold(h.Name, name) {
				continue
			}
			if h.Rrtype == k.Type || k.Type == dns.TypeANY {
				return true
			}
			if cn, ok := rr.(*dns.CNAME); ok {
				if target != "" && !strings.EqualFold(target, cn.Target) {
					return false
				}
				target = cn.Target
			}
		}
		if target == "" || hops > len(r.Answer) {
			return false
		}
		name = target
	}
}

func clamp(d, lo, hi time.Duration) time.Duration { return max(lo, min(d, hi)) }

func minTTL(r *dns.Msg) time.Duration {
	m := uint32(1<<31 - 1)
	for _, sec := range [][]dns.RR{r.Answer, r.Ns, r.Extra} {
		for _, rr := range sec {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			m = min(m, dnswire.ReadTTL(rr.Header().Ttl))
		}
	}
	return time.Duration(m) * time.Second
}

func findSOA(r *dns.Msg) *dns.SOA {
	for _, rr := range r.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return soa
		}
	}
	return nil
}

// errTooLarge: the reply is larger than MaxEntryBytes.
var errTooLarge = errors.New("reply larger than the cache's entry limit")

// pack stores r in wire form: ID 0, lower-case question and owner names (so
// owners equal to the question compress against it and take the client's
// case when the pipeline patches the question), no OPT but one holding the
// upstream's EDE options (edeOPT), last. A reply that packs
// into more than limit bytes is refused with errTooLarge.
func pack(k Key, r *dns.Msg, limit int) ([]byte, error) {
	m := &dns.Msg{MsgHdr: r.MsgHdr, Compress: true}
	m.Id = 0
	m.Question = []dns.Question{{Name: k.Name, Qtype: k.Type, Qclass: k.Class}}
	// A reply whose records alone, each with a name compressed to a
	// pointer, exceed the limit is refused before anything is copied or
	// packed: the flood of very large answers this limit is for costs
	// no work here.
	if floor := packedFloor(r); floor > limit {
		return nil, fmt.Errorf("reply for %s: at least %d bytes: %w", k.Name, floor, errTooLarge)
	}
	lower := func(in []dns.RR) []dns.RR {
		out := make([]dns.RR, 0, len(in))
		for _, rr := range in {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			if name := rr.Header().Name; hasUpper(name) {
				rr = dns.Copy(rr)
				rr.Header().Name = strings.ToLower(name)
			}
			out = append(out, rr)
		}
		return out
	}
	m.Answer, m.Ns, m.Extra = lower(r.Answer), lower(r.Ns), lower(r.Extra)
	if opt := edeOPT(r); opt != nil {
		m.Extra = append(m.Extra, opt)
	}
	packed, err := m.Pack()
	if err != nil {
		return nil, fmt.Errorf("packing reply for %s: %w", k.Name, err)
	}
	if len(packed) > limit {
		return nil, fmt.Errorf("reply for %s: %d bytes: %w", k.Name, len(packed), errTooLarge)
	}
	// miekg/dns packs some records it unpacked into bytes it cannot read
	// back (a record with empty RDATA, say). The hit path serves these
	// bytes as they are, so they must parse: one unpack per stored entry,
	// off the hit path. Found by FuzzAppendHit.
	if err := new(dns.Msg).Unpack(packed); err != nil {
		return nil, fmt.Errorf("reply for %s packs into bytes that do not unpack: %w", k.Name, err)
	}
	offs, err := dnswire.TTLOffsets(packed)
	if err != nil {
		return nil, fmt.Errorf("indexing TTLs of reply for %s: %w", k.Name, err)
	}
	// One exact allocation (Pack's buffer is sized for the uncompressed
	// message): the reply, then its TTL offsets in the spare capacity.
	buf := make([]byte, len(packed), len(packed)+2*len(offs))
	copy(buf, packed)
	for _, o := range offs {
		buf = binary.BigEndian.AppendUint16(buf, o)
	}
	return buf[:len(packed)], nil
}

// Extended DNS Errors (RFC 8914) the upstream gave with its reply are kept
// with it, bounded: at most maxEDE options, EXTRA-TEXT cut to maxEDEText
// bytes (at a character boundary). Other EDNS options are the upstream's
// business with us, never the client's.
const (
	maxEDE     = 3
	maxEDEText = 64
)

// edeOPT returns an OPT record holding the EDE options of r's OPT, for the
// stored reply (its last record: the pipeline makes it the reply's own
// OPT, or drops it for a client without EDNS); nil when r has none.
func edeOPT(r *dns.Msg) *dns.OPT {
	in := r.IsEdns0()
	if in == nil {
		return nil
	}
	var out *dns.OPT
	for _, o := range in.Option {
		e, ok := o.(*dns.EDNS0_EDE)
		if !ok {
			continue
		}
		if out == nil {
			out = &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: dns.DefaultMsgSize}}
		}
		out.Option = append(out.Option, &dns.EDNS0_EDE{InfoCode: e.InfoCode, ExtraText: cutText(e.ExtraText, maxEDEText)})
		if len(out.Option) == maxEDE {
			break
		}
	}
	return out
}

// cutText cuts s to at most n bytes without splitting a UTF-8 character.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// packedFloor is a lower bound on r's packed size: the header, and each
// record's fixed fields and RDATA with its owner name a 2-byte pointer.
// RDATA lengths are the ones read off the wire (r came from Unpack);
// records built in memory have none and count for their fixed part only.
func packedFloor(r *dns.Msg) int {
	n := dnswire.HeaderLen
	for _, sec := range [][]dns.RR{r.Answer, r.Ns, r.Extra} {
		for _, rr := range sec {
			n += 2 + 10 + int(rr.Header().Rdlength)
		}
	}
	return n
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// msg unpacks the entry with every TTL set to ttl.
func (e *entry) msg(id uint16, ttl uint32) (*dns.Msg, error) {
	b := make([]byte, len(e.wire))
	copy(b, e.wire)
	e.putTTLs(b, ttl)
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return nil, fmt.Errorf("cache: unpacking stored reply: %w", err)
	}
	m.Id = id
	return m, nil
}
