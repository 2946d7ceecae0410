package flagsource

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed31b0e981/reservoir/internal/flagdtest"
	"github.com/seed31b0e981/reservoir/internal/testcert"
	"github.com/seed31b0e981/reservoir/rollout/authority"
)

// A source reaches a daemon serving TLS when told to (FlagdTLS), verifying
// it against FlagdCAFile, and follows it as over plaintext; it does not
// take a daemon whose certificate its CA did not sign, nor speak
// plaintext to a TLS daemon.
func TestGRPCFeedTLS(t *testing.T) {
	t.Parallel()
	certs := testcert.New(t)
	srv := flagdtest.NewTLS(t, flagdDoc(t, authority.ModeShadow, 1), certs.Server)
	logs := &logBuffer{}
	src, err := New(t.Context(), Config{FlagdAddr: srv.Addr(), FlagdTLS: true, FlagdCAFile: certs.CAFile,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), LoadTimeout: time.Second})
	must(t, err)
	t.Cleanup(func() { _ = src.Close() })
	if d := decide(t, src, "pod-a", 1); d.Mode != authority.ModeShadow || d.Version != 1 {
		t.Fatalf("over TLS the source answers %+v; want shadow at version 1", d)
	}
	if !strings.Contains(logs.String(), "tls=true") {
		t.Errorf("the log does not say the daemon is reached over TLS:\n%s", logs)
	}
	srv.Set(flagdDoc(t, authority.ModeMySQL, 2))
	answers(t, src, authority.ModeMySQL, 2)

	// Another CA: the daemon is an impostor to this source.
	other := testcert.New(t)
	wrong, err := New(t.Context(), Config{FlagdAddr: srv.Addr(), FlagdTLS: true, FlagdCAFile: other.CAFile,
		Logger: slog.New(slog.DiscardHandler), LoadTimeout: 200 * time.Millisecond})
	must(t, err)
	t.Cleanup(func() { _ = wrong.Close() })
	// Plaintext to a TLS daemon.
	plain, err := New(t.Context(), Config{FlagdAddr: srv.Addr(), Logger: slog.New(slog.DiscardHandler), LoadTimeout: 200 * time.Millisecond})
	must(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	time.Sleep(300 * time.Millisecond)
	if wrong.Loaded() || plain.Loaded() {
		t.Fatalf("loaded from a daemon it cannot verify: wrong CA %v, plaintext %v", wrong.Loaded(), plain.Loaded())
	}
	if err := wrong.ReadError(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("with the wrong CA ReadError = %v; want a certificate error", err)
	}

	// A CA file that cannot be read fails New: the source must not start
	// as if it could verify the daemon.
	if _, err := New(t.Context(), Config{FlagdAddr: srv.Addr(), FlagdTLS: true, FlagdCAFile: t.TempDir() + "/missing.pem",
		Logger: slog.New(slog.DiscardHandler)}); err == nil || !strings.Contains(err.Error(), "Config.FlagdCAFile") {
		t.Errorf("a missing CA file: %v; want an error naming Config.FlagdCAFile", err)
	}
}

// With a selector a source asks the daemon for one of its sources (the
// Flagd-Selector header and the request's field), at start and on the
// stream, and follows that one only; each document is still checked.
func TestGRPCFeedSelector(t *testing.T) {
	t.Parallel()
	srv := flagdtest.New(t, flagdDoc(t, authority.ModeRedis, 1))
	srv.SetSource("file:/etc/flagd/reservoir.json", flagdDoc(t, authority.ModeShadow, 5))
	srv.SetSource("file:/etc/flagd/other.json", flagdDoc(t, authority.ModeMySQL, 9))
	logs := &logBuffer{}
	src, err := New(t.Context(), Config{FlagdAddr: srv.Addr(), FlagdSelector: "file:/etc/flagd/reservoir.json",
		Logger: slog.New(slog.NewTextHandler(logs, nil)), LoadTimeout: time.Second})
	must(t, err)
	t.Cleanup(func() { _ = src.Close() })
	if d := decide(t, src, "pod-a", 1); d.Mode != authority.ModeShadow || d.Version != 5 {
		t.Fatalf("with a selector the source answers %+v; want the selected source's shadow at version 5", d)
	}
	srv.SetSource("file:/etc/flagd/other.json", flagdDoc(t, authority.ModeMySQL, 10))
	srv.SetSource("file:/etc/flagd/reservoir.json", flagdDoc(t, authority.ModeMySQL, 6))
	answers(t, src, authority.ModeMySQL, 6)
	srv.SetSource("file:/etc/flagd/reservoir.json", torn(t, authority.ModeShadow, 7))
	logged(t, logs, "rejected", 1)
	stillAnswers(t, src, authority.ModeMySQL, 6, "after a torn document from the selected source")
	sel := srv.Selectors()
	if len(sel) < 2 || slices.ContainsFunc(sel, func(s string) bool { return s != "file:/etc/flagd/reservoir.json" }) {
		t.Errorf("the daemon saw selectors %q; want every request to carry the selector", sel)
	}
}

// The TLS and selector settings need a daemon, and a CA needs TLS.
func TestFlagSourceConfigFlagdTLS(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Path: "f.json", FlagdTLS: true}, "need Config.FlagdAddr"},
		{Config{Path: "f.json", FlagdSelector: "x"}, "need Config.FlagdAddr"},
		{Config{FlagdAddr: "flagd:8015", FlagdCAFile: "ca.pem"}, "Config.FlagdCAFile needs Config.FlagdTLS"},
	} {
		if err := tc.cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.cfg, err, tc.want)
		}
	}
}
