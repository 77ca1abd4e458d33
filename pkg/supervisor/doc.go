// Package supervisor keeps a node's DNS sockets alive across the death of
// the process that serves them.
//
// `nodedns serve` runs as two processes: this supervisor, small and
// simple, and the serving process (the agent: informers, cache,
// forwarder, interception), which it starts as its child. The child asks
// the supervisor for its listening sockets over a control socket
// (SCM_RIGHTS); the supervisor binds each once and keeps a copy. When the
// child dies (a crash, kill -9, an OOM kill) the sockets stay bound, so
// the kernel keeps queueing the pods' queries on them, and a new child,
// started at once, takes the same sockets and answers what waited: no
// query is refused, none goes elsewhere. A child that stops reading (a
// SIGSTOP, a deadlock) is found in /proc (stopped) or by a query left
// unread at the head of a socket's queue, killed and replaced the same
// way.
//
// When no child can serve for HangTimeout after the last one died (a
// crash loop of the serving code, a child that cannot start), the
// supervisor closes its sockets. With no socket on the addresses the
// node's fallback rules (pkg/intercept) send the queries to the
// central cluster DNS instead of into a queue nobody reads; the sockets
// are bound again when a child asks for them. The supervisor itself is
// the one single point left: if it dies the child dies with it
// (PR_SET_PDEATHSIG), kubelet restarts the container, and the fallback
// rules answer meanwhile.
//
// On SIGTERM or SIGINT the supervisor passes the signal on (the child
// runs its lameduck and drain), closes its copies of the sockets when the
// child says it drains, and waits for the child, which removes the
// interception as an unsupervised agent would (it asks the supervisor
// whether this is a stop or a death to be replaced). With no child
// running at the stop, Config.Teardown does it. SIGHUP is passed on
// (reload).
//
// What it reports (Status, through the child's /stats and /metrics): the
// processes, how many children were started, each exit with its reason
// (exit code, signal, OOM kill, hung) and how often the sockets were
// released.
package supervisor
