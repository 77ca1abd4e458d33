package stage

import (
	"net/netip"

	"github.com/miekg/dns"
)

// The stages that carry CoreDNS plugins around the resolution order:
// answers fixed by convention (local, chaos), the access list (acl) and
// templates (template). The pipeline runs them in CoreDNS's plugin order:
// Builtin before rewrites, ACL after them and before the cache, Templates
// before static records and the cluster zone.

// Builtin answers names whose answers no zone holds (pkg/query/builtin):
// localhost and the special reverse zones (CoreDNS local), the server's
// identity in class CH (CoreDNS chaos). It is asked before rewrites and
// the access list, as those plugins come first in CoreDNS.
type Builtin interface {
	// Lookup answers (name, qtype, qclass), on the reader; ok is false
	// for a name it does not answer, at no allocation.
	Lookup(name string, qtype, qclass uint16) (res Result, ok bool)
}

// ACLAction is what an access list decides about a query.
type ACLAction uint8

// Access list decisions.
const (
	// ACLPass: resolve the query (allowed, or no rule applies).
	ACLPass ACLAction = iota
	// ACLBlock: REFUSED, with Extended DNS Error 15 (Blocked).
	ACLBlock
	// ACLFilter: NOERROR without records, with Extended DNS Error 17
	// (Filtered).
	ACLFilter
	// ACLDrop: no reply at all.
	ACLDrop
)

// ACL decides by the client's address and the query's name and type who
// gets an answer (pkg/query/acl, CoreDNS acl), after rewrites.
type ACL interface {
	// Decide is asked about every query, on the reader, at no
	// allocation. name is lower-case and fully qualified.
	Decide(name string, qtype uint16, client netip.Addr) ACLAction
	// ByName reports whether a decision may depend on the name (rules
	// for some zones only): the search-path walk then asks about each
	// name it visits.
	ByName() bool
}

// Condition is a view's condition (pkg/query/view, CoreDNS view): whether
// a query, by its client and its question as asked, is the view's.
type Condition interface {
	// Holds is asked on the reader, at no allocation. name is lower-case
	// and fully qualified.
	Holds(client netip.Addr, name string, qtype, qclass uint16, tcp bool) bool
}

// TemplateAnswer is a template's answer to one question.
type TemplateAnswer struct {
	// Msg carries the rcode, AA and the sections; its Question is not
	// meaningful. Read-only.
	Msg *dns.Msg
	// Fixed: Msg is the template's own (it renders no record), the same
	// for every question it answers, so its packed form may be kept.
	Fixed bool
	// Targets are CNAME targets of the answer (to an A or AAAA question)
	// whose records the pipeline looks up through every stage and
	// appends, as CoreDNS's template does.
	Targets []string
	// EDE, when EDECode is set (HasEDE), is the Extended DNS Error the
	// reply carries.
	HasEDE  bool
	EDECode uint16
	EDEText string
}

// Templates answers questions from templates (pkg/query/template, CoreDNS
// template), before static records and the cluster zone.
type Templates interface {
	// Lookup answers (name, qtype, qclass) asked by client (id is the
	// query's ID, for templates that read the message), on the reader.
	// ok is false when no template answers: a name outside every
	// template's zones costs a few suffix comparisons and no
	// allocation.
	Lookup(name string, qtype, qclass uint16, client netip.Addr, id uint16) (a TemplateAnswer, ok bool)
}

// ZoneAnswer is a file zone's answer to one question (ZoneFiles).
type ZoneAnswer struct {
	// Msg is the answer when Target is empty: rcode, AA and the
	// sections. Read-only.
	Msg *dns.Msg
	// Failed: the zone cannot answer (not loaded, a CNAME loop): a
	// SERVFAIL the server writes, without records.
	Failed bool
	// Target is a CNAME target the zone does not hold: the pipeline
	// looks (Target, qtype) up through every stage and hands Finish the
	// result (the target's reply, or failed), which gives the answer, as
	// CoreDNS's file asks its whole server for such a target.
	Target string
	Finish func(target *dns.Msg, failed bool) *dns.Msg
}

// ZoneFiles answers the zones served from zone files (pkg/query/zonefile,
// CoreDNS file), after the cluster zone in the stage order.
type ZoneFiles interface {
	// Lookup answers (name, qtype): name is lower-case and fully
	// qualified. ok is false for a name outside every zone (or passed on
	// by fallthrough): a few suffix comparisons and no allocation.
	Lookup(name string, qtype uint16) (a ZoneAnswer, ok bool)
	// Generation moves after every change of the zones (a reload, a
	// file read again).
	Generation() uint64
}

// DNS64 synthesizes AAAA answers from A records (pkg/query/dns64, CoreDNS
// dns64). It comes before every other stage but the builtin answers, as
// CoreDNS's dns64 sits before all the plugins that answer: the reply it
// looks at is the whole pipeline's, the cluster zone's included, and its A
// lookup runs the name through the whole pipeline again.
type DNS64 interface {
	// Applies is asked about every query, on the reader, at no
	// allocation: whether a query of (qtype, qclass) from client may be
	// translated, name (canonical) being the name it would translate.
	Applies(client netip.Addr, name string, qtype, qclass uint16) bool
	// Translate reports whether the reply to the AAAA question is
	// replaced by one synthesized from the A records.
	Translate(aaaa *dns.Msg) bool
	// Synthesize builds that reply from the AAAA reply and the A reply
	// (both read-only).
	Synthesize(aaaa, a *dns.Msg) *dns.Msg
}

// ExternalZone answers the external zones of the cluster's Services
// (pkg/k8s's External, CoreDNS k8s_external): asked after the static
// records and before the cluster zone, as CoreDNS's plugin order has it.
type ExternalZone interface {
	// Lookup answers name (lower-case FQDN) of type qtype, on the
	// reader; ok is false for a name of no external zone (a few suffix
	// comparisons, no allocation) and for an NXDOMAIN that falls
	// through. NotSynced and ExternalTarget mean what they mean in the
	// cluster zone's answers.
	Lookup(name string, qtype uint16) (res Result, ok bool)
}
