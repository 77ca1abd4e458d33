package origin_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/nodedns/nodedns/pkg/query/origin"
)

func TestWithFrom(t *testing.T) {
	if _, ok := origin.From(context.Background()); ok {
		t.Fatal("origin found in a bare context")
	}
	want := origin.Origin{Client: netip.MustParseAddr("10.244.1.5"), Namespace: "team-a"}
	ctx, cancel := context.WithCancel(origin.With(context.Background(), want))
	defer cancel()
	if got, ok := origin.From(context.WithoutCancel(ctx)); !ok || got != want {
		t.Fatalf("From = %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := origin.From(origin.With(context.Background(), origin.Origin{})); ok {
		t.Fatal("an origin without a client address counts as one")
	}
}
