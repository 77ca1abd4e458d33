package fairshare_test

import (
	"testing"

	"github.com/nodedns/nodedns/pkg/query/fairshare"
)

func TestPerClient(t *testing.T) {
	for _, tc := range []struct{ total, floor, want int }{
		{2000, 16, 250}, // the server's default MaxInflight
		{1000, 1, 125},  // the forwarder's default MaxInflight
		{1000, 4, 125},  // the server's default MaxTCPConns
		{8, 1, 1},
		{15, 1, 1}, // rounded down
		{16, 1, 2},
		{7, 1, 1}, // an eighth of it is 0: the floor
		{100, 16, 16},
		{10, 16, 16}, // the floor, even above total
		{0, 1, 1},
	} {
		if got := fairshare.PerClient(tc.total, tc.floor); got != tc.want {
			t.Errorf("PerClient(%d, %d) = %d, want %d", tc.total, tc.floor, got, tc.want)
		}
	}
}
