package config

import (
	"io"
	"strings"
	"testing"
)

func TestClusterZoneErrors(t *testing.T) {
	listen := []string{"--listen", "127.0.0.1:5353"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(listen, "--cluster-zone", "remote"), `--cluster-zone "remote": want local or forward`},
		{append(listen, "--cluster-zone", "forward"), "--cluster-zone forward needs --cluster-dns"},
		{append(listen, "--cluster-zone", "forward", "--cluster-dns", "kube-dns"), `upstream "kube-dns": want an IP address`},
		{append(listen, "--cluster-dns", "10.0.0.10", "--cluster-dns-protocol", "quic"), `--cluster-dns-protocol "quic": want tcp or udp`},
		{append(listen, "--cluster-zone", "forward", "--cluster-dns", "127.0.0.1:5353"), "forwarding loop"},
	} {
		_, err := Load(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.args, err, c.want)
		}
	}
}
