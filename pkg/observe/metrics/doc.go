// Package metrics owns the agent's figures: the Prometheus collectors behind
// /metrics (nodedns_* series, and CoreDNS-compatible coredns_* series so
// that dashboards and alerts written for CoreDNS and NodeLocal DNSCache
// work unchanged; see coredns.go), the JSON document behind /stats and the
// readable report `nodedns stats` prints of it (report.go), and the
// sampled query log, bounded in lines a second in all and per client
// (querylog.go).
//
// A Recorder is the server's Observer: it is told about every answered query
// and keeps what it needs in fixed arrays of atomic counters (answers by
// source and rcode, a duration histogram by source, per-second buckets for
// the QPS windows, and for the CoreDNS series counters by zone, listener,
// protocol, family, type and rcode with lock-free histograms from
// pkg/observe/hist), so that the serving path takes no lock and allocates
// nothing. Top query names and clients are estimated from a sample (one
// event in TopSample per source and rcode) with the Space-Saving algorithm
// in a bounded table whose counts halve every minute: they show who is
// loud now, approximately, and cost bounded memory whatever the traffic.
// Query names reach /stats and the query log only, never a metric label.
//
// Per-namespace figures (namespaces.go): the busiest Config.Namespaces
// namespaces of this node's pods are counted apart, each in fixed atomic
// counters found through a table keyed by the pod table's namespace
// string; the rest count under "other", clients that are no pod of this
// node under "_nonpod". Which namespaces are counted apart changes only
// with hysteresis and a minimum tenure, so that a namespace does not flap
// between its own series and "other". The search-path report
// (searchpath.go) samples the first expansions pods send into a bounded
// table and says, per workload, what each lookup costs and what would fix
// it; the busiest pods and failing names of a namespace come from a sample
// too. Recorder.Run (optional) keeps a coarse clock so that Observe does
// not read the system clock either, and reconsiders which namespaces are
// counted apart.
//
// Figures owned by other packages (cache, upstreams, interception,
// informers, the server's own counters) are read at scrape time through the
// funcs in Sources, each as its owner keeps it (cache.Stats,
// upstream.ServerStats, upstream.ForwarderStats, server.Stats,
// intercept.Status, k8s.Stats: one type each, whose JSON names are the
// /stats document's). Only the peers report, a list the agent groups by
// kind from pkg/intercept/peers, comes as a struct defined here (PeerFigures).
//
// Limits: a namespace's figures start when it is first counted apart (its
// queries before count under "other"); the QPS windows count whole seconds
// before the current one (the figure lags by up to a second); top-k counts
// are estimates (over-counted by at most the evicted minimum, times the
// sample rate); p50/p99 in /stats are read from histogram buckets (a
// factor of two wide); at most 64 zones are counted apart in the CoreDNS
// series.
package metrics
