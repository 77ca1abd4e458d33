package ndots

import (
	"github.com/miekg/dns"
)

// walk answers q by walking the pod's search list: the first expansion
// that is not NXDOMAIN wins and the client gets `<asked> CNAME <winner>`
// plus the winner's answer, in one round trip. NODATA at the winner is
// NODATA for the name asked. It is undecided (AsAsked) when an expansion
// failed.
//
// The winner is remembered per (namespace, base), whatever the type, so
// that A and AAAA for one name from one pod always take the same path even
// if some upstream answers the two types inconsistently. Without q.Wait
// (on the reader) the walk goes as far as answers at hand take it (the
// cluster zone, the cache) and says Wait at the first step that would
// block; a reply it builds there is kept as a shortcut, so that the next
// query for the name is a copy of wire bytes.
func (s *SearchPath) walk(q *Query, st *Stages, base string, r *Result) {
	set := s.Settings()
	names := expansions(base, q.NS, s.cluster.Zone(), set.Search)
	r.Figures.List = len(names)
	qtype := q.Type
	// The key holds the namespace: one namespace's result is never
	// another's.
	key := q.NS + "/" + base
	// The generations are read before any answer: a change after this
	// point moves them, and a shortcut built here is checked again, a
	// decision made here not used again.
	gen, conf := s.cluster.Generation(), st.Conf()
	tried := 0
	// A decision is the namespace's; a client the access list keeps from
	// one of its steps walks from the start (and stops at that step),
	// leaving the decision to the others.
	if e, hit := s.memo.get(key, conf); hit && e.idx < len(names) && allowed(st, names[:e.idx+1]) {
		i := e.idx
		if !s.stepsStillMissing(names[:i], qtype) {
			// An earlier step exists in the cluster now (a Service
			// created since): the client would stop there, so the walk
			// must too.
			s.memo.forget(e)
		} else {
			a, err := s.step(st, names[i], qtype, true)
			switch {
			case a.Wait || !q.Wait && (err != nil || a.Msg.Rcode != dns.RcodeSuccess):
				r.Outcome = Wait
				return
			case err == nil && a.Msg.Rcode == dns.RcodeSuccess:
				m := s.won(q, r, names, i, a)
				if !q.Wait && !q.NoShortcuts {
					s.keep(q, st, set, e, names[:i+1], a, m, gen, len(names))
				}
				r.Outcome, r.Msg, r.Steps, r.Saved = Walked, m, 1, i
				return
			case err == nil && s.stillWins(q, st, names[i], e.qtype):
				// NXDOMAIN here for a winner that still exists for the
				// type that made it win (an upstream that answers A but
				// not AAAA) becomes NODATA for the name asked: same path.
				r.Outcome, r.Msg, r.Steps, r.Saved = Walked, s.won(q, r, names, i, a), 1, i
				return
			}
			// The winner has gone (a deleted Service, say: NXDOMAIN now
			// for the type that won too). Answering from it would turn
			// its NXDOMAIN into an empty NOERROR for the name asked,
			// which stops dig and musl, and the expansions after it
			// would never be tried: walk again from the start instead.
			s.memo.forget(e)
			tried = 1
		}
	}
	keep := !q.Wait // the winner's stored reply, to keep a shortcut on
	var first *dns.Msg
	for i, name := range names {
		a, err := s.step(st, name, qtype, keep)
		switch {
		case a.Wait || !q.Wait && err != nil:
			r.Outcome = Wait
			return
		case err != nil:
			return // undecided: answered as asked
		}
		if i == 0 {
			first = a.Msg
		}
		if a.Msg.Rcode == dns.RcodeNameError {
			continue
		}
		e := s.memo.put(key, i, qtype, conf)
		m := s.won(q, r, names, i, a)
		if !q.Wait && !q.NoShortcuts {
			s.keep(q, st, set, e, names[:i+1], a, m, gen, len(names))
		}
		r.Outcome, r.Msg, r.Steps, r.Saved = Walked, m, tried+i+1, i
		return
	}
	// Nothing exists anywhere: NXDOMAIN for the name asked, with the
	// cluster zone's SOA. The client walks its own list after it (glibc,
	// musl and dig all do), so no query is saved: the later expansions
	// are answered locally or from the cache.
	r.Figures.Won = len(names)
	r.Outcome, r.Msg, r.Steps = Walked, first, tried+len(names)
}

// won notes in r that step i won with a, and returns the reply to q.
func (s *SearchPath) won(q *Query, r *Result, names []string, i int, a Answer) *dns.Msg {
	r.Figures.Won, r.Synthesized, r.Answer = i, i > 0, a
	return reply(q.Name, names, i, a.Msg)
}

// allowed reports whether the access list lets the client visit every
// name of steps: a decision or shortcut made for one client of a
// namespace is another's only so.
func allowed(st *Stages, steps []string) bool {
	if st.Allowed == nil {
		return true
	}
	for _, n := range steps {
		if !st.Allowed(n) {
			return false
		}
	}
	return true
}

// stepsStillMissing reports whether every step in the cluster zone among
// names is still a name error there. Steps outside it (the node's search
// domains) were answered by the cache and upstream and are trusted for
// the memo's lifetime, as the walk that found them is.
func (s *SearchPath) stepsStillMissing(names []string, qtype uint16) bool {
	for _, n := range names {
		res, ok := s.cluster.Lookup(n, qtype)
		if ok && (res.NotSynced || res.Msg == nil || res.Msg.Rcode != dns.RcodeNameError) {
			return false
		}
	}
	return true
}

// stillWins reports whether the remembered winner name still exists for
// won, the type that made it win (q's type just got NXDOMAIN there).
func (s *SearchPath) stillWins(q *Query, st *Stages, name string, won uint16) bool {
	if won == q.Type {
		return false // just asked: NXDOMAIN
	}
	a, err := s.step(st, name, won, false)
	return err == nil && !a.Wait && a.Msg.Rcode != dns.RcodeNameError
}

// step resolves one expansion for qtype through the stage order; a step
// the access list keeps the client from, a failure, or a SERVFAIL or
// REFUSED reply is an error (the walk cannot tell whether the name
// exists).
func (s *SearchPath) step(st *Stages, name string, qtype uint16, keep bool) (Answer, error) {
	if st.Allowed != nil && !st.Allowed(name) {
		return Answer{}, errStepFailed
	}
	a, err := st.Resolve(name, qtype, keep)
	switch {
	case a.Wait:
		return a, nil
	case err != nil:
		return a, err
	case a.Msg.Rcode != dns.RcodeSuccess && a.Msg.Rcode != dns.RcodeNameError:
		return a, errStepFailed
	}
	return a, nil
}

type stepError string

func (e stepError) Error() string { return string(e) }

const errStepFailed = stepError("search-path step answered neither NOERROR nor NXDOMAIN")

// reply is the reply to a query for asked when names[i] won with m.
func reply(asked string, names []string, i int, m *dns.Msg) *dns.Msg {
	if i == 0 {
		return m
	}
	out := &dns.Msg{MsgHdr: m.MsgHdr}
	out.Rcode = dns.RcodeSuccess
	if len(m.Answer) == 0 {
		out.Ns = m.Ns
		return out
	}
	// The CNAME is synthesized, so the reply is not authoritative unless
	// everything in it came from the cluster zone.
	cname := &dns.CNAME{Hdr: dns.RR_Header{Name: asked, Rrtype: dns.TypeCNAME, Class: dns.ClassINET,
		Ttl: m.Answer[0].Header().Ttl}, Target: names[i]}
	out.Answer = make([]dns.RR, 0, 1+len(m.Answer))
	out.Answer = append(append(out.Answer, cname), m.Answer...)
	out.Extra = m.Extra
	return out
}
