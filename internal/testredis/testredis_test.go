package testredis

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// Each test gets its own prefix, sees only its keys, and its keys are gone
// when it ends, on every node of the cluster.
func TestPrefixIsIsolatedAndCleanedUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		new  func(testing.TB) *Redis
		need func(testing.TB) // here, not in "use" only: what follows reads its keys
	}{
		{"standalone", New, func(tb testing.TB) { Addr(tb) }},
		{"cluster", NewCluster, func(tb testing.TB) { ClusterAddrs(tb) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.need(t)
			var used *Redis
			t.Run("use", func(t *testing.T) {
				a, b := tc.new(t), tc.new(t)
				if a.Prefix == b.Prefix || strings.ContainsAny(a.Prefix, "{}") {
					t.Fatalf("prefixes %q and %q: want distinct, without braces", a.Prefix, b.Prefix)
				}
				ctx := context.Background()
				for i := range 20 { // hash tags spread the keys over slots
					if err := a.Client.Set(ctx, fmt.Sprintf("%s{s%d}:k", a.Prefix, i), i, 0).Err(); err != nil {
						t.Fatal(err)
					}
				}
				if na, nb := len(a.Keys(t)), len(b.Keys(t)); na != 20 || nb != 0 {
					t.Fatalf("keys: %d under a's prefix, %d under b's; want 20 and 0", na, nb)
				}
				used = a
			})
			if keys := used.Keys(t); len(keys) != 0 {
				t.Errorf("keys left after the test ended: %v", keys)
			}
		})
	}
}

// fatalTB records the failure (or the skip) instead of failing (or
// skipping) the real test.
type fatalTB struct {
	testing.TB
	msg     string
	skipped bool
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fatalTB) Skipf(format string, args ...any) {
	f.msg, f.skipped = fmt.Sprintf(format, args...), true
	runtime.Goexit()
}

// A missing server is a failure that says what to run, never a skip; but
// under -short (the fast tier, testtier) every test that needs a server
// skips, saying which variable it needs. (Not parallel: it changes the
// environment while no parallel test runs.)
func TestMissingServerFails(t *testing.T) {
	for _, tc := range []struct {
		env  string
		call func(testing.TB)
	}{
		{EnvAddr, func(tb testing.TB) { New(tb) }},
		{EnvClusterAddrs, func(tb testing.TB) { NewCluster(tb) }},
	} {
		t.Setenv(tc.env, "")
		f := &fatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			tc.call(f)
		}()
		<-done
		if testing.Short() {
			if !f.skipped || !strings.Contains(f.msg, tc.env) || !strings.Contains(f.msg, "-short") {
				t.Errorf("without %s under -short: skipped %v with %q, want a skip naming the variable and -short", tc.env, f.skipped, f.msg)
			}
			continue
		}
		if f.skipped || !strings.Contains(f.msg, tc.env) || !strings.Contains(f.msg, "scripts/services") {
			t.Errorf("without %s: failure %q, want one naming the variable and how to start the servers", tc.env, f.msg)
		}
	}
}
