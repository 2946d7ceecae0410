package netaddr

import (
	"strings"
	"testing"
)

func TestHostPort(t *testing.T) {
	for _, ok := range []string{"flagd:8015", "127.0.0.1:1", "[::1]:65535"} {
		if err := HostPort(ok); err != nil {
			t.Errorf("HostPort(%q) = %v, want nil", ok, err)
		}
	}
	for addr, want := range map[string]string{
		"grpc://flagd:8015": "without a scheme",
		"flagd":             "must be host:port",
		":8015":             "must name a host",
		"flagd:0":           `port "0" must be a number from 1 to 65535`,
		"flagd:65536":       `port "65536" must be a number from 1 to 65535`,
		"flagd:http":        `port "http" must be a number`,
	} {
		if err := HostPort(addr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("HostPort(%q) = %v, want it saying %q", addr, err, want)
		}
	}
}
