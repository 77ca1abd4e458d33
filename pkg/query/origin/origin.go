// Package origin carries who a query is being resolved for (the client's
// address and, when the client is a pod the agent knows, its namespace)
// through a context: from the server, which knows them, to the stages that
// share a bounded resource among clients, such as the upstream forwarder's
// in-flight slots. It holds no state of its own.
package origin

import (
	"context"
	"net/netip"
)

// Origin is who a query is resolved for. Namespace is empty when the client
// is not a known pod (a host-network client, another node, a pod before its
// informer event).
type Origin struct {
	Client    netip.Addr
	Namespace string
}

type ctxKey struct{}

// With returns ctx carrying o.
func With(ctx context.Context, o Origin) context.Context {
	return context.WithValue(ctx, ctxKey{}, o)
}

// From returns the Origin ctx carries; ok is false for work done on no
// client's behalf (prefetch, probes).
func From(ctx context.Context) (o Origin, ok bool) {
	o, ok = ctx.Value(ctxKey{}).(Origin)
	return o, ok && o.Client.IsValid()
}
