package topology

import (
	"strings"
	"testing"
)

// flags_source = "flagd" takes its daemon from flagd_addr, which is
// required with it, refused with any other source, and checked; the
// errors name the key.
func TestFlagsFromFlagd(t *testing.T) {
	withSource := func(lines string) string {
		return strings.Replace(sample, "flags_file = \"flags.json\"\n", lines, 1)
	}
	c, err := Parse([]byte(withSource("flags_source = \"flagd\"\nflagd_addr = \"flagd:8015\"\n")))
	if err != nil {
		t.Fatal(err)
	}
	if c.FlagsSource != FlagsFromFlagd || c.FlagdAddr != "flagd:8015" {
		t.Errorf("parsed flags_source %q, flagd_addr %q", c.FlagsSource, c.FlagdAddr)
	}
	for _, tc := range []struct{ lines, want string }{
		{"flags_source = \"flagd\"\n", `flagd_addr is required with flags_source = "flagd"`},
		{"flags_source = \"flagd\"\nflagd_addr = \"flagd\"\n", `flagd_addr "flagd" must be host:port`},
		{"flags_source = \"flagd\"\nflagd_addr = \"grpc://flagd:8015\"\n", "flagd_addr \"grpc://flagd:8015\" must be host:port, without a scheme"},
		{"flags_source = \"flagd\"\nflagd_addr = \"flagd:8015\"\nflags_file = \"flags.json\"\n", `flags_file is set but flags_source is "flagd"`},
		{"flags_file = \"flags.json\"\nflagd_addr = \"flagd:8015\"\n", `flagd_addr is set but flags_source is "file"`},
		{"flags_source = \"database\"\nflagd_addr = \"flagd:8015\"\n", `flagd_addr is set but flags_source is "database"`},
		{"flags_source = \"daemon\"\n", `flags_source "daemon" must be "file", "database", "flagd", "ofrep" or "provider"`},
	} {
		_, err := Parse([]byte(withSource(tc.lines)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: want an error containing %q, got %v", tc.lines, tc.want, err)
		}
	}
}
