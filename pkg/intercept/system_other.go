//go:build !linux

package intercept

import "errors"

// errUnsupported is returned on systems other than Linux.
var errUnsupported = errors.New("interception needs Linux (netlink and iptables)")

// New validates cfg; interception itself needs Linux.
func New(cfg Config) (*Interceptor, error) {
	if _, err := cfg.normalized(); err != nil {
		return nil, err
	}
	return nil, errUnsupported
}

// Cleanup needs Linux.
func Cleanup(cfg Config) error { return errUnsupported }
