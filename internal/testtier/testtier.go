// Package testtier is the fast test tier: `go test -short ./...` (and
// `make check`) runs every test that needs no server and skips, by name
// and with the reason, every test that needs one (MariaDB, Redis, the
// cluster, the secure Redis, a private server process, a browser, a built
// binary). The test helpers that hand out those servers call it, so a test
// that uses them needs no edit of its own.
//
// Without -short it does nothing: a missing server still fails the test,
// as it always has, so the full suite (CI, `make test`) never skips one
// silently.
package testtier

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Needs skips t under -short, saying what it needs (e.g. "MariaDB
// (RESERVOIR_MYSQL_DSN)"); without -short it returns and the caller goes
// on to find the thing or fail.
func Needs(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s; skipped in -short", what)
	}
}

// SkipExamples is for a package's TestMain, before m.Run: under -short it
// adds the named examples to -test.skip (an example cannot call t.Skip:
// it has no *testing.T) and prints one line saying which and why.
// Without -short it does nothing. It parses the flags if TestMain has not
// yet.
func SkipExamples(what string, names ...string) {
	if !flag.Parsed() {
		flag.Parse()
	}
	if !testing.Short() || len(names) == 0 {
		return
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	pattern := "^(" + strings.Join(quoted, "|") + ")$"
	// A top-level | is an alternation of whole (slash-separated)
	// patterns: a -skip given on the command line keeps its meaning.
	if old := flag.Lookup("test.skip").Value.String(); old != "" {
		pattern = old + "|" + pattern
	}
	if err := flag.Set("test.skip", pattern); err != nil {
		panic(fmt.Sprintf("testtier: set -test.skip: %v", err))
	}
	verb := "needs"
	if len(names) > 1 {
		verb = "need"
	}
	fmt.Fprintf(os.Stdout, "testtier: %s %s %s; skipped in -short\n", strings.Join(names, ", "), verb, what)
}
