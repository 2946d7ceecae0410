package flagdoc

import (
	"strings"
	"testing"
)

// The path in a FlagsError's Field reads back into a document's path.
func TestFieldPath(t *testing.T) {
	t.Parallel()
	for field, want := range map[string]string{
		`flags["reservations.mode"].targeting.if[2]`: "/flags/reservations.mode/targeting/if/2",
		`$evaluators["pod:a.b[c]"]`:                  "/$evaluators/pod:a.b[c]",
		`flags["x"].metadata["shop:1.reason"]`:       "/flags/x/metadata/shop:1.reason",
		`version`:                                    "/version",
	} {
		got, ok := fieldPath(field)
		if !ok || strings.ReplaceAll(got, pathSep, "/") != want {
			t.Errorf("fieldPath(%s) = %q, %v; want %s", field, strings.ReplaceAll(got, pathSep, "/"), ok, want)
		}
	}
	for _, field := range []string{`flags[`, `flags["x`, `.a`, `a..b`} {
		if got, ok := fieldPath(field); ok {
			t.Errorf("fieldPath(%s) = %q; want not a path", field, got)
		}
	}
}
