// Package intercept owns the host side of node-local DNS: the link that
// holds the local DNS addresses (169.254.20.10, and optionally the kube-dns
// ClusterIP), the iptables rules that let queries to those addresses
// bypass conntrack, and the DNS fallback that sends them to other servers
// by NAT while no process holds a socket bound to them (fallback.go). It
// is not on the query path: nothing in the request pipeline imports it,
// and it never sees a DNS message.
//
// The life cycle, driven by pkg/agent:
//
//	ic, err := intercept.New(cfg) // validate, pick the iptables backend
//	ic.EnsureLink()               // link up, every local IP on it
//	// ... bind the listeners on the local IPs ...
//	ic.SetFallback(fb)            // the fallback's targets, when known
//	ic.EnsureRules()              // only now steer traffic to them
//	go ic.Run(ctx)                // put back whatever goes missing
//	// ... on exit:
//	if ok, why := intercept.ShouldTeardown(cfg); ok {
//		ic.Teardown() // rules first, then the link
//	}
//
// The link is a dummy link. Kernels built without the dummy driver (some
// hardened images) get an empty bridge instead, which holds local addresses
// the same way; the fallback is logged once. A link the package creates is
// marked with an ifalias ("nodedns: ...", see linkAlias), which lives in
// the kernel with the link, so the next agent (a restart, a rolling
// update, `nodedns cleanup`) knows it may delete it. A link found in place
// without the mark (NodeLocal DNSCache's dummy of the same name, an
// operator's bridge) is used but never deleted: Teardown removes only the
// addresses this process added to it.
//
// The rules are one table (see ruleTable in rules.go). Each is identified
// by its comment, inserted at the top of its chain, and exists exactly
// once: every pass checks for it first and removes copies left by a crashed
// or overlapping agent. iptables runs through whichever backend (nft or
// legacy) the node's kube-proxy uses, detected the way
// kubernetes-sigs/iptables-wrappers does it (Status().Backend says which);
// copies of our rules in the other backend, left from before a switch, are
// removed by EnsureRules and Teardown, since both backends see every
// packet.
//
// Limits: the package manages only the rules of its own Config; rules of
// other local IPs carrying a nodedns comment are left alone (another agent
// may own them) and only Cleanup removes them. RulesPresent reports the
// result of the last pass, not a live check, because /ready must stay cheap.
// Nothing here speaks nftables natively: kube-proxy's nftables mode still
// needs the iptables-nft compatibility binaries.
//
// Beneath it, pkg/intercept/peers finds the other processes serving the
// agent's addresses (nodedns agents, or foreign DNS servers such as a
// NodeLocal DNSCache left in place): what ShouldTeardown and /ready ask
// before this package touches what another may still use.
package intercept
