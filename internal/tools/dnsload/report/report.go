// Package report is the one JSON line internal/tools/dnsload prints at the
// end of a run: dnsload fills it, and the end-to-end framework (e2e/framework)
// decodes it, so that the two cannot drift apart.
package report

import "fmt"

// Result is a dnsload run's outcome. Failed is Timeouts+BadRcode+Empty;
// LongestGap is the longest time without a good answer, in milliseconds,
// and GapAt where it began, in seconds from the start; PerSecond counts the
// queries sent in each second as [ok, failed]; Reconnects counts the sockets
// connected again after the kernel aborted one.
type Result struct {
	Sent         int      `json:"sent"`
	OK           int      `json:"ok"`
	Failed       int      `json:"failed"`
	Timeouts     int      `json:"timeouts"`
	BadRcode     int      `json:"bad_rcode"`
	Empty        int      `json:"empty"`
	FailPct      float64  `json:"fail_pct"`
	LongestGap   float64  `json:"longest_gap_ms"`
	GapAt        float64  `json:"gap_at_s"`
	P50          float64  `json:"p50_ms"`
	P99          float64  `json:"p99_ms"`
	PerSecond    [][2]int `json:"per_second"`
	QPSAsked     int      `json:"qps_asked"`
	SecondsAsked float64  `json:"seconds"`
	Reconnects   int      `json:"reconnects"`
}

// QPS is the rate reached: queries sent a second over the time asked.
func (r Result) QPS() float64 {
	if r.SecondsAsked <= 0 {
		return 0
	}
	return float64(r.Sent) / r.SecondsAsked
}

// String is the result in one line, for a test's failure message or log.
func (r Result) String() string {
	s := fmt.Sprintf("sent %d, ok %d, failed %d (timeouts %d, bad rcode %d, empty %d; %.2f %%), %.0f queries/s, longest gap %.0f ms at %.1f s, p50 %.1f ms, p99 %.1f ms",
		r.Sent, r.OK, r.Failed, r.Timeouts, r.BadRcode, r.Empty, r.FailPct, r.QPS(), r.LongestGap, r.GapAt, r.P50, r.P99)
	if r.Reconnects > 0 {
		s += fmt.Sprintf(", %d sockets connected again", r.Reconnects)
	}
	return s
}
