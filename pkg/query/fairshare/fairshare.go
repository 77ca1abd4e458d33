// Package fairshare holds the one rule by which a bound on concurrent work
// shared by every client (queries resolved off the readers in
// pkg/query/server, exchanges with upstream in pkg/upstream, TCP
// connections) is cut into what one client may hold of it by default. It
// is its own package so that neither of those has to import the other.
package fairshare

// divisor: one client holds at most total/divisor by default, so that it
// takes that many clients at their share, flooding together, to fill the
// bound; the others' work still gets in until then.
const divisor = 8

// PerClient is the default share of total one client may hold:
// total/divisor, and at least floor, so that a small total still leaves a
// client room for the burst of an ordinary lookup. A floor above total
// lets one client hold all of total; callers that must not allow that
// bound the result by total themselves.
func PerClient(total, floor int) int { return max(total/divisor, floor) }
