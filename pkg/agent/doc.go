// Package agent owns the life of a running nodedns agent: Build wires the
// stages of the query path (upstream forwarder, cache, static records,
// rewrites, the cluster zone from the API server or forwarded to the
// cluster DNS, the server) with the metrics recorder, the admin endpoint
// and the node's interception; Run binds and serves, in the order that
// never drops a pod's query (the link, then the listeners once the cluster
// index synced or another agent carries the traffic, then the rules), and
// on cancellation drains (lameduck, sockets closed, interception removed
// unless another agent serves the addresses).
//
// While it runs the agent reloads its configuration as one transaction
// (reload.go): the file and the command line are loaded and validated
// whole, every change is prepared by its applier, and only then committed;
// a setting the table (pkg/config) marks restart-only keeps its running
// value and is logged. The kube-dns ConfigMap directory is polled and
// applied under the agent's own settings (kubedns.go); other processes
// serving our addresses are watched for /ready (peers.go); the DNS
// fallback's targets (fallback-dns: addresses, and the servers of Services
// from the cluster index) are kept current in the interception
// (fallback.go).
//
// The agent owns no query-path logic itself: it maps the configuration
// onto the packages' own Configs and wires their interfaces together.
package agent
