// Package netaddr checks the network addresses a configuration names, so
// the topology and the components it configures refuse the same ones with
// the same words.
package netaddr

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// HostPort reports whether addr is host:port with a host and a port from
// 1 to 65535, and no scheme (the components add their own: gRPC, the
// MySQL driver, Redis).
func HostPort(addr string) error {
	if strings.Contains(addr, "://") {
		return fmt.Errorf("%q must be host:port, without a scheme", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q must be host:port: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("%q must name a host (host:port)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q must be a number from 1 to 65535", addr, port)
	}
	return nil
}
